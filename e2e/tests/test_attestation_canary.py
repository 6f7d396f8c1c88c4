"""Isolation attestation against the real cluster: the operator's own canary code (`Attestor`,
`publish_tenant_conditions`) creating real canary pods and writing real tenant status, and
`gputenant run` doing it on its own (pool report on the liveness endpoint, tenant condition).

- On kwok-SIMULATED GPU nodes (`vcluster_kai`: every pool of examples/config.yaml, the real
  KAI-Scheduler) each pool's canary is scheduled by KAI onto a simulated node, where no container
  runs: every pool is Unattested, and so is a tenant placed on one of them.
- On the plane's REAL node (containerd, runc) the canary image the project writes runs as a real
  container with a pool's exact shape; that node has no GPU and no NVIDIA runtime, so the canary
  reports no NVML and no CUDA, and the verdict is Failed: a pod of that shape on that pool would
  see no GPU either (docs/attestation.md, "Verdicts"). The node advertises one `nvidia.com/gpu`
  through its status for the test (as a device plugin would), so the scheduler and the kubelet
  admit the GPU pod; nothing else about it is simulated.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from gputenant import GROUP, KIND, VERSION
from gputenant.api import conditions as reasons
from gputenant.attestation.promise import COMPONENT
from gputenant.attestation.run import Attestor, publish_tenant_conditions
from gputenant.attestation.verdict import AttestationOutcome
from gputenant.config.pools import Pool
from gputenant.kube import KubeClient
from gputenant.naming import COMPONENT_LABEL
from gputenant.tenant_status.writers import write_pipeline
from kubeplane import wait_for
from kubeplane.canary_image import CANARY_IMAGE, canary_image
from kubeplane.kai_fixtures import KaiCluster
from kubeplane.node import NODE_NAME
from kubeplane.operator_process import OperatorProcess

pytestmark = pytest.mark.plane

NAMESPACE = "gputenant-attestation"
PARENT_QUEUE, QUEUE = "attestation-parent", "gputenant-attestation"
TENANT_API = f"{GROUP}/{VERSION}"
REPO_ROOT = Path(__file__).resolve().parents[2]


def queue(name: str, parent: str | None) -> dict:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict = {"resources": {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def run(plane, work):
    """`work(client)` with the operator's own client against the plane."""
    async def main():
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "gpu-tenant-operator") as client:
            return await work(client)
    return asyncio.run(main())


@pytest.fixture(scope="module")
def cluster(vcluster_kai: KaiCluster) -> KaiCluster:
    """The canary namespace (Pod Security "restricted", which the canary meets) and an
    operator-owned KAI queue for it (a KAI pool schedules no pod without a queue), and the canary
    image in the real node's containerd."""
    plane = vcluster_kai.plane
    plane.node.containerd.import_images(list(canary_image(plane.bin_dir).values()))
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")

    async def queues(client: KubeClient):
        for obj in (queue(PARENT_QUEUE, None), queue(QUEUE, PARENT_QUEUE)):
            await client.apply(obj)
    run(plane, queues)
    yield vcluster_kai
    plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    plane.kubectl("delete", "queue", QUEUE, PARENT_QUEUE, "--ignore-not-found")


def canary_pods(plane) -> list[str]:
    listed = plane.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{COMPONENT_LABEL}={COMPONENT}", "-o", "name")
    return listed.stdout.split()


def test_every_pool_on_simulated_nodes_is_unattested_and_so_is_its_tenant(cluster: KaiCluster):
    plane, config = cluster.plane, cluster.config
    attestor = Attestor(image=CANARY_IMAGE, namespace=NAMESPACE, interval=3600, queue=QUEUE,
                        schedule_timeout=60, run_timeout=30)
    tenant = {"apiVersion": TENANT_API, "kind": KIND, "metadata": {"name": "attested"},
              "spec": {"trust": "Untrusted", "owners": [{"kind": "Group", "name": "a"}],
                       "gpu": {"quota": 1, "pool": "h100-mig-small"}, "sharing": {"mode": "MIG"}}}

    async def work(client: KubeClient):
        done = await attestor.round(client, config)
        created = await client.create(tenant)
        # What the operator's pipeline writes once it placed the tenant (no operator runs here).
        await write_pipeline(client, "attested", {
            "observedGeneration": created["metadata"]["generation"], "sharing": {"mode": "MIG", "pool": "h100-mig-small"}})
        first = await publish_tenant_conditions(client, attestor)
        second = await publish_tenant_conditions(client, attestor)
        return done, first, second, await client.get(TENANT_API, KIND, "attested")

    try:
        done, first, second, live = run(plane, work)
        assert [result.pool for result in done] == [pool.name for pool in config.pools]
        for result in done:
            assert result.verdict.outcome is AttestationOutcome.UNATTESTED, result.verdict.message
            assert "which is simulated (kwok): no container runs there" in result.verdict.message
            assert attestor.summary(result.pool)["isolationVerified"] == "Unknown"
        assert canary_pods(plane) == [], "every canary pod is deleted after its run"
        assert (first, second) == (["attested"], []), "written once, then nothing changed"
        [condition] = [c for c in live["status"]["conditions"] if c["type"] == reasons.ISOLATION_VERIFIED]
        assert (condition["status"], condition["reason"], condition["observedGeneration"]) == (
            "Unknown", reasons.UNATTESTED, live["metadata"]["generation"])
        assert condition["message"].startswith(
            "the isolation this tier promises is not verified: pool h100-mig-small (MIG) is not attested: its "
            "canary was bound to node ")
    finally:
        plane.kubectl("delete", "gputenant", "attested", "--ignore-not-found", "--wait=false")


