"""GpuTenant v1alpha1: what platform engineers write in Git, and what the operator reports back.

These models are the single source of the API: ``crds/tenant.yaml`` is generated from them
(``gputenant crd``), descriptions included, so ``kubectl explain`` and the pydantic validation
cannot drift apart.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
    )


class Trust(str, Enum):
    """How far the organisation trusts the tenant; decides how GPUs may be shared."""

    TRUSTED = "Trusted"
    INTERNAL = "Internal"
    UNTRUSTED = "Untrusted"


class SharingMode(str, Enum):
    """GPU-sharing mechanism. ``Auto`` takes the operator's default for the tenant's trust."""

    AUTO = "Auto"
    TIME_SLICING = "TimeSlicing"
    HAMI = "HAMi"
    MIG = "MIG"
    EXCLUSIVE = "Exclusive"


class SubjectKind(str, Enum):
    USER = "User"
    GROUP = "Group"
    SERVICE_ACCOUNT = "ServiceAccount"


class MemberRole(str, Enum):
    ADMIN = "admin"
    EDIT = "edit"
    VIEW = "view"


class KubeconfigRole(str, Enum):
    ADMIN = "admin"
    VIEW = "view"


class DeletionPolicy(str, Enum):
    DELETE = "Delete"
    RETAIN = "Retain"


class Subject(ApiModel):
    """A principal of the host cluster, as in an RBAC subject."""

    kind: SubjectKind = Field(description="User, Group or ServiceAccount.")
    name: str = Field(min_length=1, max_length=253, description="Name of the user, group or service account.")
    namespace: Optional[str] = Field(
        default=None,
        max_length=63,
        description="Namespace of the service account; required for kind ServiceAccount, forbidden otherwise.",
    )


class Member(Subject):
    """A principal that gets a role in the tenant's host namespace."""

    role: MemberRole = Field(default=MemberRole.VIEW, description="admin, edit or view.")


class GpuSpec(ApiModel):
    """How many GPUs the tenant is guaranteed and may burst to, and its place in KAI-Scheduler."""

    quota: float = Field(
        default=0,
        ge=0,
        description=(
            "Guaranteed GPUs (the KAI Queue's deserved share). Fractions are allowed where the sharing "
            "mechanism can grant them (see docs/units.md); Exclusive needs whole GPUs."
        ),
    )
    limit: Optional[float] = Field(
        default=None,
        ge=0,
        description="Most GPUs the tenant may use, guaranteed plus burst. Defaults to quota; must be >= quota.",
    )
    over_quota_weight: int = Field(
        default=1, ge=0, le=1000, description="Share of idle GPUs above quota, relative to other queues (KAI overQuotaWeight)."
    )
    priority: int = Field(
        default=100, ge=0, le=10000, description="KAI Queue priority: higher is served first above quota and reclaimed last."
    )
    parent_queue: Optional[str] = Field(
        default=None, max_length=63, description="Parent (department) KAI Queue; it must exist. Unset: a top-level queue."
    )
    pool: Optional[str] = Field(
        default=None, max_length=63, description="GPU pool from the operator configuration. Unset: the operator picks one."
    )
    model: Optional[str] = Field(
        default=None, max_length=63, description="GPU model the pool must have, e.g. A100-80GB or H100-80GB."
    )


class TimeSlicingSpec(ApiModel):
    replicas: Optional[int] = Field(
        default=None,
        ge=2,
        le=64,
        description="Time-slice replicas per GPU the pool must offer. Unset: any time-slicing pool.",
    )


class HamiSpec(ApiModel):
    memory_mi_b: Optional[int] = Field(
        default=None,
        alias="memoryMiB",
        ge=128,
        description="GPU memory per share in MiB (HAMi nvidia.com/gpumem). Unset: the GPU's memory times corePercent.",
    )
    core_percent: int = Field(
        default=25, ge=1, le=100, description="Share of a GPU's compute per share, in percent (HAMi nvidia.com/gpucores)."
    )


class MigSpec(ApiModel):
    profile: Optional[str] = Field(
        default=None,
        description="MIG profile per share, e.g. 1g.10gb or 3g.40gb; it must exist on the pool's GPU model. Unset: the pool's default.",
    )


class SharingSpec(ApiModel):
    """How the tenant's GPUs are shared; weaker isolation than the trust allows is rejected."""

    mode: SharingMode = Field(
        default=SharingMode.AUTO,
        description=(
            "Auto (from trust), TimeSlicing, HAMi, MIG or Exclusive. Untrusted tenants may only use MIG or "
            "Exclusive; Internal tenants may not use TimeSlicing."
        ),
    )
    time_slicing: Optional[TimeSlicingSpec] = Field(default=None, description="Parameters for TimeSlicing.")
    hami: Optional[HamiSpec] = Field(default=None, description="Parameters for HAMi.")
    mig: Optional[MigSpec] = Field(default=None, description="Parameters for MIG.")


