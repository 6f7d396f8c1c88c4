"""Every label and annotation key KAI-Scheduler reads or writes, derived from its source at the pinned version.

A tenant shapes its host pods as it likes, so every key KAI's scheduler, binder, pod-grouper,
pod-group controller or admission reads off a pod (or copies from a pod onto its PodGroup) is a
lever on whose queue, gang, priority or GPU the pod gets. ``guard.keys`` reserves all of them; the
table in docs/threat-model.md is written from ``VOCABULARY`` (``markdown_table``).

The keys were read off KAI's source by hand; ``kai_key_uses`` is generated from that source at the
pinned version (tools/kai/key_uses.py, ``make generate``) and lists the places it uses a label or
annotation key that the scan recognises (that script says which). ``unaccounted`` says which of
those uses this module does not account for: a key no entry covers (a prefix KAI reads only by a
prefix entry), a configurable key (a Go expression) not named in ``EXPRESSIONS``, a use not set
aside in ``SET_ASIDE``, an entry KAI no longer uses. operator/tests/test_kai_vocabulary.py fails on any of them, and on a generated file
that differs from what the pinned module gives now.

Node-scoped keys are listed too: a tenant cannot label nodes, but reserving them on pods costs
nothing and keeps the list the whole vocabulary. Keys under a prefix ``keys.RESERVED_PREFIXES``
already reserves are listed for the record of who reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gputenant.guard.kai_key_uses import KAI_VERSION, KEY_USES

__all__ = ["KAI_VERSION", "VOCABULARY", "KaiKey", "markdown_table", "reserved", "reserved_values", "unaccounted"]

KAI_MODULE = "github.com/NVIDIA/KAI-scheduler"
GPU_GROUP_LABEL = "runai-gpu-group"
"""The GPU a fraction shares: on KAI's reservation pod and on every share KAI's binder bound onto it."""
MULTI_GPU_GROUP_PREFIX = f"{GPU_GROUP_LABEL}/"
"""``runai-gpu-group/<group>: <group>``, one per GPU of a multi-GPU share."""

Kind = Literal["label", "annotation"]
Match = Literal["exact", "prefix", "value"]


@dataclass(frozen=True)
class KaiKey:
    """One key of KAI's vocabulary: ``match`` says whether the key is exact, a prefix, or an exact key
    whose listed ``values`` alone mean something to KAI (``app``: a common key, reserved by value)."""

    key: str
    kind: Kind
    match: Match
    who: str
    source: str
    lever: str
    values: tuple[str, ...] = ()


_CONSTANTS = "pkg/common/constants/constants.go"
_PLUGIN_CONSTANTS = "pkg/podgrouper/podgrouper/plugins/constants/constants.go"
_DEFAULT_GROUPER = "pkg/podgrouper/podgrouper/plugins/defaultgrouper/default_grouper.go"
_RESERVATION = "pkg/binder/binding/resourcereservation/resource_reservation.go"
_GPU_SHARING = "pkg/common/resources/gpu_sharing.go"

VOCABULARY: tuple[KaiKey, ...] = (
    # Queue, project, node pool, user, priority, preemptibility: the PodGroup's charge and rank.
    KaiKey("kai.scheduler/queue", "label", "exact", "pod-grouper reads (top owner, then pod)",
           f"{_CONSTANTS}:16, {_DEFAULT_GROUPER}:130", "charge its pods to another tenant's queue"),
    KaiKey("project", "label", "exact", "pod-grouper reads; queue fallback",
           f"{_PLUGIN_CONSTANTS}:8, {_DEFAULT_GROUPER}:146", "pick a queue by project name"),
    KaiKey("kai.scheduler/node-pool", "label", "exact", "pod-grouper copies to the PodGroup; scheduler shards by it",
           f"{_CONSTANTS}:22, {_DEFAULT_GROUPER}:156, pkg/podgrouper/pod_controller.go:194",
           "move its PodGroup to another scheduler shard or queue suffix"),
    KaiKey("user", "label", "exact", "pod-grouper copies to the PodGroup",
           f"{_PLUGIN_CONSTANTS}:11, {_DEFAULT_GROUPER}:121", "impersonate another user in KAI's accounting"),
    KaiKey("user", "annotation", "exact", "pod-grouper copies to the PodGroup",
           f"{_PLUGIN_CONSTANTS}:11, {_DEFAULT_GROUPER}:97", "impersonate another user in KAI's accounting"),
    KaiKey("priorityClassName", "label", "exact", "pod-grouper reads: the PodGroup's priority class",
           f"{_PLUGIN_CONSTANTS}:9, {_DEFAULT_GROUPER}:243", "raise its priority over other tenants' jobs"),
    KaiKey("kai.scheduler/preemptibility", "label", "exact", "pod-grouper reads: preemptible or not",
           f"{_PLUGIN_CONSTANTS}:10, {_DEFAULT_GROUPER}:205", "make its jobs non-preemptible"),
    KaiKey("kai.scheduler/task-priority", "label", "exact", "scheduler task-order plugin reads",
           "pkg/scheduler/constants/labels/labels.go:7, pkg/scheduler/plugins/taskorder/task_order.go:32",
           "reorder tasks (covered by the kai.scheduler/ prefix)"),
    KaiKey("kai.scheduler/", "label", "prefix", "pod-grouper copies every pod label onto the PodGroup",
           f"{_DEFAULT_GROUPER}:117", "any KAI setting carried by a PodGroup label"),
    KaiKey("kai.scheduler/", "annotation", "prefix", "pod-grouper copies every pod annotation onto the PodGroup; "
           "topology keys read", f"{_DEFAULT_GROUPER}:82-84, {_DEFAULT_GROUPER}:109",
           "topology constraints, top-owner metadata, stale and start timestamps"),
    # Grouping: which PodGroup a pod joins.
    KaiKey("pod-group-name", "annotation", "exact", "pod-grouper writes, scheduler and pod-group controller read",
           f"{_CONSTANTS}:34, pkg/scheduler/api/pod_info/pod_info.go:294, pkg/podgrouper/pod_controller.go:200",
           "join any PodGroup by name (KAI keys PodGroups by name across namespaces)"),
    KaiKey("kai.scheduler/subgroup-name", "label", "exact", "pod-grouper writes, scheduler reads",
           f"{_CONSTANTS}:49, pkg/scheduler/api/pod_info/pod_info.go:180", "move into another sub-group of a gang"),
    KaiKey("spark-app-name", "label", "exact", "pod-grouper: with spark-app-selector, an ownerless pod is a Spark pod",
           "pkg/podgrouper/podgrouper/plugins/spark/spark.go:15, :41", "switch its pods to Spark grouping"),
    KaiKey("spark-app-selector", "label", "exact", "pod-grouper: the Spark pod's PodGroup name",
           "pkg/podgrouper/podgrouper/plugins/spark/spark.go:16, :35",
           "name the PodGroup its pod joins: another tenant's gang"),
    KaiKey("training.kubeflow.org/job-name", "label", "exact", "pod-grouper (MPI jobs) reads",
           "pkg/podgrouper/podgrouper/plugins/kubeflow/mpi/mpi-grouper.go:25", "be counted as an MPI job's pod"),
    KaiKey("training.kubeflow.org/job-role", "label", "exact", "pod-grouper (MPI) and scheduler kubeflow plugin read",
           "pkg/podgrouper/podgrouper/plugins/kubeflow/mpi/mpi-grouper.go:26, pkg/scheduler/plugins/kubeflow/kubeflow.go:14",
           "reorder tasks as launcher or worker"),
    KaiKey("ray.io/node-type", "label", "exact", "scheduler ray plugin reads", "pkg/scheduler/plugins/ray/ray.go:14",
           "reorder tasks as Ray head or worker"),
    KaiKey("ray.io/priority-class-name", "label", "exact", "pod-grouper (Ray) reads: the PodGroup's priority class",
           "pkg/podgrouper/podgrouper/plugins/ray/ray_grouper.go:22, :58", "raise a Ray job's priority"),
    KaiKey("leaderworkerset.sigs.k8s.io/size", "annotation", "exact", "pod-grouper (LeaderWorkerSet) reads",
           "pkg/podgrouper/podgrouper/plugins/leaderworkerset/lws_grouper.go:23, :117", "change a gang's minMember"),
    KaiKey("leaderworkerset.sigs.k8s.io/group-index", "label", "exact", "pod-grouper (LeaderWorkerSet) reads",
           "pkg/podgrouper/podgrouper/plugins/leaderworkerset/lws_grouper.go:24, :75", "join another replica's gang"),
    KaiKey("leaderworkerset.sigs.k8s.io/worker-index", "label", "exact", "pod-grouper (LeaderWorkerSet) reads",
           "pkg/podgrouper/podgrouper/plugins/leaderworkerset/lws_grouper.go:25, :123", "pose as the gang's leader"),
    KaiKey("grove.io/podgang", "label", "exact", "pod-grouper (Grove) reads: the PodGang the pod joins",
           "pkg/podgrouper/podgrouper/plugins/grove/grove_grouper.go:22, :58", "join another PodGang by name"),
    KaiKey("serving.knative.dev/revision", "label", "exact", "pod-grouper (Knative) reads",
           "pkg/podgrouper/podgrouper/plugins/knative/knative.go:29, :57", "join a Knative revision's PodGroup"),
    KaiKey("autoscaling.knative.dev/min-scale", "annotation", "exact", "pod-grouper (Knative) reads",
           "pkg/podgrouper/podgrouper/plugins/knative/knative.go:30, :90", "change a gang's minMember"),
    # GPU sharing: fractions, the GPU group a share lives on, and the reservation that holds the GPU.
    KaiKey("gpu-fraction", "annotation", "exact", "admission, scheduler, binder, pod-group controller read",
           f"{_CONSTANTS}:35, {_GPU_SHARING}:44", "ask for a GPU share (allowed only where the policy allows fractions)"),
    KaiKey("gpu-memory", "annotation", "exact", "admission, scheduler, binder, pod-group controller read",
           f"{_CONSTANTS}:37, {_GPU_SHARING}:56", "ask for GPU memory (allowed only where the policy allows fractions)"),
    KaiKey("gpu-fraction-num-devices", "annotation", "exact", "scheduler, binder, pod-group controller read",
           f"{_CONSTANTS}:39, {_GPU_SHARING}:71", "multiply a share across GPUs"),
    KaiKey("gpu-fraction-container-name", "annotation", "exact", "binder reads: the container given the GPU",
           f"{_CONSTANTS}:36, pkg/binder/common/gpu_access.go:168", "give the GPU to another container"),
    KaiKey("received-resource-type", "annotation", "exact", "binder writes, scheduler and pod-group controller read",
           f"{_CONSTANTS}:38, pkg/scheduler/api/pod_info/pod_info.go:383",
           "claim a whole GPU was received as a fraction (or back)"),
    KaiKey("mps", "annotation", "exact", "binder reads", f"{_CONSTANTS}:40, "
           "pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go:21", "switch the GPU share to MPS"),
    KaiKey("runai/shared-gpu-configmap", "annotation", "exact", "KAI admission writes, binder and scheduler read",
           "pkg/binder/common/gpusharingconfigmap/config_map.go:20, pkg/scheduler/k8s_internal/predicates/config_maps.go:21",
           "make the binder write its GPU into ConfigMaps it chose (only the guard's prefix is admitted)"),
    KaiKey(GPU_GROUP_LABEL, "label", "exact", "binder writes; binder keeps a GPU's reservation while a pod has it",
           f"{_CONSTANTS}:45, {_GPU_SHARING}:89, {_RESERVATION}:89, :140",
           "keep a GPU's reservation pod (a whole GPU) alive, charged to no queue"),
    KaiKey(MULTI_GPU_GROUP_PREFIX, "label", "prefix", "binder writes for multi-GPU shares and keeps their reservations",
           f"{_CONSTANTS}:46, {_GPU_SHARING}:95, {_RESERVATION}:149",
           "keep any GPU's reservation pod alive from a pending pod, charged to no queue"),
    KaiKey("run.ai/reserve_for_gpu_index", "annotation", "exact", "reservation pod writes, binder reads",
           f"{_RESERVATION}:39, pkg/resourcereservation/patcher/pod_patcher.go:16",
           "pose as a reservation with a GPU index (covered by the run.ai/ prefix)"),
    KaiKey("app", "label", "value", "scheduler: reservation and scaling pods are left out of node accounting",
           "pkg/scheduler/api/pod_info/utility_pods.go:18, :27, pkg/scheduler/conf/global_config.go:25-26, "
           f"{_CONSTANTS}:19-20, pkg/scheduler/api/node_info/node_info.go:351",
           "hold GPUs that KAI does not count on the node", ("kai-resource-reservation", "scaling-pod",
                                                             "kai-scale-adjust")),
    KaiKey("shared-gpu-pod-name", "label", "exact", "node-scale adjuster reads off its scaling pods: the pod it holds "
           "a node for", "pkg/nodescaleadjuster/scaler/scaler.go:97, pkg/nodescaleadjuster/scaler/scaling_pod.go:46",
           "pose as a scaling pod's pending GPU share (read in KAI's namespace only)"),
    KaiKey("shared-gpu-pod-namespace", "label", "exact", "node-scale adjuster reads off its scaling pods",
           "pkg/nodescaleadjuster/scaler/scaler.go:98, pkg/nodescaleadjuster/scaler/scaling_pod.go:47",
           "pose as a scaling pod's pending GPU share (read in KAI's namespace only)"),
    KaiKey("karpenter.sh/do-not-disrupt", "annotation", "exact", "binder writes on reservation pods",
           f"{_RESERVATION}:477", "pin a node against consolidation as a reservation does"),
    # Node keys: KAI reads them off nodes, which tenants cannot write.
    KaiKey("node-role.kubernetes.io/gpu-worker", "label", "exact", "scheduler reads (nodes)",
           f"{_CONSTANTS}:26, pkg/scheduler/plugins/predicates/predicates.go:248", "none on a pod (node key)"),
    KaiKey("node-role.kubernetes.io/cpu-worker", "label", "exact", "scheduler reads (nodes)",
           f"{_CONSTANTS}:25, pkg/scheduler/plugins/predicates/predicates.go:254", "none on a pod (node key)"),
    KaiKey("node-role.kubernetes.io/mig-enabled", "label", "exact", "scheduler reads (nodes)",
           f"{_CONSTANTS}:27, pkg/scheduler/api/node_info/node_info.go:661", "none on a pod (node key)"),
    KaiKey("nvidia.com/", "label", "prefix", "scheduler reads nvidia.com/gpu.count, gpu.memory, mig.strategy (nodes)",
           f"{_CONSTANTS}:9, :47-48, pkg/scheduler/api/node_info/node_info.go:586", "none on a pod (node keys)"),
    KaiKey("beta.amd.com/gpu.vram", "label", "prefix", "pod-group controller reads (nodes)",
           "pkg/podgroupcontroller/controllers/resources/fraction.go:22, :115", "none on a pod (node key)"),
)


_GROUPER = "pkg/podgrouper/podgrouper/plugins/defaultgrouper/default_grouper.go"
_POOL_KEY, _QUEUE_KEY = "kai.scheduler/node-pool", "kai.scheduler/queue"
EXPRESSIONS: dict[tuple[str, str], str] = {
    # Keys KAI takes from its configuration (flags, its config CR): the key each holds by default.
    (_GROUPER, "dg.queueLabelKey"): _QUEUE_KEY,
    ("pkg/podgrouper/podgroup/handler.go", "h.queueLabelKey"): _QUEUE_KEY,
    ("pkg/queuecontroller/controllers/resource_updater/resource_updater.go", "ru.QueueLabelKey"): _QUEUE_KEY,
    (_GROUPER, "dg.nodePoolLabelKey"): _POOL_KEY,
    ("pkg/podgrouper/podgroup/handler.go", "h.nodePoolKey"): _POOL_KEY,
    ("pkg/podgrouper/pod_controller.go", "nodePoolKey"): _POOL_KEY,
    ("pkg/scheduler/utils/node_pool_utils.go", "nodePoolLabelKey"): _POOL_KEY,
    ("pkg/scheduler/cache/cache.go", "sc.schedulingNodePoolParams.NodePoolLabelKey"): _POOL_KEY,
    ("pkg/scheduler/conf/scheduler_conf.go", "s.NodePoolLabelKey"): _POOL_KEY,
    ("pkg/scheduler/cache/cluster_info/cluster_info.go", "cpuWorkerLabelKey"): "node-role.kubernetes.io/cpu-worker",
    ("pkg/scheduler/plugins/predicates/predicates.go", "cpuWorkerLabelKey"): "node-role.kubernetes.io/cpu-worker",
    ("pkg/scheduler/cache/cluster_info/cluster_info.go", "gpuWorkerLabelKey"): "node-role.kubernetes.io/gpu-worker",
    ("pkg/scheduler/plugins/predicates/predicates.go", "gpuWorkerLabelKey"): "node-role.kubernetes.io/gpu-worker",
    ("pkg/scheduler/plugins/proportion/proportion.go", "gpuWorkerLabelKey"): "node-role.kubernetes.io/gpu-worker",
    ("pkg/scheduler/api/node_info/node_info.go", "migWorkerLabelKey"): "node-role.kubernetes.io/mig-enabled",
    # Keys of other modules or computed ones.
    ("pkg/binder/binding/resourcereservation/resource_reservation.go", "karpenterv1.DoNotDisruptAnnotationKey"):
        "karpenter.sh/do-not-disrupt",
    ("pkg/binder/binding/resourcereservation/resource_reservation.go", "labelKey"): MULTI_GPU_GROUP_PREFIX,
    ("pkg/binder/binding/resourcereservation/resource_reservation.go", "multiGroupKey"): MULTI_GPU_GROUP_PREFIX,
}
"""A key KAI's source gives by a Go expression (``kai_key_uses`` keeps it as written): the key it holds."""
SET_ASIDE: dict[tuple[str, str], str] = {
    ("pkg/scheduler/cache/cache.go", "k"): "the scheduler copies its node-pool parameters' labels onto a BindRequest",
    ("pkg/scheduler/cache/cache.go", "pod-name"): "a label the scheduler writes on its BindRequest, not read off a pod",
    ("pkg/scheduler/cache/cache.go", "selected-node"): "a label the scheduler writes on its BindRequest, not read off "
                                                       "a pod",
    ("pkg/podgrouper/pod_controller.go", "key"): "matches a namespace's labels against a configured selector",
    ("pkg/queuecontroller/metrics/metrics.go", "queueLabelKey"): "labels of a Queue copied into metrics, "
                                                                 "not read off a pod",
    ("pkg/scheduler/plugins/topology/common.go", "level.NodeLabel"): "node labels a Topology object names (nodes only)",
    ("pkg/scheduler/plugins/topology/topology_structs.go", "levelLabel"): "node labels a Topology object names "
                                                                          "(nodes only)",
}
"""Uses that are no key a tenant's pod could carry, by (file, key or Go expression): why."""


