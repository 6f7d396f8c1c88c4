"""The operator's configuration document: GPU pools, the trust -> sharing mapping, chart location.

Platform engineers keep it in a ConfigMap (the Helm chart renders it from values); the operator
and the offline renderer load it from a YAML file. Everything the policy needs about the hardware
comes from here, so the policy stays a pure function.
"""

from __future__ import annotations

import re
from enum import Enum
from ipaddress import IPv4Network
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from gputenant.api.gpus import MIG_PROFILES, mig_layout
from gputenant.api.trust import allowed_modes, names, weakest_allowed
from gputenant.api.types import DnsLabel
from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.timefmt import DURATION_PATTERN


class ConfigModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class PoolMode(str, Enum):
    """The one sharing mechanism a pool's nodes are set up for."""

    TIME_SLICING = "TimeSlicing"
    HAMI = "HAMi"
    MIG = "MIG"
    EXCLUSIVE = "Exclusive"


class Toleration(ConfigModel):
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None


class TimeSlicingPool(ConfigModel):
    """NVIDIA device-plugin time-slicing settings for the pool's nodes."""

    replicas: int = Field(ge=2, le=64, description="Replicas advertised per physical GPU.")
    rename_by_default: bool = Field(default=False, description="Advertise nvidia.com/gpu.shared instead of nvidia.com/gpu.")
    fail_requests_greater_than_one: bool = Field(
        default=True, description="Reject containers asking for more than one replica (they would not get more compute)."
    )


class MigStrategy(str, Enum):
    MIXED = "mixed"
    SINGLE = "single"


class MigPool(ConfigModel):
    """MIG layout of the pool's nodes (GPU Operator mig-manager)."""

    strategy: MigStrategy = MigStrategy.MIXED
    config: str = Field(description="Value of the nvidia.com/mig.config node label, e.g. all-1g.10gb or all-balanced.")
    profiles: list[str] = Field(min_length=1, description="MIG profiles the layout offers, e.g. [1g.10gb, 3g.40gb].")
    default_profile: str | None = Field(default=None, description="Profile for tenants that name none. Unset: the first.")


HAMI_IMAGE = "docker.io/projecthami/hami:v2.6.1"
"""HAMi's device-plugin image, which ships HAMi-core as ``/k8s-vgpu/lib/nvidia/libvgpu.so.<version>``
(HAMi's ``docker/Dockerfile``; its ``vgpu-init.sh`` copies that directory onto each node)."""


class HamiLibrary(ConfigModel):
    """Where the admission guard's init container copies HAMi-core (``libvgpu.so``) from, into each capped
    pod's own read-only volume (docs/gpu-pools.md, "HAMi-core library"). The image needs ``/bin/sh`` and
    ``cp``; a pod whose copy fails does not start (fail closed)."""

    image: str = Field(default=HAMI_IMAGE, min_length=1,
                       description="Image that carries libvgpu.so, e.g. HAMi's device-plugin image.")
    path: str = Field(default="/k8s-vgpu/lib/nvidia/libvgpu.so.v2.6.1", pattern=r"^/[^\s'\"$`\\]+$",
                      description="Absolute path of libvgpu.so inside the image (no spaces or shell characters).")
    image_pull_policy: str = Field(default="IfNotPresent", pattern="^(Always|IfNotPresent|Never)$",
                                   description="Pull policy of the init container.")


class HamiPool(ConfigModel):
    """Settings of a HAMi-mode pool: KAI GPU fractions on NVIDIA's device plugin, capped by HAMi-core
    (docs/units.md). Pools are homogeneous: every GPU has the pool's gpuMemoryMiB, from which a share's
    memory cap is computed."""

    split_count: int = Field(default=10, ge=1, le=100,
                             description="Most shares per GPU: a tenant's share is at least 100/splitCount percent.")
    library: HamiLibrary = Field(default_factory=HamiLibrary,
                                 description="The HAMi-core library the guard loads into every capped container.")


