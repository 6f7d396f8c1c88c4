"""SIMULATED GPU nodes for the pools of an operator configuration, kept alive by kwok.

This machine has no GPUs. Each pool becomes Node objects shaped the way NVIDIA's GPU Operator
(device plugin, GPU feature discovery, MIG manager) leave a real node: `nvidia.com/gpu` or
`nvidia.com/mig-<profile>` in capacity and allocatable, NVIDIA's labels, the
pool's nodeSelector labels, and one taint per pool toleration. They carry kwok's annotation, so
the kwok controller (kubeplane.kwok) marks them Ready, renews their leases and runs the pods bound
to them (Running without any container). Whatever decides where a pod goes - the real
KAI-Scheduler, admission, quotas - sees ordinary nodes; only the GPUs and the kubelet are simulated.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import kubernetes
import urllib3

from gputenant.api.gpus import MIG_PROFILES, mig_layout
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import MigStrategy, Pool, PoolMode, Toleration

from .process import wait_for

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""kwok manages the nodes that carry this annotation (kubeplane.kwok passes it as its selector)."""
SIMULATED_LABEL_KEY, SIMULATED_LABEL_VALUE = "type", "kwok"
"""kwok's own convention for its nodes; tells anyone listing nodes that these are simulated."""
SIMULATED_LABEL = f"{SIMULATED_LABEL_KEY}={SIMULATED_LABEL_VALUE}"
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
"""A typical HGX/DGX node; a pool of 16 GPUs becomes two nodes."""
NODE_CPU = "64"
NODE_MEMORY = "512Gi"
NODE_PODS = "110"


class GpuNodeError(ValueError):
    """A pool cannot be simulated; the message names the pool field to change."""


@dataclass(frozen=True)
class GpuNode:
    """One simulated GPU node of a pool."""

    name: str
    pool: str
    labels: dict[str, str]
    taints: list[dict[str, str]]
    resources: dict[str, str]
    """GPU resources as the device plugin advertises them, in capacity and allocatable."""

    def manifest(self) -> dict:
        """The Node without status (status is written through its subresource, see create_nodes)."""
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.name, "labels": self.labels,
                         "annotations": dict([KWOK_NODE_ANNOTATION])},
            "spec": {"taints": self.taints},
        }

    def status(self) -> dict:
        """Capacity and allocatable only: kwok writes the conditions, addresses and node info."""
        capacity = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": NODE_PODS, **self.resources}
        return {"capacity": capacity, "allocatable": dict(capacity)}


def _gpus_per_node(pool: Pool) -> list[int]:
    """The pool's GPUs spread over nodes of at most GPUS_PER_NODE; one full node when unset."""
    total = GPUS_PER_NODE if pool.gpus is None else pool.gpus
    nodes = math.ceil(total / GPUS_PER_NODE)
    return [min(GPUS_PER_NODE, total - index * GPUS_PER_NODE) for index in range(nodes)]


def _taint(toleration: Toleration) -> dict[str, str] | None:
    """The taint a toleration of the pool is there to tolerate: the pool's nodes carry it, so that
    only pods steered to the pool land there. A toleration without a key tolerates every taint and
    names none; one without an effect tolerates all effects, and NoSchedule is the one pools use."""
    if toleration.key is None:
        return None
    taint = {"key": toleration.key, "effect": toleration.effect or "NoSchedule"}
    if toleration.operator == "Equal" and toleration.value is not None:
        taint["value"] = toleration.value
    return taint


