"""What the operator does with each usage read: the summary into every tenant's status (only when
`summary.worth_writing`), and the idle policy (`idle.idle_sleep_verdict`) applied. Called by the
usage loop, so both happen on its interval, never on every reconcile. `status.usage` is applied under
the usage writer's own field manager: no lock with the pipeline is needed, neither can overwrite the
other's fields."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from gputenant import API_VERSION, KIND
from gputenant.api import conditions as reasons
from gputenant.api.hub import SleepSpec
from gputenant.api.status import UsageStatus
from gputenant.config.models import Accounting
from gputenant.kube import ApiError, KubeClient
from gputenant.tenant_status.writers import write_usage
from gputenant.timefmt import rfc3339
from gputenant.usage.idle import IDLE_SLEPT_ANNOTATION, IdleVerdict, idle_sleep_verdict, non_preemptible_pods
from gputenant.usage.model import TenantUsage
from gputenant.usage.summary import usage_status, worth_writing

log = logging.getLogger(__name__)

POD_GROUP_API = "scheduling.run.ai/v2alpha2"


@dataclass
class Published:
    """What one round wrote: tenants whose status.usage was written, tenants put to sleep."""

    written: list[str] = field(default_factory=list)
    slept: list[str] = field(default_factory=list)


def _previous(body: dict) -> UsageStatus | None:
    try:
        recorded = (body.get("status") or {}).get("usage")
        return UsageStatus.model_validate(recorded) if recorded else None
    except ValidationError:
        return None


def _sleep_spec(body: dict) -> SleepSpec:
    try:
        return SleepSpec.model_validate((body.get("spec") or {}).get("sleep") or {})
    except ValidationError:
        return SleepSpec()


async def publish_usage(client: KubeClient, tenants: list[dict], usage: list[TenantUsage],
                        window: str, now: datetime, accounting: Accounting | None = None) -> Published:
    """Status and idle policy for each of `tenants` (GpuTenant bodies) that `usage` covers; with
    `accounting`, the cost of each tenant's hours by share."""
    published = Published()
    by_tenant = {tenant_usage.tenant: tenant_usage for tenant_usage in usage}
    for body in tenants:
        name = body["metadata"]["name"]
        if name not in by_tenant:
            continue
        previous = _previous(body)
        summary = usage_status(by_tenant[name], window, now, previous, accounting)
        if worth_writing(previous, summary, now):
            await write_usage(client, name, summary)
            published.written.append(name)
        sleep = _sleep_spec(body)
        if sleep.idle is None or sleep.asleep or summary.all_idle_since is None:
            continue
        verdict = await _idle_verdict(client, by_tenant[name].namespace, name, sleep, summary, now)
        if verdict.sleep:
            await _put_to_sleep(client, body, verdict, now)
            published.slept.append(name)
        else:
            level = logging.INFO if verdict.reason == reasons.NON_PREEMPTIBLE_WORKLOAD else logging.DEBUG
            log.log(level, "tenant %s: not put to sleep: %s (%s)", name, verdict.message, verdict.reason)
    return published


async def _idle_verdict(client: KubeClient, namespace: str, name: str, sleep: SleepSpec, summary: UsageStatus,
                        now: datetime) -> IdleVerdict:
    pods = await client.list("v1", "Pod", namespace=namespace)
    pod_groups: dict[str, str] = {}
    try:
        for group in await client.list(POD_GROUP_API, "PodGroup", namespace=namespace):
            pod_groups[group["metadata"]["name"]] = str((group.get("spec") or {}).get("preemptibility") or "")
    except ApiError as error:
        # without KAI's PodGroups (not installed, or not readable) the pods' own label and priority decide
        log.debug("tenant %s: PodGroups not read (%s); judging preemptibility from the pods", name, error)
    return idle_sleep_verdict(sleep, summary, now, non_preemptible_pods(pods, pod_groups))


async def _put_to_sleep(client: KubeClient, body: dict, verdict: IdleVerdict, now: datetime) -> None:
    """spec.sleep.asleep set by the operator, so waking is the same switch for everyone; the
    annotation makes the Asleep condition name the idle policy."""
    name = body["metadata"]["name"]
    await client.patch(API_VERSION, KIND, name, {"metadata": {"annotations": {IDLE_SLEPT_ANNOTATION: rfc3339(now)}},
                                                 "spec": {"sleep": {"asleep": True}}})
    try:
        await client.post_event({**body, "apiVersion": API_VERSION, "kind": KIND}, "Normal", verdict.reason,
                                verdict.message, rfc3339(now))
    except ApiError as error:
        log.warning("tenant %s: could not post event %s: %s", name, verdict.reason, error)
    log.info("tenant %s: put to sleep: %s", name, verdict.message)