def _covers(entry: KaiKey, kind: str, key: str, prefix: bool = False) -> bool:
    """A key KAI reads exactly is covered by an entry of that key or a prefix of it; a prefix KAI
    reads (every key starting with it) only by a prefix entry."""
    if entry.kind != kind:
        return False
    return (entry.match == "prefix" and key.startswith(entry.key)) or (not prefix and entry.key == key)


def unaccounted(uses: tuple[tuple[str, str, bool, str, bool], ...] = KEY_USES) -> list[str]:
    """What of KAI's key uses (``kai_key_uses.KEY_USES``'s shape) this module does not account for,
    one line each naming the key and where; empty when the vocabulary is complete and current."""
    problems, found = [], set()
    for kind, key, resolved, where, prefix in uses:
        path = where.rsplit(":", 1)[0]
        if (path, key) in SET_ASIDE:
            continue
        if not resolved:
            if (path, key) not in EXPRESSIONS:
                problems.append(f"{kind} key given by `{key}` at {where}: name the key it holds in EXPRESSIONS "
                                "or say why it is none in SET_ASIDE")
                continue
            key = EXPRESSIONS[(path, key)]
        found.add((kind, key))
        if not any(_covers(entry, kind, key, prefix) for entry in VOCABULARY):
            read = "every key starting with" if prefix else "key"
            problems.append(f"{kind} {read} {key!r} used at {where} is in no entry of VOCABULARY: add it, with who "
                            "reads it and what a tenant setting it could do")
    for entry in VOCABULARY:
        if not any(_covers(entry, kind, key) for kind, key in found):
            problems.append(f"VOCABULARY's {entry.kind} {entry.key!r} is used nowhere in KAI {KAI_VERSION}: remove it "
                            "or find the use the scan misses")
    return problems


def reserved(kind: Kind, match: Match) -> tuple[str, ...]:
    """The keys of one kind and match, in table order, without repeats."""
    return tuple(dict.fromkeys(k.key for k in VOCABULARY if k.kind == kind and k.match == match))


def reserved_values(kind: Kind) -> dict[str, tuple[str, ...]]:
    """Keys reserved by value only: key -> the values KAI gives a meaning."""
    return {k.key: k.values for k in VOCABULARY if k.kind == kind and k.match == "value"}


def markdown_table() -> str:
    """docs/threat-model.md's table of KAI's vocabulary."""
    rows = [f"KAI-Scheduler {KAI_VERSION} (`{KAI_MODULE}`), paths under the module:", "",
            "| key | kind | match | who reads / writes it | source | a tenant setting it could |",
            "|---|---|---|---|---|---|"]
    for k in VOCABULARY:
        match = f"value {', '.join(k.values)}" if k.match == "value" else k.match
        rows.append(f"| `{k.key}` | {k.kind} | {match} | {k.who} | {k.source} | {k.lever} |")
    return "\n".join(rows)