def _mode_resources_and_labels(pool: Pool, gpus: int, product: str) -> tuple[dict, dict]:
    """How the GPU Operator advertises `gpus` GPUs of the pool's mode on one node."""
    if pool.mode is PoolMode.TIME_SLICING:
        sharing = pool.time_slicing
        assert sharing is not None, "the pool model requires timeSlicing in this mode"
        replicas = gpus * sharing.replicas
        labels = {"nvidia.com/gpu.replicas": str(sharing.replicas),
                  "nvidia.com/gpu.sharing-strategy": "time-slicing"}
        if sharing.rename_by_default:
            return {f"{GPU}.shared": str(replicas)}, labels
        return {GPU: str(replicas)}, {**labels, "nvidia.com/gpu.product": f"{product}-SHARED"}
    if pool.mode is PoolMode.HAMI:
        # HAMi mode is KAI GPU fractions (docs/units.md): NVIDIA's device plugin advertises whole GPUs,
        # which KAI's binder reserves one at a time for the fractions it puts on them; KAI reads each
        # GPU's memory from the `nvidia.com/gpu.memory` label. No HAMi device plugin, so no gpumem.
        return {GPU: str(gpus)}, {}
    if pool.mode is PoolMode.MIG:
        mig = pool.mig
        assert mig is not None, "the pool model requires mig in this mode"
        layout = mig_layout(pool.gpu_model, mig.config)
        if layout is None:
            raise GpuNodeError(
                f"pools[{pool.name}].mig.config {mig.config!r} is a custom layout the simulated nodes "
                "cannot imitate; use all-<profile> or all-balanced")
        labels = {"nvidia.com/mig.strategy": mig.strategy.value, "nvidia.com/mig.config": mig.config,
                  "nvidia.com/mig.config.state": "success"}
        if mig.strategy is MigStrategy.SINGLE:
            [(profile, per_gpu)] = layout.items()
            instances = str(per_gpu * gpus)
            return {GPU: instances}, {**labels, "nvidia.com/gpu.product": f"{product}-MIG-{profile}",
                                      "nvidia.com/gpu.count": instances}
        resources = {GPU: "0"}
        for profile, per_gpu in layout.items():
            resources[f"nvidia.com/mig-{profile}"] = str(per_gpu * gpus)
            labels[f"nvidia.com/mig-{profile}.count"] = str(per_gpu * gpus)
        return resources, labels
    return {GPU: str(gpus)}, {}


def gpu_node(name: str, pool: Pool, gpus: int) -> GpuNode:
    """One node of `gpus` GPUs shaped as `pool` leaves it. Tests that need a node no configured pool
    describes (a node not yet configured: an Exclusive pool's shape; a MIG layout other than the
    pool's) pass a Pool of that shape."""
    product = f"NVIDIA-{pool.gpu_model}"
    resources, mode_labels = _mode_resources_and_labels(pool, gpus, product)
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        SIMULATED_LABEL_KEY: SIMULATED_LABEL_VALUE,
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(pool.gpu_memory_mi_b), "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/mig.capable": str(pool.gpu_model in MIG_PROFILES).lower(),
        "nvidia.com/mig.config": "all-disabled",
        **mode_labels,
    }
    if pool.device_plugin_config:
        labels["nvidia.com/device-plugin.config"] = pool.device_plugin_config
    labels.update(pool.node_selector)
    taints = [taint for taint in map(_taint, pool.tolerations) if taint]
    return GpuNode(name=name, pool=pool.name, labels=labels, taints=taints, resources=resources)


def pool_nodes(config: OperatorConfig) -> list[GpuNode]:
    """The simulated nodes of every pool, `gpu-<pool>-<n>`, sized by the pool's `gpus`."""
    nodes: list[GpuNode] = []
    for pool in config.pools:
        if not pool.node_selector:
            raise GpuNodeError(f"pools[{pool.name}].nodeSelector is empty: the pool selects no node; "
                               "give it the labels of its nodes")
        nodes.extend(gpu_node(f"gpu-{pool.name}-{index}", pool, gpus)
                     for index, gpus in enumerate(_gpus_per_node(pool), start=1))
    return nodes


def create_nodes(api_client: kubernetes.client.ApiClient, nodes: list[GpuNode], timeout: float = 60) -> None:
    """Create the nodes, write their capacity, and wait until kwok has marked every one Ready.

    The API server taints each new node `node.kubernetes.io/not-ready` (TaintNodesByCondition);
    the node lifecycle controller lifts that taint once the node is Ready. A plane that does not run
    that controller would keep every simulated node unschedulable, so the taint is lifted here as
    that controller would: only after kwok reports the node Ready.
    """
    core = kubernetes.client.CoreV1Api(api_client)
    for node in nodes:
        core.create_node(node.manifest())  # type: ignore[arg-type]
        core.patch_node_status(node.name, {"status": node.status()})
    wanted = {node.name for node in nodes}

    def all_ready() -> bool:
        ready = {
            node.metadata.name for node in core.list_node(label_selector=SIMULATED_LABEL).items  # type: ignore[union-attr]
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])  # type: ignore[union-attr]
        }
        return wanted <= ready
    wait_for(all_ready, timeout=timeout, interval=0.2, what=f"kwok to mark {sorted(wanted)} Ready")
    for node in nodes:
        core.patch_node(node.name, {"spec": {"taints": node.taints}})