class CpuPool(ConfigModel):
    """The nodes for a tenant's pods that ask for no GPU: its vCluster's control plane, CoreDNS and
    CPU-only work. The admission guard pins every such pod here, as it pins GPU pods to their pool."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Labels of the CPU nodes; set on every tenant pod without GPUs."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of the CPU nodes' taints; added to every tenant pod without GPUs."
    )


class Pool(ConfigModel):
    """A set of GPU nodes prepared for one sharing mechanism."""

    name: str
    mode: PoolMode
    gpu_model: str = Field(description="GPU model, e.g. A100-80GB, H100-80GB, H200-141GB, A30-24GB, A100-40GB, L4.")
    gpu_memory_mi_b: int = Field(alias="gpuMemoryMiB", ge=1, description="Memory of one GPU in MiB.")
    gpus: int | None = Field(default=None, ge=0, description="Physical GPUs in the pool; unset: capacity is not checked.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    scheduler_name: str = Field(default="kai-scheduler", description="Scheduler that places the pool's pods.")
    device_plugin_config: str | None = Field(
        default=None, description="Name of the device-plugin config for this pool (nvidia.com/device-plugin.config label)."
    )
    time_slicing: TimeSlicingPool | None = None
    mig: MigPool | None = None
    hami: HamiPool | None = None
    trust_levels: list[Trust] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Trust levels whose tenants the pool serves; the policy never places a tenant on a pool outside its trust. "
            "Unset: every trust level that may use the pool's mode (docs/trust-levels.md, \"Pools and trust\")."
        ),
    )

    @property
    def serves(self) -> tuple[Trust, ...]:
        """The trust levels the pool serves: its trustLevels, or every trust its mode is allowed for."""
        if self.trust_levels is not None:
            return tuple(self.trust_levels)
        return tuple(trust for trust in Trust if SharingMode(self.mode.value) in allowed_modes(trust))

    @model_validator(mode="after")
    def _trust_levels_allow_the_mode(self) -> Pool:
        """A pool may not declare a trust level its mode isolates too weakly (e.g. Untrusted on TimeSlicing)."""
        for trust in self.trust_levels or ():
            if SharingMode(self.mode.value) not in allowed_modes(trust):
                raise ValueError(
                    f"pool {self.name!r}: trustLevels has {trust.value}, but {self.mode.value} isolates {trust.value} "
                    f"tenants too weakly; remove {trust.value} or use a pool of {names(allowed_modes(trust))}"
                )
        return self

    @model_validator(mode="after")
    def _mode_blocks_match_mode(self) -> Pool:
        """Exactly the block of the pool's mode may be set; HAMi's block has defaults and is filled in."""
        blocks = {
            PoolMode.TIME_SLICING: ("timeSlicing", self.time_slicing),
            PoolMode.MIG: ("mig", self.mig),
            PoolMode.HAMI: ("hami", self.hami),
        }
        for mode, (block, value) in blocks.items():
            if mode is not self.mode and value is not None:
                raise ValueError(
                    f"pool {self.name!r}: {block} is set but mode is {self.mode.value}; remove {block} or set mode: {mode.value}"
                )
        if self.mode is PoolMode.TIME_SLICING and self.time_slicing is None:
            raise ValueError(f"pool {self.name!r}: mode TimeSlicing needs timeSlicing.replicas (time-slice replicas per GPU)")
        if self.mode is PoolMode.MIG and self.mig is None:
            raise ValueError(f"pool {self.name!r}: mode MIG needs mig.config (the nvidia.com/mig.config label) and mig.profiles")
        if self.mode is PoolMode.HAMI and self.hami is None:
            self.hami = HamiPool()
        if self.mig is not None:
            self._check_mig_layout(self.mig)
        return self

    def time_slicing_settings(self) -> TimeSlicingPool:
        """The timeSlicing block, which a TimeSlicing pool always has (checked on load)."""
        if self.time_slicing is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a TimeSlicing pool")
        return self.time_slicing

    def mig_settings(self) -> MigPool:
        """The mig block, which a MIG pool always has (checked on load)."""
        if self.mig is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a MIG pool")
        return self.mig

    def hami_settings(self) -> HamiPool:
        """The hami block, which a HAMi pool always has (filled in on load)."""
        if self.hami is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a HAMi pool")
        return self.hami

    def _check_mig_layout(self, mig: MigPool) -> None:
        """Profiles must exist on the GPU model and, for the standard mig-parted configs, in the layout."""
        field = f"pool {self.name!r}"
        on_gpu = MIG_PROFILES.get(self.gpu_model)
        if on_gpu is None:
            raise ValueError(
                f"{field}: gpuModel {self.gpu_model} has no MIG; MIG pools need one of {', '.join(MIG_PROFILES)}"
            )
        known = [profile.name for profile in on_gpu]
        for profile in mig.profiles:
            if profile not in known:
                raise ValueError(
                    f"{field}: mig.profiles has {profile}, which {self.gpu_model} does not offer; "
                    f"its profiles are {', '.join(known)}"
                )
        if mig.default_profile is not None and mig.default_profile not in mig.profiles:
            raise ValueError(f"{field}: mig.defaultProfile {mig.default_profile} is not in mig.profiles {mig.profiles}")
        if mig.strategy is MigStrategy.SINGLE and len(mig.profiles) != 1:
            raise ValueError(
                f"{field}: mig.strategy single advertises every instance as nvidia.com/gpu, so mig.profiles "
                f"must list exactly one profile; use strategy mixed for {mig.profiles}"
            )
        layout = mig_layout(self.gpu_model, mig.config)
        if layout is not None and not set(mig.profiles) <= set(layout):
            missing = sorted(set(mig.profiles) - set(layout))
            raise ValueError(
                f"{field}: mig.config {mig.config} has no {', '.join(missing)} instances on {self.gpu_model} "
                f"(it has {', '.join(layout)}); fix mig.profiles or mig.config"
            )


class ExposureType(str, Enum):
    """The vCluster Service's type (controlPlane.service.spec.type of the chart)."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"


