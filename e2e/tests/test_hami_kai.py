"""The Internal tier's HAMi mode is KAI GPU fractions (docs/units.md): the real KAI-Scheduler places a
tenant's quarter-GPU shares within its queue, counting each as 0.25 GPU, on SIMULATED GPU nodes.

The tenant goes through the operator's pure steps: `decide` grants it 2 GPUs as shares of
`corePercent` 25 on the `l4-hami` pool, `render_tenant` renders its Queue (applied here) and
ResourceQuota (checked, not applied: these tests are about what the scheduler enforces, as in
test_kai_scheduling.py), and each pod is written as the tenant would (annotation `gpu-fraction`),
mutated by the guard's `mutate_pod` and passed by its `validate_pod`.

What is SIMULATED, and why:
- the GPU nodes (kwok, kubeplane.gpu_nodes), advertising what NVIDIA's device plugin and GPU feature
  discovery would: whole `nvidia.com/gpu` and the `nvidia.com/gpu.memory` label;
- the report of KAI's GPU reservation pods (kubeplane.gpu_nodes.SimulatedGpuReservations): on a real
  node each reservation pod reads the GPU the device plugin gave it and annotates itself with its
  UUID; here the test side writes a `GPU-SIMULATED-...` UUID, which the real binder then puts into the
  fraction's NVIDIA_VISIBLE_DEVICES;
- KAI's admission webhook, which this plane does not run (it needs serving certificates): its shape
  (`runai/shared-gpu-configmap`, the name of the ConfigMaps the binder writes the GPU into, and the
  env and `envFrom` that read them; v0.12.0 pkg/admission/webhook/v1alpha2/gpusharing) is added by
  `guard.kai_sharing.with_kai_shape` after the guard's mutation and before its validation, the order
  the apiserver calls them in; as KAI does, it keeps the prefix the guard's mutation wrote.

Memory and compute caps: KAI v0.12.0 enforces none ("does not enforce memory allocation limits"); the
guard writes HAMi-core's caps into every share (guard/hami_caps.py), and each running share here is
stored with them: memory within 1% of its fraction of the GPU of the node KAI bound it to (that node's
`nvidia.com/gpu.memory` label, which KAI >= v0.16's hamicore plugin reads), compute its fraction in
percent, the library preloaded read-only. Whether a cap holds on a real GPU is the attestation's
business (docs/attestation.md); nothing here runs CUDA. Also shown: each pod's share is the one the
policy grants (`gpu-fraction: 0.25`; the binder writes `GPU_PORTION=0.25` and the reserved GPU for the
container), and the queue admits exactly the tenant's limit in shares.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from fractions import Fraction

import jsonpatch
import kubernetes
import pytest
import yaml

from gputenant.api.trust import SharingMode
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.policy.decision import Decision
from gputenant.pools.apply import apply_pools
from gputenant.render.tenant import render_tenant
from kubeplane import wait_for
from kubeplane.gpu_nodes import RESERVATION_NAMESPACE, RESERVED_GPU_ANNOTATION, SIMULATED_GPU_UUID_PREFIX
from kubeplane.kai import QUEUE_LABEL, SCHEDULER_NAME
from kubeplane.kai_fixtures import KaiCluster

pytestmark = pytest.mark.plane

POOL = "l4-hami"
GRANTED_GPUS = 2
SHARE = "0.25"
SHARES = 8
"""docs/units.md: 2 GPUs in quarter shares are 8 shares, so 8 pods run and a 9th waits."""
TIMEOUT = 90
GPU_FRACTION = "gpu-fraction"


@pytest.fixture(scope="module")
def internal_tenant(kai_cluster: KaiCluster) -> Iterator[tuple[GpuTenant, Decision, list[dict]]]:
    config = kai_cluster.config
    with kai_cluster.plane.api_client() as client:
        existing = {ns.metadata.name for ns in kubernetes.client.CoreV1Api(client).list_namespace().items}
    if config.device_plugin_config_map.namespace not in existing:  # test_kai_scheduling.py may have made it
        kai_cluster.plane.create_namespace(config.device_plugin_config_map.namespace)

    async def apply() -> None:
        async with KubeClient.from_kubeconfig(str(kai_cluster.plane.kubeconfig_path), config.field_manager) as client:
            result = await apply_pools(client, config)
            assert not result.plan.problems, result.plan.problems
    asyncio.run(apply())
    model = GpuTenant.model_validate({"metadata": {"name": "shares"}, "spec": {
        "trust": "Internal", "owners": [{"kind": "User", "name": "dana@example.com"}],
        "gpu": {"quota": GRANTED_GPUS, "parentQueue": "research"}}})
    decision = decide("shares", model.spec, config)
    assert decision.possible, decision.message
    objects = render_tenant(model, decision, config).objects
    applied = [o for o in objects if o["kind"] != "ResourceQuota"]
    kai_cluster.plane.kubectl("apply", "--server-side", "--field-manager=gpu-tenant-operator", "-f", "-",
                              input=yaml.safe_dump_all(applied))
    [namespace] = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    with kai_cluster.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        wait_for(lambda: core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items,
                 timeout=TIMEOUT, what=f"ServiceAccount {namespace}/default")
    yield model, decision, objects
    kai_cluster.plane.kubectl("delete", "namespace", namespace, "--wait=false")


def assert_capped(core: kubernetes.client.CoreV1Api, pod, fraction: Fraction) -> None:
    """The stored share carries HAMi-core's caps for its fraction of the GPU of the node KAI bound it to: memory
    within 1% of the node's `nvidia.com/gpu.memory` label (what KAI >= v0.16's hamicore plugin reads) times the
    fraction, compute the fraction in percent, and the library preloaded read-only by the guard's init container."""
    first = pod.spec.containers[0]
    env = {v.name: v.value for v in first.env or []}
    node_memory = int(core.read_node(pod.spec.node_name).metadata.labels["nvidia.com/gpu.memory"])
    memory = int(env[hami_caps.MEMORY_LIMIT].removesuffix("m"))
    assert abs(memory - node_memory * fraction) <= node_memory * fraction / 100, (memory, node_memory)
    assert env[hami_caps.SM_LIMIT] == str(int(fraction * 100))
    assert [c.name for c in pod.spec.init_containers] == [hami_caps.INIT_CONTAINER]
    mounts = {m.mount_path: m for m in first.volume_mounts}
    assert all(mounts[path].read_only for path in (hami_caps.PRELOAD, hami_caps.LIBRARY_DIR, hami_caps.OVERRIDE_ENV_FILE))