RESERVATION_NAMESPACE = "kai-resource-reservation"
"""Where KAI's binder creates its GPU reservation pods (binder flag --resource-reservation-namespace
default, KAI v0.12.0 constants.DefaultResourceReservationName), and their ServiceAccount's name."""
RESERVED_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"
SIMULATED_GPU_UUID_PREFIX = "GPU-SIMULATED-"


class SimulatedGpuReservations:
    """SIMULATED: what KAI's resource-reservation pods report on a real GPU node.

    For a GPU fraction, KAI's binder (v0.12.0 pkg/binder/binding/resourcereservation) creates one
    `gpu-reservation-<node>-<x>` pod per shared GPU, pinned to the node and asking the device plugin
    for `nvidia.com/gpu: 1`; the pod's program reads the GPU it got through NVML and writes its UUID
    into the annotation `run.ai/reserve_for_gpu_index` (pkg/resourcereservation/patcher), which the
    binder waits for (40 s) before it binds the fraction with that GPU in NVIDIA_VISIBLE_DEVICES.
    kwok runs no program and there is no GPU, so this thread writes that report instead: a UUID
    `GPU-SIMULATED-<node>-<n>`, distinct per reservation pod of a node, as the device plugin's
    distinct devices would be. Everything else on the path (scheduler, binder, queues) is real.
    """

    def __init__(self, api_client: kubernetes.client.ApiClient, interval: float = 0.2):
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simulated-gpu-reservations", daemon=True)

    def start(self) -> SimulatedGpuReservations:
        """Create the namespace and ServiceAccount KAI's chart would, then report in the background."""
        self._core.create_namespace({"metadata": {"name": RESERVATION_NAMESPACE}})  # type: ignore[arg-type]
        wait_for(lambda: self._core.list_namespaced_service_account(
            RESERVATION_NAMESPACE, field_selector="metadata.name=default").items,
            timeout=60, interval=0.2, what=f"ServiceAccount {RESERVATION_NAMESPACE}/default")
        self._core.create_namespaced_service_account(RESERVATION_NAMESPACE, {"metadata": {"name": RESERVATION_NAMESPACE}})  # type: ignore[arg-type]
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        """Report until stopped; an API error or an unreachable API server (a test that stops it)
        only skips a round, as a real reservation pod would retry, never ends the thread."""
        while not self._stop.wait(self._interval):
            try:
                self.report_once()
            except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError):
                continue

    def report_once(self) -> None:
        pods = self._core.list_namespaced_pod(RESERVATION_NAMESPACE).items
        taken: dict[str, set[str]] = {}
        for pod in pods:
            uuid = (pod.metadata.annotations or {}).get(RESERVED_GPU_ANNOTATION)  # type: ignore[union-attr]
            if uuid:
                taken.setdefault(pod.spec.node_name, set()).add(uuid)  # type: ignore[arg-type, union-attr]
        for pod in pods:
            if (pod.metadata.annotations or {}).get(RESERVED_GPU_ANNOTATION) or not pod.spec.node_name:  # type: ignore[union-attr]
                continue
            node = pod.spec.node_name  # type: ignore[union-attr]
            used = taken.setdefault(node, set())
            uuid = next(f"{SIMULATED_GPU_UUID_PREFIX}{node}-{index}" for index in range(len(used) + 1)
                        if f"{SIMULATED_GPU_UUID_PREFIX}{node}-{index}" not in used)
            self._core.patch_namespaced_pod(pod.metadata.name, RESERVATION_NAMESPACE,  # type: ignore[arg-type, union-attr]
                                            {"metadata": {"annotations": {RESERVED_GPU_ANNOTATION: uuid}}})
            used.add(uuid)
