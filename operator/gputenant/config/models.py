"""The operator's configuration document: GPU pools, the trust -> sharing mapping, chart location.

Platform engineers keep it in a ConfigMap (the Helm chart renders it from values); the operator
and the offline renderer load it from a YAML file. Everything the policy needs about the hardware
comes from here, so the policy stays a pure function.
"""

from __future__ import annotations

import re
from enum import Enum
from ipaddress import IPv4Network, ip_address
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, model_validator

from gputenant.api.hub import SharingMode, Trust
from gputenant.api.trust import allowed_modes, names, weakest_allowed
from gputenant.api.types import DnsLabel
from gputenant.config.base import ConfigModel
from gputenant.config.fleet import FleetConfig
from gputenant.config.network import PlatformEndpoint, TierEgress, egress_problems, tier_egress
from gputenant.config.pools import CpuPool, Pool
from gputenant.timefmt import DURATION_PATTERN


class ExposureType(str, Enum):
    """The vCluster Service's type (controlPlane.service.spec.type of the chart)."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class VClusterExposure(ConfigModel):
    """How the vCluster API is reached from outside the tenant's namespace (docs/rendering.md, "Exposure")."""

    type: ExposureType = Field(
        default=ExposureType.CLUSTER_IP,
        description=(
            "ClusterIP: only inside the host cluster, at https://<release>.<namespace>.svc:443. NodePort: at "
            "https://<address>:<the Service's node port>, from anywhere that reaches a node. LoadBalancer: at "
            "https://<the address the load balancer gave the Service>:443, one per tenant."
        ),
    )
    address: str | None = Field(
        default=None,
        description=(
            "NodePort: host name or IP address of the nodes that clients dial (required). LoadBalancer: an IP "
            "address to request for the Service (spec.loadBalancerIP; optional, else the implementation "
            "assigns one; only sensible for a single tenant). The vCluster's certificate is signed for it."
        ),
    )
    load_balancer_class: str | None = Field(
        default=None,
        description="LoadBalancer only: spec.loadBalancerClass of the Service, the implementation that serves it.",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "LoadBalancer only: annotations of the vCluster Service, read by the implementation "
            "(e.g. metallb.io/address-pool)."
        ),
    )

    @model_validator(mode="after")
    def _address_matches_type(self) -> VClusterExposure:
        if self.type is ExposureType.NODE_PORT and not self.address:
            raise ValueError("vcluster.exposure: type NodePort needs address, the node host name or IP clients dial")
        if self.type is ExposureType.CLUSTER_IP and self.address:
            raise ValueError("vcluster.exposure: address is set but type is ClusterIP, which has no outside "
                             "address; set type: NodePort or LoadBalancer, or remove address")
        if self.type is not ExposureType.LOAD_BALANCER and (self.load_balancer_class or self.annotations):
            raise ValueError(f"vcluster.exposure: loadBalancerClass and annotations apply to type LoadBalancer only, "
                             f"not {self.type.value}; set type: LoadBalancer or remove them")
        if self.address and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.:-]*[A-Za-z0-9])?", self.address):
            raise ValueError(f"vcluster.exposure.address {self.address!r} is not a host name or IP address; "
                             "give one without scheme or port, e.g. 192.0.2.10 or nodes.example.com")
        if self.type is ExposureType.LOAD_BALANCER and self.address and not _is_ip(self.address):
            raise ValueError(f"vcluster.exposure.address {self.address!r}: type LoadBalancer requests an IP address "
                             "(spec.loadBalancerIP), not a name; give an IP of the implementation's pool or remove "
                             "address to take the one it assigns")
        return self


def _is_ip(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True


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
            "cluster except these, so that rule cannot reach the operator's pods (CNIs apply ipBlock to pod IPs too). "
            "List the node networks too, and tenant pods reach no node's kubelet either."
        ),
    )
    api_server_networks: list[IPv4Network] = Field(
        default_factory=list,
        description=(
            "The host API server's addresses (the endpoints of Service default/kubernetes). Tenant NetworkPolicies "
            "allow egress to them on apiServerPort, which each vCluster's syncer needs when clusterNetworks covers them."
        ),
    )
    api_server_port: int = Field(
        default=6443, ge=1, le=65535,
        description="The port of apiServerNetworks the syncers reach (that of Service default/kubernetes' endpoints).",
    )
    tenant_egress: dict[Trust, TierEgress] = Field(
        default_factory=dict,
        description=(
            "Per trust level, what tenant pods may reach besides their own namespace and the host's DNS (port 53): "
            "internet (addresses outside clusterNetworks) and platformEndpoints (a namespace or address block with "
            "its ports each). Unset: nothing of the cluster, and the internet for Trusted and Internal only."
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
    fleet: FleetConfig = Field(default_factory=FleetConfig)

    @model_validator(mode="after")
    def _prices_name_pools(self) -> OperatorConfig:
        unknown = sorted(set(self.accounting.price_per_gpu_hour) - {pool.name for pool in self.pools})
        if unknown:
            raise ValueError(f"accounting.pricePerGpuHour names {unknown}, which are not pools; name pools of `pools`")
        for pool, price in self.accounting.price_per_gpu_hour.items():
            if price < 0:
                raise ValueError(f"accounting.pricePerGpuHour.{pool}: {price} is negative; give 0 or more")
        return self
    kai_reservation_namespace: str = Field(
        default="kai-resource-reservation",
        description=(
            "Where KAI's binder creates its GPU reservation pods (its --resource-reservation-namespace). The pool "
            "report names GPUs they hold that no live tenant share explains."
        ),
    )

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
    def _egress_opens_no_tenant_or_operator(self) -> OperatorConfig:
        problems = egress_problems(self.tenant_egress, self.operator_namespace, self.namespace_prefix)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def egress(self, trust: Trust) -> tuple[bool, list[PlatformEndpoint]]:
        """(internet egress, platform endpoints) of the trust level's pods."""
        return tier_egress(self.tenant_egress, trust)

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