def tenant_pod(model: GpuTenant, decision: Decision, namespace: str, name: str, share: str = SHARE) -> dict:
    """A share as the tenant writes it, mutated by the guard, then by KAI's admission (SIMULATED, see the
    module docstring), and checked by the guard."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": {GPU_FRACTION: share}},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "infer", "image": "registry.example/infer:1",
                            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        },
    }
    pod = jsonpatch.apply_patch(pod, mutate_pod(pod, model.metadata.name, decision))
    pod = kai_sharing.with_kai_shape(pod, f"{name}-b2x9kzq-shared-gpu")  # KAI keeps the prefix the guard set
    assert pod["metadata"]["annotations"][kai_sharing.CONFIGMAP_ANNOTATION] == kai_sharing.guard_prefix(pod)
    assert validate_pod(pod, model.metadata.name, model.spec.trust, decision) == []
    return pod


def test_internal_tenant_gets_kai_fractions_counted_in_gpus(internal_tenant):
    model, decision, objects = internal_tenant
    assert (decision.mode, decision.pool.name) == (SharingMode.HAMI, POOL)
    [queue] = [o for o in objects if o["kind"] == "Queue"]
    assert queue["spec"]["resources"]["gpu"]["quota"] == GRANTED_GPUS
    assert queue["spec"]["resources"]["gpu"]["limit"] == GRANTED_GPUS
    [quota] = [o for o in objects if o["kind"] == "ResourceQuota"]
    # Fractions carry no GPU request (the reservation pod holds the GPU): no whole GPU for the tenant.
    assert quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert decision.pod_rules.fraction_share == Fraction(SHARE)
    assert GRANTED_GPUS / decision.pod_rules.fraction_share == SHARES


def test_eight_quarter_shares_run_within_the_queue_and_a_ninth_waits(kai_cluster: KaiCluster,
                                                                     internal_tenant):
    model, decision, objects = internal_tenant
    [namespace] = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    [queue] = [o["metadata"]["name"] for o in objects if o["kind"] == "Queue"]
    names = [f"share-{index}" for index in range(SHARES + 1)]
    with kai_cluster.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        for name in names:
            core.create_namespaced_pod(namespace, tenant_pod(model, decision, namespace, name))

        def settled() -> tuple[list, list] | None:
            pods = core.list_namespaced_pod(namespace).items
            running = [p for p in pods if p.status.phase == "Running"]
            held = [p for p in pods if p.status.phase == "Pending" and any(
                c.type == "PodScheduled" and c.status == "False" and "OverLimit" in (c.message or "")
                for c in p.status.conditions or [])]
            return (running, held) if len(running) == SHARES and len(held) == 1 else None
        running, [ninth] = wait_for(settled, timeout=TIMEOUT, what=f"{SHARES} shares Running and one held by the queue")
        pool_nodes = kai_cluster.node_names(POOL)
        gpus_used: set[tuple[str, str]] = set()
        for pod in running:
            assert pod.spec.scheduler_name == SCHEDULER_NAME
            assert pod.metadata.labels[QUEUE_LABEL] == queue
            assert pod.spec.node_name in pool_nodes
            assert pod.metadata.annotations[GPU_FRACTION] == SHARE
            # The binder put the share on the GPU its reservation pod got (the SIMULATED report).
            group = pod.metadata.labels["runai-gpu-group"]
            [reservation] = core.list_namespaced_pod(RESERVATION_NAMESPACE, label_selector=f"runai-gpu-group={group}").items
            uuid = reservation.metadata.annotations[RESERVED_GPU_ANNOTATION]
            assert uuid.startswith(SIMULATED_GPU_UUID_PREFIX) and reservation.spec.node_name == pod.spec.node_name
            gpus_used.add((pod.spec.node_name, uuid))
            # What the container is given (ConfigMaps the binder writes, read through the env KAI's admission
            # adds): that GPU, and the portion KAI's isolator turns into the memory cap.
            maps = pod.metadata.annotations[kai_sharing.CONFIGMAP_ANNOTATION]
            assert maps == kai_sharing.guard_prefix({"metadata": {"name": pod.metadata.name, "namespace": namespace}})
            capabilities = core.read_namespaced_config_map(kai_sharing.capabilities_configmap(maps), namespace).data
            assert float(capabilities["GPU_PORTION"]) == float(SHARE)
            assert capabilities["NVIDIA_VISIBLE_DEVICES"] == uuid
            assert not core.read_namespaced_config_map(kai_sharing.env_configmap(maps), namespace).data
            assert_capped(core, pod, Fraction(SHARE))
        # Not asserted: at most one GPU of shares per GPU. KAI v0.12.0 plans that, but a bind that fails and is
        # retried can land a share on a GPU that filled up meanwhile (seen here: 5 quarter shares on one GPU after
        # the binder's PreBind read a ConfigMap it had just created through its cache, "not found", and retried).
        # docs/units.md, "What enforces what", records it.
        assert len(gpus_used) >= GRANTED_GPUS
        condition = next(c for c in ninth.status.conditions if c.type == "PodScheduled")
        assert queue in condition.message, condition.message

        core.delete_namespaced_pod(running[0].metadata.name, namespace)
        wait_for(lambda: core.read_namespaced_pod(ninth.metadata.name, namespace).status.phase == "Running",
                 timeout=TIMEOUT, what=f"{ninth.metadata.name} to run once a share is freed")


def test_a_half_share_runs_capped_at_half_the_gpu(kai_cluster: KaiCluster, internal_tenant):
    """Two shares in one pod (0.5): KAI binds it as half a GPU and the guard's caps are half the GPU's memory
    and SMs."""
    model, decision, objects = internal_tenant
    [namespace] = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    with kai_cluster.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace).items, timeout=TIMEOUT, what="the shares to go")
        core.create_namespaced_pod(namespace, tenant_pod(model, decision, namespace, "half", "0.5"))
        half = wait_for(lambda: (p := core.read_namespaced_pod("half", namespace)).status.phase == "Running" and p,
                        timeout=TIMEOUT, what="the half share to run")
        assert_capped(core, half, Fraction("0.5"))
        maps = half.metadata.annotations[kai_sharing.CONFIGMAP_ANNOTATION]
        assert float(core.read_namespaced_config_map(kai_sharing.capabilities_configmap(maps), namespace)
                     .data["GPU_PORTION"]) == 0.5
