"""Running the canaries and publishing their verdicts: on the pool report (kept here, read by the
liveness endpoint) and as the ``IsolationVerified`` condition of every tenant on the pool.

One canary per pool at a time, one pool after another: a round never holds more than one GPU of
the cluster. A pool is attested again after `interval` seconds, or at once when its configuration
or the canary image changes (the fingerprint on the canary pod).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gputenant import API_VERSION, KIND
from gputenant.api import conditions as reasons
from gputenant.api.status import ATTESTATION
from gputenant.attestation.promise import canary_pod, fingerprint, promise_of
from gputenant.attestation.verdict import AttestationOutcome, Verdict, judge, parse_report
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import Pool
from gputenant.kube import ApiError, KubeClient
from gputenant.tenant_status import conditions as cond
from gputenant.tenant_status.writers import write_conditions
from gputenant.timefmt import rfc3339

log = logging.getLogger(__name__)

SIMULATED_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""kwok's mark: such a node runs no container, so a canary bound there can never report."""
CONDITION_OF = {AttestationOutcome.VERIFIED: ("True", reasons.ATTESTED), AttestationOutcome.FAILED: ("False", reasons.ATTESTATION_FAILED),
                AttestationOutcome.UNATTESTED: ("Unknown", reasons.UNATTESTED)}


@dataclass(frozen=True)
class Attestation:
    pool: str
    verdict: Verdict
    fingerprint: str
    at: datetime

    def summary(self) -> dict:
        """What the pool report shows: IsolationVerified, its reason, the numbers and when."""
        status, reason = CONDITION_OF[self.verdict.outcome]
        return {"isolationVerified": status, "reason": reason, "outcome": self.verdict.outcome.value,
                "message": self.verdict.message, "measured": dict(self.verdict.measured), "at": rfc3339(self.at)}


async def run_canary(client: KubeClient, pod: dict, *, schedule_timeout: float, run_timeout: float,
                     poll: float = 1.0) -> tuple[str | None, str]:
    """Create the canary pod, wait for its container to end and return its termination message (or
    None and why there is none); the pod is deleted afterwards in every case."""
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    await _delete_and_wait(client, name, namespace, poll)
    try:
        await client.create(pod)
    except ApiError as error:
        if error.transient:
            raise
        return None, f"the API server refused the canary pod in namespace {namespace}: {error}"
    loop = asyncio.get_running_loop()
    started = loop.time()
    running_since: float | None = None
    try:
        while True:
            live = await client.get("v1", "Pod", name, namespace) or {}
            node = (live.get("spec") or {}).get("nodeName")
            terminated = _terminated(live)
            if terminated is not None:
                message = terminated.get("message")
                return message, "" if message else (
                    f"the canary ended ({terminated.get('reason', 'no reason')}, exit code "
                    f"{terminated.get('exitCode')}) without a report")
            status = live.get("status") or {}
            if status.get("phase") in ("Failed", "Succeeded"):
                return None, (f"the canary pod {status['phase'].lower()} on node {node} before its container ran: "
                              f"{status.get('reason', '')} {status.get('message', '')}".rstrip())
            if node and await _simulated(client, node):
                return None, f"its canary was bound to node {node}, which is simulated (kwok): no container runs there"
            now = loop.time()
            if not node and now - started > schedule_timeout:
                return None, f"the canary pod was not scheduled in {schedule_timeout:g}s: {_unscheduled(live)}"
            if node and running_since is None:
                running_since = now
            if running_since is not None and now - running_since > run_timeout:
                return None, f"the canary on node {node} did not finish in {run_timeout:g}s"
            await asyncio.sleep(poll)
    finally:
        await client.delete("v1", "Pod", name, namespace)


async def _delete_and_wait(client: KubeClient, name: str, namespace: str, poll: float, timeout: float = 60) -> None:
    """A canary left by an earlier operator (it was stopped mid-round) goes before a new one."""
    if not await client.delete("v1", "Pod", name, namespace):
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await client.get("v1", "Pod", name, namespace) is not None and loop.time() < deadline:
        await asyncio.sleep(poll)


def _terminated(pod: dict) -> dict | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return terminated
    return None


def _unscheduled(pod: dict) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason") or "no reason given"
    return "no scheduler placed it"


async def _simulated(client: KubeClient, node: str) -> bool:
    live = await client.get("v1", "Node", node) or {}
    key, value = SIMULATED_NODE_ANNOTATION
    return (live.get("metadata") or {}).get("annotations", {}).get(key) == value


