"""High availability (issue 15 item 4): leader election on a Lease, and two replicas in-cluster.

- The elector itself against the real API server: one holder at a time, a released Lease taken at
  once, an abandoned one taken after its duration.
- Two replicas from the chart on the plane's real node (the image and route of
  test_operator_incluster): a stream of tenant pod creations (server-side dry runs: every webhook
  is called, nothing is stored) while the leading replica is lost, twice: its pod deleted with no
  grace period (the kubelet still runs what it can of its preStop pause and stops it with SIGTERM,
  so it releases the Lease), and its container SIGKILLed through the node's containerd (nothing
  released: the Lease must expire). The refusals and errors are counted and printed; admission
  must work again after a bounded blip, the Lease must move to the other replica, and a GpuTenant
  change made then must be reconciled.
- The chart's defaults through a `helm upgrade` of both replicas and a graceful deletion of one:
  no tenant pod refused, and at most one webhook call cut with its keep-alive connection
  (admission_stream.CUT_CONNECTION: the API server retries no webhook POST).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import kubernetes
import pytest

from gputenant.kube import KubeClient
from gputenant.kube.lease import LeaseElector
from kubeplane import wait_for
from kubeplane.admission_stream import CREATIONS_PER_SECOND, MOST_CUT_CONNECTIONS, CreationStream, probe_pod, rollout_failures
from kubeplane.incluster import RELEASE, InClusterOperator

pytestmark = pytest.mark.plane

NAMESPACE = "gputenant-ha"
TENANT = "ha"
TENANT_NAMESPACE = f"tenant-{TENANT}"
LEASE_SECONDS = 15
"""gputenant run's default lease (client-go's): a standby takes an abandoned Lease after this."""


def test_one_replica_holds_the_lease_and_another_takes_it_when_released_or_abandoned(plane):
    plane.kubectl("create", "namespace", "lease-test")

    async def scenario() -> None:
        kubeconfig = str(plane.kubeconfig_path)
        async with KubeClient.from_kubeconfig(kubeconfig, "lease-test") as first_client, \
                KubeClient.from_kubeconfig(kubeconfig, "lease-test") as second_client:
            first = LeaseElector(first_client, "lease-test", "operator", "first", lease_seconds=2)
            second = LeaseElector(second_client, "lease-test", "operator", "second", lease_seconds=2)
            assert await first.try_acquire_or_renew()
            assert not await second.try_acquire_or_renew()
            assert await first.try_acquire_or_renew()  # renews
            await first.release()
            assert await second.try_acquire_or_renew()  # released: taken at once
            assert not await first.try_acquire_or_renew()
            started = time.monotonic()
            await first.acquire()  # `second` stopped renewing: taken once its record is 2 s old
            assert time.monotonic() - started >= 2
            lease = await first_client.get("coordination.k8s.io/v1", "Lease", "operator", "lease-test")
            assert lease["spec"]["holderIdentity"] == "first" and lease["spec"]["leaseTransitions"] == 2

    try:
        asyncio.run(scenario())
    finally:
        plane.kubectl("delete", "namespace", "lease-test", "--wait=false")


@pytest.fixture(scope="module")
def replicas(vcluster_node, tmp_path_factory):
    operator = InClusterOperator(vcluster_node, NAMESPACE)  # the chart's defaults: two replicas
    try:
        yield operator.install(tmp_path_factory.mktemp("ha"))
    finally:
        # Offboarded by the operator before it goes, so no finalizer outlives it on the session plane.
        vcluster_node.kubectl("delete", "gputenant", TENANT, "--ignore-not-found", "--timeout=120s", check=False)
        operator.uninstall()


def lease_holder(plane) -> str | None:
    with plane.api_client() as client:
        return kubernetes.client.CoordinationV1Api(client).read_namespaced_lease(RELEASE, NAMESPACE).spec.holder_identity


def generation_reconciled(plane, generation: int) -> bool:
    body = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT) or {}
    status = body.get("status") or {}
    return status.get("observedGeneration") == generation or any(
        c.get("observedGeneration") == generation for c in status.get("conditions") or [])


def pod_of(holder: str) -> str:
    """The pod of a Lease holder (`gputenant run` names itself <pod>_<random>)."""
    return holder.rsplit("_", 1)[0]


def delete_with_no_grace(plane, pod: kubernetes.client.V1Pod) -> None:
    with plane.api_client() as client:
        kubernetes.client.CoreV1Api(client).delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)


def sigkill_on_the_node(plane, pod: kubernetes.client.V1Pod) -> None:
    """SIGKILL to the operator's container through the node's containerd: no cleanup runs, the
    Lease is not released, the kubelet restarts the container."""
    container_id = pod.status.container_statuses[0].container_id.removeprefix("containerd://")
    plane.node.containerd.ctr("tasks", "kill", "--signal", "SIGKILL", container_id)


@pytest.fixture(scope="module")
def tenant(replicas, vcluster_node):
    vcluster_node.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-", input=f"""