class VClusterExposure(ConfigModel):
    """How the vCluster API is reached from outside the tenant's namespace (docs/rendering.md, "Exposure")."""

    type: ExposureType = Field(
        default=ExposureType.CLUSTER_IP,
        description=(
            "ClusterIP: only inside the host cluster, at https://<release>.<namespace>.svc:443. NodePort: at "
            "https://<address>:<the Service's node port>, from anywhere that reaches a node."
        ),
    )
    address: str | None = Field(
        default=None,
        description=(
            "Host name or IP address of the nodes that clients dial (NodePort); the vCluster's certificate is "
            "signed for it and the kubeconfigs name it."
        ),
    )

    @model_validator(mode="after")
    def _address_matches_type(self) -> VClusterExposure:
        if self.type is ExposureType.NODE_PORT and not self.address:
            raise ValueError("vcluster.exposure: type NodePort needs address, the node host name or IP clients dial")
        if self.type is ExposureType.CLUSTER_IP and self.address:
            raise ValueError("vcluster.exposure: address is set but type is ClusterIP, which has no outside "
                             "address; set type: NodePort or remove address")
        if self.address and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?", self.address):
            raise ValueError(f"vcluster.exposure.address {self.address!r} is not a host name or IP address; "
                             "give one without scheme or port, e.g. 192.0.2.10 or nodes.example.com")
        return self


class VClusterChart(ConfigModel):
    """Where the vcluster chart comes from, and how its API is exposed."""

    repository: str = Field(default="https://charts.loft.sh", description="Chart repository URL.")
    name: str = Field(default="vcluster", description="Chart name in the repository.")
    version: str = Field(default="0.36.1", description="Default chart version.")
    local_path: str | None = Field(default=None, description="Local chart directory (air-gapped clusters, tests); wins over repository.")
    exposure: VClusterExposure = Field(default_factory=VClusterExposure)


