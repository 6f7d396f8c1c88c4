"""The tenant status's writers, run concurrently against the real API server, lose nothing.

Three writers of a GpuTenant's status run in this process with the operator's own client, many
rounds each, interleaved: the pipeline's status write (`reconcile.pipeline.finish`, after a pass
read the tenant, as `Reconciler.reconcile` does, under the tenant's lock as `Cell.reconcile`
holds it), the usage loop's (`usage.publish.publish_usage`, no lock, as in the operator) and the
attestation loop's (`attestation.run.publish_tenant_conditions`). Every round of every writer
carries its round number. A watch on the tenant sees every version the API server stored, in
order, and no version may go back on a writer's round: one that does is a lost update (a writer
wrote back what another had replaced since its read). The last version holds every writer's last
round, and the managed fields name one field manager per writer.
"""

from __future__ import annotations

import asyncio
import random
import threading
from datetime import UTC, datetime

import kubernetes
import pytest
import yaml

from gputenant import GROUP, KIND, VERSION
from gputenant.api import conditions as reasons
from gputenant.api.status import SharingStatus, VClusterStatus
from gputenant.attestation.run import Attestation, Attestor, publish_tenant_conditions
from gputenant.attestation.verdict import AttestationOutcome, Verdict
from gputenant.config.models import OperatorConfig
from gputenant.kube import KubeClient
from gputenant.reconcile.context import Pass, Services
from gputenant.reconcile.memory import TenantMemory
from gputenant.reconcile.pipeline import finish
from gputenant.usage.model import TenantUsage
from gputenant.usage.publish import publish_usage

NAME = "status-writers"
API_VERSION = f"{GROUP}/{VERSION}"
POOL = "writers-pool"
ROUNDS = 40
FIELD_MANAGER = "gpu-tenant-operator"


def rounds_in(status: dict) -> dict[str, int | None]:
    """Each writer's round as one stored version of the status shows it (None: not there)."""
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    hash_ = (status.get("vcluster") or {}).get("valuesHash", "")
    isolation = conditions.get(reasons.ISOLATION_VERIFIED, {}).get("message", "")
    parts = [int(conditions[t]["message"].removeprefix("pipeline round "))
             for t in reasons.PART_CONDITIONS if t in conditions]
    return {
        "pipeline": int(hash_.removeprefix("round-")) if hash_ else None,
        "pipeline conditions": min(parts) if len(parts) == len(reasons.PART_CONDITIONS) else None,
        "usage": (status.get("usage") or {}).get("gpusHeld"),
        "attestation": int(isolation.removeprefix("round ")) if isolation else None,
    }


class History:
    """Every version of the tenant the API server stores from `since` on, by a watch in a thread."""

    def __init__(self, plane, since: str):
        self.versions: list[dict] = []
        self.until: str | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(plane, since), daemon=True)
        self._thread.start()

    def _watch(self, plane, since: str) -> None:
        with plane.api_client() as api:
            objects = kubernetes.client.CustomObjectsApi(api)
            watch = kubernetes.watch.Watch()
            for event in watch.stream(objects.list_cluster_custom_object, GROUP, VERSION, "gputenants",
                                      field_selector=f"metadata.name={NAME}", resource_version=since,
                                      timeout_seconds=300):
                body = event["object"]
                self.versions.append(body)
                if self.until is not None and int(body["metadata"]["resourceVersion"]) >= int(self.until):
                    watch.stop()
        self.done.set()

    def up_to(self, resource_version: str) -> list[dict]:
        self.until = resource_version
        if not any(int(v["metadata"]["resourceVersion"]) >= int(resource_version) for v in self.versions):
            assert self.done.wait(120), "the watch did not reach the last version"
        return self.versions


async def pipeline_writer(client: KubeClient, lock: asyncio.Lock, rounds: range,
                          memory: TenantMemory | None = None) -> None:
    """Pipeline passes: read the tenant, run 'the steps' (a pause: a real pass applies objects and asks
    Helm between its read and its status write), set every part and the status parts, write."""
    services = Services(client, OperatorConfig(), releases=None, issuer=None,  # type: ignore[arg-type]
                        memory=memory if memory is not None else TenantMemory())
    for i in rounds:
        async with lock:
            live = await client.get(API_VERSION, KIND, NAME)
            run = Pass(services, live, datetime.now(UTC))
            await asyncio.sleep(random.uniform(0, 0.03))
            run.status.sharing = SharingStatus(mode="TimeSlicing", pool=POOL, reason="test")
            run.status.vcluster = VClusterStatus(release=NAME, values_hash=f"round-{i}")
            for part in reasons.PART_CONDITIONS:
                run.set(part, True, reasons.APPLIED, f"pipeline round {i}")
            await finish(run)
            assert run.outcome.status_written, f"pipeline round {i} wrote nothing"