class LimitRangeSpec(ApiModel):
    """Container defaults in the host namespace, so pods without resources still pass the quota."""

    default_cpu: str = Field(default="1", description="Default CPU limit per container.")
    default_memory: str = Field(default="1Gi", description="Default memory limit per container.")
    default_request_cpu: str = Field(default="100m", description="Default CPU request per container.")
    default_request_memory: str = Field(default="256Mi", description="Default memory request per container.")


class QuotaSpec(ApiModel):
    """ResourceQuota of the tenant's host namespace (where vCluster syncs the tenant's pods)."""

    cpu: str = Field(default="16", description="Total CPU limits (limits.cpu) of the namespace.")
    memory: str = Field(default="64Gi", description="Total memory limits (limits.memory) of the namespace.")
    pods: int = Field(default=100, ge=1, le=100000, description="Most pods in the namespace.")
    storage: str = Field(default="500Gi", description="Total storage requested by persistent volume claims.")
    services: int = Field(default=20, ge=1, le=10000, description="Most services in the namespace.")
    limit_range: LimitRangeSpec = Field(default_factory=LimitRangeSpec, description="LimitRange defaults.")


class ResourceAmounts(ApiModel):
    cpu: Optional[str] = Field(default=None, description="CPU quantity.")
    memory: Optional[str] = Field(default=None, description="Memory quantity.")


class VClusterResources(ApiModel):
    requests: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu="200m", memory="256Mi"),
        description="Requests of the vCluster control-plane container.",
    )
    limits: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu="2", memory="2Gi"),
        description="Limits of the vCluster control-plane container (needed to pass the namespace quota).",
    )


class VClusterOverrides(ApiModel):
    """The few vCluster values a tenant may change; everything else is the operator's."""

    sync_ingresses: bool = Field(default=False, description="Sync Ingresses from the tenant to the host.")
    storage_size: str = Field(default="5Gi", description="Size of the control plane's data volume.")
    storage_class: Optional[str] = Field(default=None, description="StorageClass of the data volume. Unset: the default.")
    core_dns_replicas: int = Field(default=1, ge=1, le=3, alias="coreDNSReplicas", description="CoreDNS replicas.")


class VClusterSpec(ApiModel):
    """The tenant's own control plane (loft-sh/vcluster chart)."""

    chart_version: Optional[str] = Field(
        default=None, description="vcluster chart version, e.g. 0.36.1. Unset: the operator's default. Upgrades go one minor at a time."
    )
    kubernetes_version: Optional[str] = Field(
        default=None, description="Kubernetes version of the virtual control plane, e.g. v1.35.4. Unset: the chart's default."
    )
    resources: VClusterResources = Field(default_factory=VClusterResources, description="Control-plane resources.")
    server_url: Optional[str] = Field(
        default=None,
        alias="serverURL",
        description="https URL tenants use to reach their API server (put into kubeconfigs and the serving cert). Unset: the in-cluster Service URL.",
    )
    extra_sans: list[str] = Field(
        default_factory=list, alias="extraSANs", max_length=16, description="More names for the API server's certificate."
    )
    values: VClusterOverrides = Field(default_factory=VClusterOverrides, description="Allowed value overrides.")


class KubeconfigSpec(ApiModel):
    roles: list[KubeconfigRole] = Field(
        default_factory=lambda: [KubeconfigRole.ADMIN, KubeconfigRole.VIEW],
        max_length=2,
        description="Which kubeconfigs to issue: admin (cluster-admin of the virtual cluster) and/or view.",
    )
    token_lifetime: str = Field(
        default="24h", description="Lifetime of each kubeconfig's token, a duration between 10m and 8760h; rotated before it expires."
    )


class ArgoCDSpec(ApiModel):
    enabled: bool = Field(default=False, description="Register the virtual cluster as an Argo CD cluster Secret.")
    namespace: str = Field(default="argocd", description="Namespace of Argo CD.")
    project: str = Field(default="default", description="Argo CD project the cluster belongs to.")