KAI_UNLIMITED = -1
"""KAI's value for an unlimited queue quota or limit (`UnlimitedResourceQuantity`)."""
DEFAULT_PARENT_QUEUE = "gpu-tenants"
"""Not KAI's own names (`default`, `default-parent-queue`), so the operator never fights KAI's
installation over one Queue."""


class QueueResource(ConfigModel):
    """One resource of a parent KAI Queue, in KAI's units; -1 is KAI's "unlimited"."""

    quota: float = Field(
        default=KAI_UNLIMITED,
        description=(
            "Deserved by the department, shared by its tenants' queues: their quotas are only guaranteed within it. "
            "-1: whatever its queues request (KAI's own default parent queue); 0: no guarantee, only idle resources."
        ),
    )
    limit: float = Field(default=KAI_UNLIMITED, description="Most the department's queues may use together; -1: no limit.")
    over_quota_weight: float = Field(
        default=1, ge=0, description="Share of idle resources above quota, against departments of the same priority."
    )

    @model_validator(mode="after")
    def _kai_values(self) -> QueueResource:
        for field, value in (("quota", self.quota), ("limit", self.limit)):
            if value != KAI_UNLIMITED and value < 0:
                raise ValueError(f"{field} {value:g} is negative; use -1 for unlimited, or 0 or more")
        if KAI_UNLIMITED not in (self.quota, self.limit) and self.limit < self.quota:
            raise ValueError(f"limit {self.limit:g} is below quota {self.quota:g}; raise limit, or -1 for no limit")
        return self


class ParentQueueResources(ConfigModel):
    gpu: QueueResource = Field(
        default_factory=QueueResource,
        description="GPUs in KAI units: a whole GPU is 1, a MIG instance its compute slices (docs/units.md).",
    )
    cpu: QueueResource = Field(default_factory=QueueResource, description="CPU in millicores.")
    memory: QueueResource = Field(default_factory=QueueResource, description="Memory in megabytes (10^6 bytes).")


class ParentQueue(ConfigModel):
    """A department KAI Queue that the operator creates and keeps, the parent of tenants' Queues.
    KAI v0.12 schedules only from queues that have a parent, and drops a queue whose parent is
    missing."""

    name: DnsLabel
    display_name: str | None = Field(default=None, description="Shown by KAI's tools. Unset: the name.")
    priority: int = Field(
        default=100,
        description="Idle resources go first to departments of higher priority, which are reclaimed last (KAI's default: 100).",
    )
    resources: ParentQueueResources = Field(default_factory=ParentQueueResources)


def _parent_queue_by_name(value: Any) -> Any:
    """`research` is short for `{name: research}`: a department with KAI's defaults."""
    return {"name": value} if isinstance(value, str) else value


class DevicePluginConfigMap(ConfigModel):
    """The NVIDIA device-plugin config ConfigMap the operator keeps (one key per time-slicing pool)."""

    name: str = "gputenant-device-plugin-config"
    namespace: str = "gpu-operator"


class GuardConfig(ConfigModel):
    """What the admission guard lets tenant pods name beyond their GPU policy; empty lists grant nothing."""

    runtime_class_names: list[str] = Field(
        default_factory=list,
        description="RuntimeClasses tenant pods may name in runtimeClassName (e.g. a sandbox); the nvidia runtime "
        "shows a pod every GPU its image asks for, so it is not granted by default.",
    )
    device_classes: list[str] = Field(
        default_factory=list,
        description="DRA DeviceClasses whose extended resources (<class>.deviceclass.resource.k8s.io/devices) "
        "tenant pods may request. Pod resourceClaims are always refused: the guard cannot see their class.",
    )
    priority_class_names: list[str] = Field(
        default_factory=list,
        description="PriorityClasses tenant pods may name in priorityClassName; KAI reads priority and "
        "preemptibility from it.",
    )