@dataclass
class Attestor:
    """The last attestation of each pool, and when the next is due."""

    image: str
    namespace: str
    interval: float
    queue: str | None = None
    """KAI queue the canaries are charged to (operator-owned, not a tenant's)."""
    schedule_timeout: float = 120.0
    run_timeout: float = 300.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    results: dict[str, Attestation] = field(default_factory=dict)

    def due(self, pool: Pool) -> bool:
        last = self.results.get(pool.name)
        return (last is None or last.fingerprint != fingerprint(pool, self.image)
                or (self.clock() - last.at).total_seconds() >= self.interval)

    async def attest(self, client: KubeClient, pool: Pool) -> Attestation:
        """Run the pool's canary now and keep its verdict."""
        pod = canary_pod(pool, self.namespace, self.image, self.queue)
        promise = promise_of(pool)
        message, why = await run_canary(client, pod, schedule_timeout=self.schedule_timeout,
                                        run_timeout=self.run_timeout)
        report = parse_report(message)
        verdict = judge(promise, report, why or "its report is not readable JSON from the canary")
        result = Attestation(pool.name, verdict, fingerprint(pool, self.image), self.clock())
        self.results[pool.name] = result
        return result

    async def round(self, client: KubeClient, config: OperatorConfig) -> list[Attestation]:
        """Attest every pool that is due, one after another; forget pools no longer configured."""
        names = {pool.name for pool in config.pools}
        for gone in set(self.results) - names:
            del self.results[gone]
        done = []
        for pool in config.pools:
            if self.due(pool):
                result = await self.attest(client, pool)
                log.info("isolation of pool %s: %s: %s", pool.name, result.verdict.outcome.value,
                         result.verdict.message)
                done.append(result)
        return done

    def summary(self, pool: str) -> dict:
        result = self.results.get(pool)
        if result is None:
            return {"isolationVerified": "Unknown", "reason": reasons.UNATTESTED, "outcome": AttestationOutcome.UNATTESTED.value,
                    "message": f"pool {pool} has not been attested yet"}
        return result.summary()


HAMI_NOT_ATTESTED = "HAMi-core's memory and compute caps are best effort and not yet attested on a GPU"


def tenant_condition(attestor: Attestor, pool: str, mode: str | None = None) -> tuple[str, str, str]:
    """IsolationVerified's (status, reason, message) for a tenant on `pool`; a failed or missing
    attestation says the tier's promise is withheld, and for HAMi mode that its caps are best effort."""
    summary = attestor.summary(pool)
    status, reason, message = summary["isolationVerified"], summary["reason"], summary["message"]
    if status != "True":
        withheld = HAMI_NOT_ATTESTED if mode == "HAMi" else "the isolation this tier promises is not verified"
        message = f"{withheld}: {message}"
    return status, reason, message


async def publish_tenant_conditions(client: KubeClient, attestor: Attestor) -> list[str]:
    """IsolationVerified on every tenant the policy placed on a pool (status.sharing.pool), written
    only when it changed. The attestation writer applies this one condition under its own field
    manager; `conditions` is a list-map keyed by type, so the pipeline's conditions are untouched and
    no lock with the pipeline is needed. Returns the tenants written."""
    try:
        tenants = await client.list(API_VERSION, KIND)
    except ApiError as error:
        if error.not_found:
            return []
        raise
    written = []
    for tenant in tenants:
        sharing = (tenant.get("status") or {}).get("sharing") or {}
        pool = sharing.get("pool")
        if not pool:
            continue
        name = tenant["metadata"]["name"]
        wanted = tenant_condition(attestor, pool, sharing.get("mode"))
        if _holds(tenant, wanted):
            continue
        conditions = cond.parse((tenant.get("status") or {}).get("conditions") or [])
        updated = cond.set_condition(conditions, reasons.ISOLATION_VERIFIED, *wanted,
                                     tenant["metadata"].get("generation"), rfc3339(attestor.clock()))
        try:
            await write_conditions(client, name, updated, ATTESTATION)
        except ApiError as error:
            if not error.not_found:
                raise
            continue
        written.append(name)
    return written


def _holds(tenant: dict, wanted: tuple[str, str, str]) -> bool:
    current = cond.find(cond.parse((tenant.get("status") or {}).get("conditions") or []), reasons.ISOLATION_VERIFIED)
    return bool(current and (current.status.value, current.reason, current.message) == wanted
                and current.observed_generation == tenant["metadata"].get("generation"))