apiVersion: gputenant.io/v1beta1
kind: GpuTenant
metadata: {{name: {TENANT}}}
spec: {{trust: Trusted, owners: [{{kind: User, name: alice}}], gpu: {{quota: 1}}}}
""")
    wait_for(lambda: generation_reconciled(vcluster_node, 1), timeout=90, interval=1,
             what="the tenant's first reconcile")
    return TENANT


@pytest.mark.parametrize("kill", [delete_with_no_grace, sigkill_on_the_node])
def test_admission_and_reconciliation_survive_losing_the_leading_replica(replicas, tenant, vcluster_node, kill):
    plane = vcluster_node
    try:
        wait_for(replicas.available, timeout=120, interval=1, what="both replicas available")
    except TimeoutError as error:
        raise AssertionError(f"{error}\n{replicas.describe()}") from None
    holder = wait_for(lambda: lease_holder(plane), timeout=30, interval=0.5, what="a Lease holder")
    [leader] = [pod for pod in replicas.pods() if pod.metadata.name == pod_of(holder)]

    def admitted_once():
        try:
            with plane.api_client() as client:
                kubernetes.client.CoreV1Api(client).create_namespaced_pod(TENANT_NAMESPACE, probe_pod(0), dry_run="All")
            return True
        except kubernetes.client.ApiException:
            return False
    wait_for(admitted_once, timeout=60, interval=1, what=f"pods admitted in {TENANT_NAMESPACE}")
    body = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)
    quota = body["spec"]["gpu"]["quota"] + 1

    with CreationStream(plane, TENANT_NAMESPACE) as stream:
        time.sleep(3)
        killed_at = time.monotonic()
        kill(plane, leader)
        # A pod deleted gracefully keeps leading through its preStop pause, then lets go; a killed
        # one holds the Lease until it expires. Either way a standby takes it.
        try:
            new_holder = wait_for(lambda: (lambda found: found if found and found != holder else None)(
                lease_holder(plane)), timeout=LEASE_SECONDS + 30, interval=0.5, what="another Lease holder")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{replicas.describe()}") from None
        plane.kubectl("patch", "gputenant", TENANT, "--type=merge", "-p", f'{{"spec":{{"gpu":{{"quota":{quota}}}}}}}')
        generation = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", TENANT)["metadata"]["generation"]
        try:
            wait_for(lambda: generation_reconciled(plane, generation), timeout=LEASE_SECONDS + 45, interval=0.5,
                     what="the change reconciled after the leader's loss")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{replicas.describe()}") from None
        reconciled_after = time.monotonic() - killed_at
        time.sleep(max(0.0, 20 - (time.monotonic() - killed_at)))

    after_kill = [(at - killed_at, outcome) for at, outcome in stream.outcomes if at >= killed_at]
    failures = [(at, outcome) for at, outcome in after_kill if outcome != "admitted"]
    before = Counter(outcome for at, outcome in stream.outcomes if at < killed_at)
    print(f"\nHA ({kill.__name__}): {len(stream.outcomes)} creations at {CREATIONS_PER_SECOND}/s; before the kill "
          f"{dict(before)}; after it {len(after_kill)}, of which {len(failures)} refused or failed"
          + (f", from +{failures[0][0]:.1f}s to +{failures[-1][0]:.1f}s" if failures else ""))
    for outcome, count in Counter(outcome for _, outcome in failures).most_common():
        print(f"  {count} x {outcome}")
    print(f"HA ({kill.__name__}): the change was reconciled {reconciled_after:.1f}s after the kill; "
          f"Lease {holder} -> {new_holder}")

    assert before == Counter({"admitted": sum(before.values())})
    assert new_holder != holder
    # A bounded blip: every creation in the last 5 s of the stream was admitted, and none failed
    # later than the lease time after the kill.
    last = [outcome for at, outcome in after_kill if at >= after_kill[-1][0] - 5]
    assert last and set(last) == {"admitted"}, failures
    assert all(at < LEASE_SECONDS for at, _ in failures), failures
    assert reconciled_after < LEASE_SECONDS + 30


def test_an_upgrade_and_a_drained_replica_refuse_no_tenant_pod(replicas, tenant, vcluster_node, tmp_path):
    """The chart's defaults (two replicas, a PodDisruptionBudget, a surge-first rollout and a
    preStop pause that lets the Service stop sending reviews to a replica before it stops): a
    `helm upgrade` that replaces both replicas, then a graceful deletion of one (what a node drain
    does), while tenant pods are created at a steady rate: none is refused, and at most one fails on
    a keep-alive connection its replica closed at that instant."""
    plane = vcluster_node
    wait_for(replicas.rolled_out, timeout=120, interval=1, what="both replicas rolled out")
    with CreationStream(plane, TENANT_NAMESPACE) as stream:
        time.sleep(3)
        started = time.monotonic()
        replicas.upgrade(tmp_path, {"podAnnotations": {"gputenant.io/rollout-test": str(time.time())}})
        upgraded_after = time.monotonic() - started
        [drained, _] = replicas.pods()
        with plane.api_client() as client:
            kubernetes.client.CoreV1Api(client).delete_namespaced_pod(drained.metadata.name, NAMESPACE)
        wait_for(lambda: drained.metadata.name not in {p.metadata.name for p in replicas.pods()} and replicas.available(),
                 timeout=120, interval=1, what="the drained replica replaced")
        time.sleep(3)
    during = [outcome for at, outcome in stream.outcomes if at >= started]
    failures, cut = rollout_failures(during)
    print(f"\nrollout: {len(during)} creations at {CREATIONS_PER_SECOND}/s during an upgrade of both replicas "
          f"({upgraded_after:.0f} s) and a drained replica; {sum(failures.values())} refused or failed {dict(failures)}; "
          f"{sum(cut.values())} cut connections {dict(cut)}")
    assert len(during) >= CREATIONS_PER_SECOND * 10
    assert not failures
    assert sum(cut.values()) <= MOST_CUT_CONNECTIONS, cut