async def usage_writer(client: KubeClient, rounds: range) -> None:
    """Usage loop rounds: list the tenants, read 'Prometheus' (a pause), publish GPUs held = round."""
    for i in rounds:
        tenants = [await client.get(API_VERSION, KIND, NAME)]
        await asyncio.sleep(random.uniform(0, 0.03))
        usage = TenantUsage(tenant=NAME, namespace=f"tenant-{NAME}", gpus_held=i, held_gpu_hours=float(i))
        published = await publish_usage(client, tenants, [usage], "1h", datetime.now(UTC))
        assert published.written == [NAME], f"usage round {i} wrote nothing"


async def attestation_writer(client: KubeClient, rounds: range) -> None:
    """Attestation rounds: the pool's verdict says its round; the tenant's IsolationVerified follows."""
    attestor = Attestor(image="canary", namespace="canaries", interval=3600)
    for i in rounds:
        attestor.results[POOL] = Attestation(POOL, Verdict(AttestationOutcome.VERIFIED, f"round {i}"), "fingerprint",
                                             datetime.now(UTC))
        assert await publish_tenant_conditions(client, attestor) == [NAME], f"attestation round {i} wrote nothing"
        await asyncio.sleep(random.uniform(0, 0.01))


async def write_concurrently(plane) -> None:
    async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), FIELD_MANAGER) as client:
        lock = asyncio.Lock()
        await pipeline_writer(client, lock, range(0, 1))  # status.sharing.pool, which attestation needs
        await asyncio.gather(pipeline_writer(client, lock, range(1, ROUNDS + 1)),
                             usage_writer(client, range(1, ROUNDS + 1)),
                             attestation_writer(client, range(1, ROUNDS + 1)))


@pytest.fixture
def writers_tenant(plane, crds):
    plane.kubectl("delete", "gputenant", NAME, "--ignore-not-found", "--wait=true")
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-", input=yaml.safe_dump({
        "apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": NAME},
        "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "alice"}], "gpu": {"quota": 1}}}))
    yield NAME
    plane.kubectl("delete", "gputenant", NAME, "--ignore-not-found", "--wait=false")


def test_concurrent_status_writers_lose_nothing(plane, writers_tenant):
    start = plane.cluster_object(GROUP, VERSION, "gputenants", NAME)
    history = History(plane, start["metadata"]["resourceVersion"])
    asyncio.run(write_concurrently(plane))
    final = plane.cluster_object(GROUP, VERSION, "gputenants", NAME)
    versions = history.up_to(final["metadata"]["resourceVersion"])

    assert len(versions) >= 3 * ROUNDS, f"the watch saw {len(versions)} versions for {3 * ROUNDS} writes"
    highest: dict[str, int] = {}
    for version in versions:
        for writer, seen in rounds_in(version.get("status") or {}).items():
            if writer in highest:
                assert seen is not None and seen >= highest[writer], (
                    f"lost update: {writer} went from round {highest[writer]} to {seen} at resourceVersion "
                    f"{version['metadata']['resourceVersion']}")
            if seen is not None:
                highest[writer] = seen

    last = rounds_in(final["status"])
    assert last == {"pipeline": ROUNDS, "pipeline conditions": ROUNDS, "usage": ROUNDS, "attestation": ROUNDS}
    ready = next(c for c in final["status"]["conditions"] if c["type"] == reasons.READY)
    assert ready["status"] == "True"
    managers = {entry["manager"] for entry in final["metadata"]["managedFields"]
                if entry.get("subresource") == "status"}
    assert {f"{FIELD_MANAGER}-{writer}" for writer in ("pipeline", "usage", "attestation")} <= managers


def test_status_an_older_release_merge_patched_is_handed_to_the_writers(plane, writers_tenant):
    """A release before server-side apply of status merge-patched it (its record: the client's user
    agent, operation Update); after the first pipeline pass each writer owns its fields, so the usage
    writer no longer applying allIdleSince (a GPU works again) removes it. The hand-over is settled
    once: later passes of the process do not look for such records again."""
    since = "2026-01-01T00:00:00Z"
    memory = TenantMemory()

    async def main():
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), FIELD_MANAGER) as client:
            await client.patch(API_VERSION, KIND, NAME, {"status": {"usage": {
                "window": "1h", "gpusHeld": 1, "idleGpuCount": 1, "allIdleSince": since, "observedAt": since}}},
                subresource="status")
            await pipeline_writer(client, asyncio.Lock(), range(1, 2), memory)
            await usage_writer(client, range(2, 3))
    asyncio.run(main())

    final = plane.cluster_object(GROUP, VERSION, "gputenants", NAME)
    assert final["status"]["usage"]["gpusHeld"] == 2
    assert "allIdleSince" not in final["status"]["usage"], final["metadata"]["managedFields"]
    assert not [entry for entry in final["metadata"]["managedFields"]
                if entry["manager"] == FIELD_MANAGER and entry.get("subresource") == "status"]
    assert memory.ownership_settled(final["metadata"]["uid"])