class GpuTenantSpec(ApiModel):
    """Desired state of a tenant: who it is, how far it is trusted, what it may use."""

    trust: Trust = Field(description="Trusted (same team), Internal (other internal teams) or Untrusted (external customers).")
    display_name: Optional[str] = Field(default=None, max_length=128, description="Human-readable name of the team.")
    owners: list[Subject] = Field(
        min_length=1, max_length=32, description="Who owns the tenant: may read its kubeconfigs and administer its namespace."
    )
    members: list[Member] = Field(default_factory=list, max_length=256, description="Other principals and their roles.")
    gpu: GpuSpec = Field(default_factory=GpuSpec, description="GPU quota, limit and queue placement.")
    sharing: SharingSpec = Field(default_factory=SharingSpec, description="GPU-sharing mechanism and its parameters.")
    quotas: QuotaSpec = Field(default_factory=QuotaSpec, description="Host-namespace quotas and LimitRange defaults.")
    vcluster: VClusterSpec = Field(default_factory=VClusterSpec, description="The tenant's virtual cluster.")
    kubeconfig: KubeconfigSpec = Field(default_factory=KubeconfigSpec, description="Kubeconfigs issued to the owners.")
    argocd: ArgoCDSpec = Field(default_factory=ArgoCDSpec, description="Argo CD registration of the virtual cluster.")
    deletion_policy: DeletionPolicy = Field(
        default=DeletionPolicy.DELETE,
        description="Delete removes the host namespace and its data with the tenant; Retain keeps the namespace (unlabelled).",
    )
    prevent_deletion: bool = Field(default=False, description="While true, deleting the tenant is blocked and reported.")


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A metav1.Condition."""

    type: str = Field(description="Condition type, e.g. Ready or QueueReady.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word for machines and printer columns.")
    message: str = Field(default="", description="What happened, for humans.")
    last_transition_time: str = Field(description="When status last changed (RFC 3339).")
    observed_generation: Optional[int] = Field(default=None, ge=0, description="Generation the condition was set for.")


class SharingStatus(ApiModel):
    mode: Optional[SharingMode] = Field(default=None, description="The sharing mechanism in force.")
    pool: Optional[str] = Field(default=None, description="The GPU pool the tenant runs on.")
    reason: Optional[str] = Field(default=None, description="Why this mechanism and pool were chosen.")


class QueueGrantStatus(ApiModel):
    name: Optional[str] = Field(default=None, description="KAI Queue name.")
    parent: Optional[str] = Field(default=None, description="Parent queue.")
    quota: Optional[float] = Field(default=None, description="Queue GPU quota in KAI units.")
    limit: Optional[float] = Field(default=None, description="Queue GPU limit in KAI units.")
    over_quota_weight: Optional[int] = Field(default=None, description="Queue over-quota weight.")
    priority: Optional[int] = Field(default=None, description="Queue priority.")


class GrantedStatus(ApiModel):
    resources: dict[str, str] = Field(
        default_factory=dict, description="GPU entries of the host ResourceQuota, in the mechanism's resource names."
    )
    queue: Optional[QueueGrantStatus] = Field(default=None, description="The KAI Queue's GPU resources.")


class VClusterStatus(ApiModel):
    release: Optional[str] = Field(default=None, description="Helm release name.")
    chart_version: Optional[str] = Field(default=None, description="Installed chart version.")
    endpoint: Optional[str] = Field(default=None, description="API server URL tenants use.")
    values_hash: Optional[str] = Field(default=None, description="Hash of the applied values; no Helm upgrade while it matches.")


class KubeconfigStatus(ApiModel):
    role: KubeconfigRole = Field(description="admin or view.")
    secret_name: str = Field(description="Secret in the host namespace holding the kubeconfig (key: config).")
    expires_at: Optional[str] = Field(default=None, description="When the token expires (RFC 3339).")


class GpuTenantStatus(ApiModel):
    """Observed state; written only through the status subresource."""

    observed_generation: Optional[int] = Field(default=None, description="The spec generation this status describes.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready and one condition per part.")
    namespace: Optional[str] = Field(default=None, description="The tenant's host namespace.")
    sharing: Optional[SharingStatus] = Field(default=None, description="The chosen sharing mechanism and why.")
    granted: Optional[GrantedStatus] = Field(default=None, description="Resources granted in each mechanism's units.")
    vcluster: Optional[VClusterStatus] = Field(default=None, description="The virtual cluster's release and endpoint.")
    kubeconfigs: list[KubeconfigStatus] = Field(default_factory=list, description="Issued kubeconfig Secrets and expiry.")


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else passes through."""

    model_config = ConfigDict(extra="allow")

    name: str
    uid: Optional[str] = None
    generation: Optional[int] = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GpuTenant(BaseModel):
    """A GpuTenant object as stored by the API server."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(default="gputenant.io/v1alpha1", alias="apiVersion")
    kind: str = "GpuTenant"
    metadata: ObjectMeta
    spec: GpuTenantSpec
    status: Optional[GpuTenantStatus] = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @classmethod
    def from_body(cls, body: Any) -> "GpuTenant":
        """Validate a raw object (dict or kopf Body) into the model."""
        return cls.model_validate(dict(body))