@pytest.fixture
def real_node_advertising_a_gpu(cluster: KaiCluster):
    """The real node with one nvidia.com/gpu in its status, as NVIDIA's device plugin would put it."""
    patch = '{"status": {"capacity": {"nvidia.com/gpu": "1"}}}'
    cluster.plane.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=merge", "-p", patch)
    yield NODE_NAME
    cluster.plane.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p",
                          '[{"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"}]', check=False)


def test_a_canary_running_for_real_on_a_node_without_a_gpu_fails_its_pool(cluster: KaiCluster,
                                                                         real_node_advertising_a_gpu: str):
    pool = Pool.model_validate({"name": "real-node", "mode": "Exclusive", "gpuModel": "H100-80GB",
                                "gpuMemoryMiB": 81559, "schedulerName": "default-scheduler",
                                "nodeSelector": {"kubernetes.io/hostname": real_node_advertising_a_gpu}})
    attestor = Attestor(image=CANARY_IMAGE, namespace=NAMESPACE, interval=3600, schedule_timeout=60, run_timeout=120)
    result = run(cluster.plane, lambda client: attestor.attest(client, pool))
    verdict = result.verdict
    assert verdict.outcome is AttestationOutcome.FAILED, verdict.message
    assert verdict.message.startswith(
        "pool real-node promises one whole GPU of 81559 MiB, no other pod on it, but the canary saw no GPU: CUDA: "
        "libcuda.so.1 not loadable"), verdict.message
    assert "NVML: libnvidia-ml.so.1 not loadable" in verdict.message
    assert verdict.measured == {"devices": 0}
    assert attestor.summary("real-node")["isolationVerified"] == "False"
    wait_for(lambda: canary_pods(cluster.plane) == [], timeout=30, what="the canary pod deleted after its run")


def test_a_canary_the_api_server_refuses_leaves_its_pool_unattested_with_the_reason(cluster: KaiCluster):
    pool = cluster.config.pools[0]
    attestor = Attestor(image=CANARY_IMAGE, namespace="no-such-namespace", interval=3600)
    verdict = run(cluster.plane, lambda client: attestor.attest(client, pool)).verdict
    assert verdict.outcome is AttestationOutcome.UNATTESTED
    assert f"pool {pool.name} ({pool.mode.value}) is not attested: the API server refused the canary pod in " \
           "namespace no-such-namespace: " in verdict.message
    assert "not found" in verdict.message


@pytest.fixture
def attesting_operator(cluster: KaiCluster, tmp_path: Path):
    """`gputenant run` with the canary image named, its pool report on a liveness endpoint. Its
    vCluster chart is a directory that does not exist: tenants here are placed by the policy (their
    status names the pool) and never get a control plane, which this test does not need."""
    plane = cluster.plane
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["vcluster"]["localPath"] = str(tmp_path / "no-chart")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(document))
    plane.kubectl("create", "namespace", "gpu-operator", check=False)
    running = OperatorProcess(
        plane, config_path, plane.log_dir / "attesting-operator.log", ["--pools-interval", "3600"],
        env={"GPUTENANT_ATTESTATION_IMAGE": CANARY_IMAGE, "GPUTENANT_ATTESTATION_NAMESPACE": NAMESPACE,
             "GPUTENANT_ATTESTATION_QUEUE": QUEUE},
        resync_seconds=2, deletion_retry_seconds=None, kubeconfig_path=plane.kubeconfig_path, liveness=True).start()
    try:
        yield running.liveness_url, running.log_path
    finally:
        plane.kubectl("delete", "gputenant", "placed", "--ignore-not-found", "--wait=false")
        running.stop()


def test_the_operator_attests_its_pools_and_tells_the_tenants_on_them(cluster: KaiCluster, attesting_operator):
    plane = cluster.plane
    liveness_url, log_path = attesting_operator
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": TENANT_API, "kind": KIND, "metadata": {"name": "placed"},
        "spec": {"trust": "Untrusted", "owners": [{"kind": "Group", "name": "a"}],
                 "gpu": {"quota": 1, "pool": "h100-mig-small"}, "sharing": {"mode": "MIG"}}}))

    def attested_pools() -> dict | None:
        try:
            with urllib.request.urlopen(liveness_url, timeout=5) as answer:
                pools = json.load(answer)["pools"]
        except OSError:
            return None
        done = all((report.get("isolation") or {}).get("message", "").endswith("no container runs there")
                   for report in pools.values())
        return pools if pools and done else None

    pools = wait_for(attested_pools, timeout=120, interval=1, what=f"every pool attested (log: {log_path})")
    assert set(pools) == {pool.name for pool in cluster.config.pools}
    for name, report in pools.items():
        assert (report["isolation"]["isolationVerified"], report["isolation"]["reason"]) == (
            "Unknown", reasons.UNATTESTED), name

    def condition() -> dict | None:
        tenant = plane.cluster_object(GROUP, VERSION, "gputenants", "placed") or {}
        found = [c for c in (tenant.get("status") or {}).get("conditions") or []
                 if c["type"] == reasons.ISOLATION_VERIFIED]
        return found[0] if found else None

    isolation = wait_for(condition, timeout=60, interval=1, what=f"IsolationVerified on the tenant (log: {log_path})")
    assert (isolation["status"], isolation["reason"]) == ("Unknown", reasons.UNATTESTED)
    assert "pool h100-mig-small (MIG) is not attested: its canary was bound to node" in isolation["message"]