class MemorySentinel(ConfigModel):
    """The GPU-memory sentinel (docs/metrics.md, "GPU memory held by no one"): runs where the
    operator reads the DCGM exporter's series (gputenant run --prometheus-url); never resets a GPU."""

    floor_mi_b: float = Field(
        default=256, alias="floorMiB", ge=0,
        description="GPU memory (MiB) above which a GPU no live pod holds is suspect; below it is noise.")
    grace: str = Field(
        default="5m", pattern=DURATION_PATTERN,
        description="How long memory must stay held by no one before it is reported (whole h/m/s): the time a "
                    "finished pod's driver teardown and the exporter's pod mapping may lag.")
    cordon: bool = Field(
        default=False,
        description="Cordon a node while memory on one of its GPUs is held by no one (and uncordon it, if the "
                    "operator cordoned it, once released).")


class Accounting(ConfigModel):
    """Prices that turn GPU-hours by share into a cost per tenant (gputenant usage --since)."""

    currency: str = Field(default="USD", max_length=8, description="Shown next to every cost.")
    price_per_gpu_hour: dict[str, float] = Field(
        default_factory=dict,
        description="Price of one whole GPU for one hour, per pool name; a share costs its fraction of it. A pool "
                    "left out costs nothing.")


class OperatorConfig(ConfigModel):
    """The whole configuration document."""

    namespace_prefix: str = Field(default="tenant-", description="Host namespace of tenant X is <prefix>X.")
    field_manager: str = Field(default="gpu-tenant-operator", description="Server-side apply field manager.")
    operator_namespace: str = Field(
        default="gpu-tenant-operator",
        description="Namespace the operator runs in; tenant NetworkPolicies let it reach each vCluster API.",
    )
    operator_service_account: str | None = Field(
        default=None,
        description="ServiceAccount (in operatorNamespace) the operator runs as; set by the Helm chart.",
    )
    tenant_namespace_cluster_role: str | None = Field(
        default=None,
        description=(
            "ClusterRole the operator binds operatorServiceAccount to, by a RoleBinding in each tenant "
            "namespace before writing anything else there, so it holds namespaced rights (Secrets included) "
            "only in tenant namespaces. Set by the Helm chart; unset: no such binding (e.g. a cluster-admin "
            "identity in the local demo)."
        ),
    )
    cluster_networks: list[IPv4Network] = Field(
        default_factory=list,
        description=(
            "The host cluster's IPv4 pod and service CIDRs. Tenant NetworkPolicies allow egress to addresses outside the "
            "cluster except these, so that rule cannot reach the operator's pods (CNIs apply ipBlock to pod IPs too)."
        ),
    )
    trust_modes: dict[Trust, SharingMode] = Field(
        default_factory=lambda: {trust: weakest_allowed(trust) for trust in Trust},
        description="Mechanism for tenants whose sharing mode is Auto; a trust left out gets its weakest allowed mechanism.",
    )
    pools: list[Pool] = Field(default_factory=list)
    cpu_pool: CpuPool = Field(
        default_factory=CpuPool,
        description=(
            "Where tenant pods without GPUs run (vCluster control plane, CoreDNS, CPU-only work). Unset: wherever "
            "the host scheduler puts them, which keeps them off GPU nodes only if those are tainted."
        ),
    )
    parent_queues: list[
        Annotated[ParentQueue, BeforeValidator(_parent_queue_by_name, json_schema_input_type=ParentQueue | DnsLabel)]
    ] = Field(
        default_factory=list,
        description=(
            "KAI Queues (departments) the operator creates and keeps, and that a tenant may name as gpu.parentQueue "
            "(a name alone: unlimited quota and limit). Empty: a tenant may name any queue that is not another "
            "tenant's (the admission webhook refuses those); then it must exist."
        ),
    )
    default_parent_queue: DnsLabel = Field(
        default=DEFAULT_PARENT_QUEUE,
        description=(
            "Parent of the Queue of every tenant without gpu.parentQueue. The operator creates it as parentQueues "
            "declares it, else with unlimited quota and limit (its tenants' quotas and limits decide)."
        ),
    )
    vcluster: VClusterChart = Field(default_factory=VClusterChart)
    device_plugin_config_map: DevicePluginConfigMap = Field(default_factory=DevicePluginConfigMap)
    guard: GuardConfig = Field(default_factory=GuardConfig)
    memory_sentinel: MemorySentinel = Field(default_factory=MemorySentinel)
    accounting: Accounting = Field(default_factory=Accounting)

    @model_validator(mode="after")
    def _prices_name_pools(self) -> OperatorConfig:
        unknown = sorted(set(self.accounting.price_per_gpu_hour) - {pool.name for pool in self.pools})
        if unknown:
            raise ValueError(f"accounting.pricePerGpuHour names {unknown}, which are not pools; name pools of `pools`")
        for pool, price in self.accounting.price_per_gpu_hour.items():
            if price < 0:
                raise ValueError(f"accounting.pricePerGpuHour.{pool}: {price} is negative; give 0 or more")
        return self

    @model_validator(mode="after")
    def _pools_and_trust_modes_are_consistent(self) -> OperatorConfig:
        """Pool names are unique; trustModes is complete and never weaker than the trust allows."""
        seen: set[str] = set()
        for pool in self.pools:
            if pool.name in seen:
                raise ValueError(f"pools: the name {pool.name!r} is used by more than one pool; pool names must be unique")
            seen.add(pool.name)
        for trust, mode in self.trust_modes.items():
            if mode not in allowed_modes(trust):
                raise ValueError(
                    f"trustModes.{trust.value}: {mode.value} is not allowed for {trust.value} tenants; use {names(allowed_modes(trust))}"
                )
        self.trust_modes = {trust: self.trust_modes.get(trust, weakest_allowed(trust)) for trust in Trust}
        return self

    @model_validator(mode="after")
    def _parent_queue_names_are_unique(self) -> OperatorConfig:
        seen: set[str] = set()
        for queue in self.parent_queues:
            if queue.name in seen:
                raise ValueError(f"parentQueues: {queue.name!r} is declared more than once; declare each parent queue once")
            seen.add(queue.name)
        return self

    @model_validator(mode="after")
    def _tenant_namespace_role_has_a_subject(self) -> OperatorConfig:
        """The operator binds operatorServiceAccount to tenantNamespaceClusterRole: one needs the other."""
        if self.tenant_namespace_cluster_role and not self.operator_service_account:
            raise ValueError("tenantNamespaceClusterRole is set but operatorServiceAccount is not: set "
                             "operatorServiceAccount to the ServiceAccount the operator runs as (the Helm chart sets both)")
        return self

    def platform_parent_queues(self) -> list[ParentQueue]:
        """The parent Queues the operator keeps: parentQueues, and defaultParentQueue (with KAI's
        unlimited defaults) unless parentQueues declares it."""
        declared = [queue.name for queue in self.parent_queues]
        default = [] if self.default_parent_queue in declared else [ParentQueue(name=self.default_parent_queue)]
        return [*self.parent_queues, *default]

    @property
    def parent_queue_names(self) -> list[str]:
        """What a tenant may name as gpu.parentQueue when parentQueues is not empty."""
        return [queue.name for queue in self.platform_parent_queues()]

    def pool(self, name: str) -> Pool | None:
        return next((p for p in self.pools if p.name == name), None)

    @classmethod
    def load(cls, path: str | Path) -> OperatorConfig:
        """Load from a YAML file (a mounted ConfigMap key in production)."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        return cls.model_validate(data)
