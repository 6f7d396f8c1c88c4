"""GpuTenant v1alpha1: what platform engineers write in Git, and what the operator reports back.

These models are the single source of the API: ``crds/tenant.yaml`` is generated from them
(``gputenant crd``), descriptions included, so ``kubectl explain`` and the pydantic validation
cannot drift apart.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Any, ClassVar, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from gputenant.api.rules import (
    CEL_KEY,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    Rule,
    check_rules,
    is_https_url,
    is_positive_quantity,
    parse_duration,
    quantity_at_most,
    unique,
    value_rule,
)
from gputenant.policy.gpus import all_mig_profile_names

MAX_TENANT_NAME_LENGTH = 40
"""Longest GpuTenant name: ``tenant-<name>`` and ``<name>-kubeconfig-admin`` must stay valid names."""
TENANT_NAME_RULE = Rule(
    f"self.metadata.name.size() <= {MAX_TENANT_NAME_LENGTH} && self.metadata.name.matches(r'{DNS_LABEL}')",
    f"a GpuTenant name is a DNS label of at most {MAX_TENANT_NAME_LENGTH} characters (lower-case letters, digits, '-'), "
    "so its namespace and Secret names fit",
    lambda name: len(name) <= MAX_TENANT_NAME_LENGTH and re.match(DNS_LABEL, name) is not None,
    field_path=".metadata.name",
)
"""Checked at the CRD's root (CEL may read metadata.name only there) and on ObjectMeta.name."""
MIN_TOKEN_LIFETIME = "10m"
MAX_TOKEN_LIFETIME = "8760h"
MAX_GPUS = 10000
"""Upper bound of quota and limit; keeps the CEL whole-number check within int range."""


def _add_cel_rules(schema: dict[str, Any], model: type["ApiModel"]) -> None:
    rules = [rule.cel() for rule in model.rules]
    if rules:
        schema[CEL_KEY] = schema.get(CEL_KEY, []) + rules


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields rejected.

    ``rules`` are the model's cross-field rules: the CRD carries them as CEL, and validating the
    model checks their Python twins.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        json_schema_extra=_add_cel_rules,
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _check_rules(self) -> "ApiModel":
        check_rules(self, self.rules)
        return self


Quantity = Annotated[
    str,
    Field(max_length=64),
    *value_rule(
        "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
        "must be a positive Kubernetes quantity such as 500m, 2 or 4Gi",
        is_positive_quantity,
    ),
]
"""A positive resource quantity as Kubernetes writes it."""

Duration = Annotated[
    str,
    Field(max_length=32),
    *value_rule(
        f"self.matches(r'{DURATION}') && duration(self) >= duration('{MIN_TOKEN_LIFETIME}') "
        f"&& duration(self) <= duration('{MAX_TOKEN_LIFETIME}')",
        f"must be a duration in whole h, m or s units such as 90m or 24h, between {MIN_TOKEN_LIFETIME} and {MAX_TOKEN_LIFETIME}",
        lambda text: (value := parse_duration(text)) is not None
        and parse_duration(MIN_TOKEN_LIFETIME) <= value <= parse_duration(MAX_TOKEN_LIFETIME),
    ),
]

HttpsUrl = Annotated[
    str,
    Field(max_length=2048),
    *value_rule(
        "isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",
        "must be an https URL with a host, such as https://team-a.gpu.example.com",
        is_https_url,
    ),
]



def _known_mig_profile(profile: str) -> str:
    if profile not in all_mig_profile_names():
        raise PydanticCustomError(
            "enum", "must be a MIG profile of a supported GPU: {profiles}", {"profiles": ", ".join(all_mig_profile_names())}
        )
    return profile


MigProfileName = Annotated[
    str, Field(max_length=16, json_schema_extra={"enum": all_mig_profile_names()}), AfterValidator(_known_mig_profile)
]
"""A MIG profile that exists on at least one supported GPU (policy/gpus.py)."""

DnsLabel = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
DnsSubdomain = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]


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
    """Kind of an RBAC subject."""

    USER = "User"
    GROUP = "Group"
    SERVICE_ACCOUNT = "ServiceAccount"


class MemberRole(str, Enum):
    """Role of a member in the tenant's host namespace."""

    ADMIN = "admin"
    EDIT = "edit"
    VIEW = "view"


class KubeconfigRole(str, Enum):
    """Role of an issued kubeconfig in the virtual cluster."""

    ADMIN = "admin"
    VIEW = "view"


class DeletionPolicy(str, Enum):
    """What happens to the host namespace when the tenant is deleted."""

    DELETE = "Delete"
    RETAIN = "Retain"


class Subject(ApiModel):
    """A principal of the host cluster, as in an RBAC subject."""

    kind: SubjectKind = Field(description="User, Group or ServiceAccount.")
    name: str = Field(min_length=1, max_length=253, description="Name of the user, group or service account.")
    namespace: Optional[DnsLabel] = Field(
        default=None,
        description="Namespace of the service account; required for kind ServiceAccount, forbidden otherwise.",
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.kind != 'ServiceAccount' || has(self.namespace)",
            "a ServiceAccount subject needs its namespace: set namespace",
            lambda subject: subject.kind != SubjectKind.SERVICE_ACCOUNT or subject.namespace is not None,
            field_path=".namespace",
            reason="FieldValueRequired",
        ),
        Rule(
            "self.kind == 'ServiceAccount' || !has(self.namespace)",
            "only ServiceAccount subjects have a namespace: remove namespace",
            lambda subject: subject.kind == SubjectKind.SERVICE_ACCOUNT or subject.namespace is None,
            field_path=".namespace",
            reason="FieldValueForbidden",
        ),
        Rule(
            f"self.kind != 'ServiceAccount' || self.name.matches(r'{DNS_SUBDOMAIN}')",
            "a ServiceAccount name is a DNS subdomain: lower-case letters, digits, '-' and '.'",
            lambda subject: subject.kind != SubjectKind.SERVICE_ACCOUNT or re.match(DNS_SUBDOMAIN, subject.name) is not None,
            field_path=".name",
        ),
    )


class Member(Subject):
    """A principal that gets a role in the tenant's host namespace."""

    role: MemberRole = Field(default=MemberRole.VIEW, description="admin, edit or view.")


class GpuSpec(ApiModel):
    """How many GPUs the tenant is guaranteed and may burst to, and its place in KAI-Scheduler."""

    quota: float = Field(
        default=0,
        ge=0,
        le=MAX_GPUS,
        description=(
            "Guaranteed GPUs (the KAI Queue's deserved share). Fractions are allowed where the sharing "
            "mechanism can grant them (see docs/units.md); Exclusive needs whole GPUs."
        ),
    )
    limit: Optional[float] = Field(
        default=None,
        ge=0,
        le=MAX_GPUS,
        description="Most GPUs the tenant may use, guaranteed plus burst. Defaults to quota; must be >= quota.",
    )
    over_quota_weight: int = Field(
        default=1, ge=0, le=1000, description="Share of idle GPUs above quota, relative to other queues (KAI overQuotaWeight)."
    )
    priority: int = Field(
        default=100, ge=0, le=10000, description="KAI Queue priority: higher is served first above quota and reclaimed last."
    )
    parent_queue: Optional[DnsLabel] = Field(
        default=None, description="Parent (department) KAI Queue; it must exist. Unset: a top-level queue."
    )
    pool: Optional[DnsLabel] = Field(
        default=None, description="GPU pool from the operator configuration. Unset: the operator picks one."
    )
    model: Optional[str] = Field(
        default=None,
        max_length=63,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="GPU model the pool must have, e.g. A100-80GB or H100-80GB.",
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.limit) || self.limit >= self.quota",
            "limit must be at least quota: raise limit or lower quota",
            lambda gpu: gpu.limit is None or gpu.limit >= gpu.quota,
            field_path=".limit",
        ),
    )


class TimeSlicingSpec(ApiModel):
    """Parameters of NVIDIA device-plugin time-slicing."""

    replicas: Optional[int] = Field(
        default=None,
        ge=2,
        le=64,
        description="Time-slice replicas per GPU the pool must offer. Unset: any time-slicing pool.",
    )


class HamiSpec(ApiModel):
    """Parameters of HAMi vGPU shares."""

    memory_mi_b: Optional[int] = Field(
        default=None,
        alias="memoryMiB",
        ge=128,
        le=1048576,
        description="GPU memory per share in MiB (HAMi nvidia.com/gpumem). Unset: the GPU's memory times corePercent.",
    )
    core_percent: int = Field(
        default=25, ge=1, le=100, description="Share of a GPU's compute per share, in percent (HAMi nvidia.com/gpucores)."
    )


class MigSpec(ApiModel):
    """Parameters of MIG (Multi-Instance GPU) partitions."""

    profile: Optional[MigProfileName] = Field(
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

    rules: ClassVar[tuple[Rule, ...]] = tuple(
        Rule(
            f"!has(self.{block}) || self.mode in ['Auto', '{mode.value}']",
            f"{block} parameters apply only to mode {mode.value} (or Auto): remove {block} or set mode: {mode.value}",
            lambda sharing, attribute=attribute, mode=mode: getattr(sharing, attribute) is None
            or sharing.mode in (SharingMode.AUTO, mode),
            field_path=f".{block}",
            reason="FieldValueForbidden",
        )
        for block, attribute, mode in (
            ("timeSlicing", "time_slicing", SharingMode.TIME_SLICING),
            ("hami", "hami", SharingMode.HAMI),
            ("mig", "mig", SharingMode.MIG),
        )
    )


class LimitRangeSpec(ApiModel):
    """Container defaults in the host namespace, so pods without resources still pass the quota."""

    default_cpu: Quantity = Field(default="1", description="Default CPU limit per container.")
    default_memory: Quantity = Field(default="1Gi", description="Default memory limit per container.")
    default_request_cpu: Quantity = Field(default="100m", description="Default CPU request per container.")
    default_request_memory: Quantity = Field(default="256Mi", description="Default memory request per container.")

    rules: ClassVar[tuple[Rule, ...]] = tuple(
        Rule(
            # has(): the CRD's `default: {}` is checked against this rule before its fields are filled in.
            f"!has(self.{request}) || !has(self.{limit}) || !isQuantity(self.{request}) || !isQuantity(self.{limit}) "
            f"|| quantity(self.{request}).compareTo(quantity(self.{limit})) <= 0",
            f"{request} must not exceed {limit}: a container's default request above its default limit is rejected",
            lambda limit_range, low=low, high=high: quantity_at_most(getattr(limit_range, low), getattr(limit_range, high)),
            field_path=f".{request}",
        )
        for request, limit, low, high in (
            ("defaultRequestCpu", "defaultCpu", "default_request_cpu", "default_cpu"),
            ("defaultRequestMemory", "defaultMemory", "default_request_memory", "default_memory"),
        )
    )


class QuotaSpec(ApiModel):
    """ResourceQuota of the tenant's host namespace (where vCluster syncs the tenant's pods)."""

    cpu: Quantity = Field(default="16", description="Total CPU limits (limits.cpu) of the namespace.")
    memory: Quantity = Field(default="64Gi", description="Total memory limits (limits.memory) of the namespace.")
    pods: int = Field(default=100, ge=1, le=100000, description="Most pods in the namespace.")
    storage: Quantity = Field(default="500Gi", description="Total storage requested by persistent volume claims.")
    services: int = Field(default=20, ge=1, le=10000, description="Most services in the namespace.")
    limit_range: LimitRangeSpec = Field(default_factory=LimitRangeSpec, description="LimitRange defaults.")


class ResourceAmounts(ApiModel):
    """CPU and memory of one container."""

    cpu: Optional[Quantity] = Field(default=None, description="CPU quantity.")
    memory: Optional[Quantity] = Field(default=None, description="Memory quantity.")


class VClusterResources(ApiModel):
    """Resources of the vCluster control-plane container."""

    requests: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu="200m", memory="256Mi"),
        description="Requests of the vCluster control-plane container.",
    )
    limits: ResourceAmounts = Field(
        default_factory=lambda: ResourceAmounts(cpu="2", memory="2Gi"),
        description="Limits of the vCluster control-plane container (needed to pass the namespace quota).",
    )

    rules: ClassVar[tuple[Rule, ...]] = tuple(
        Rule(
            # has(self.requests): the CRD's `default: {}` is checked before its fields are filled in.
            f"!has(self.requests) || !has(self.limits) || !has(self.requests.{resource}) "
            f"|| !has(self.limits.{resource}) || !isQuantity(self.requests.{resource}) "
            f"|| !isQuantity(self.limits.{resource}) "
            f"|| quantity(self.requests.{resource}).compareTo(quantity(self.limits.{resource})) <= 0",
            f"requests.{resource} must not exceed limits.{resource}: the control-plane pod would be refused; "
            f"lower requests.{resource} or raise limits.{resource}",
            lambda resources, resource=resource: getattr(resources.requests, resource) is None
            or getattr(resources.limits, resource) is None
            or quantity_at_most(getattr(resources.requests, resource), getattr(resources.limits, resource)),
            field_path=f".requests.{resource}",
        )
        for resource in ("cpu", "memory")
    )


class VClusterOverrides(ApiModel):
    """The few vCluster values a tenant may change; everything else is the operator's."""

    sync_ingresses: bool = Field(default=False, description="Sync Ingresses from the tenant to the host.")
    storage_size: Quantity = Field(default="5Gi", description="Size of the control plane's data volume.")
    storage_class: Optional[DnsSubdomain] = Field(default=None, description="StorageClass of the data volume. Unset: the default.")
    core_dns_replicas: int = Field(default=1, ge=1, le=3, alias="coreDNSReplicas", description="CoreDNS replicas.")


class VClusterSpec(ApiModel):
    """The tenant's own control plane (loft-sh/vcluster chart)."""

    chart_version: Optional[str] = Field(
        default=None,
        max_length=64,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$",
        description="vcluster chart version, e.g. 0.36.1. Unset: the operator's default. Upgrades go one minor at a time."
    )
    kubernetes_version: Optional[str] = Field(
        default=None,
        max_length=64,
        pattern=r"^v[0-9]+\.[0-9]+\.[0-9]+$",
        description="Kubernetes version of the virtual control plane, e.g. v1.35.4. Unset: the chart's default."
    )
    resources: VClusterResources = Field(default_factory=VClusterResources, description="Control-plane resources.")
    server_url: Optional[HttpsUrl] = Field(
        default=None,
        alias="serverURL",
        description="https URL tenants use to reach their API server (put into kubeconfigs and the serving cert). Unset: the in-cluster Service URL.",
    )
    extra_sans: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253, pattern=r"^(\*\.)?[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$")]],
        unique(str, "extraSANs must be unique"),
    ] = Field(
        default_factory=list,
        alias="extraSANs",
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="More DNS names or IP addresses for the API server's certificate.",
    )
    values: VClusterOverrides = Field(default_factory=VClusterOverrides, description="Allowed value overrides.")


class KubeconfigSpec(ApiModel):
    """Kubeconfigs of the virtual cluster issued to the owners."""

    roles: Annotated[list[KubeconfigRole], unique(lambda role: role.value, "kubeconfig roles must be unique")] = Field(
        default_factory=lambda: [KubeconfigRole.ADMIN, KubeconfigRole.VIEW],
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Which kubeconfigs to issue: admin (cluster-admin of the virtual cluster) and/or view.",
    )
    token_lifetime: Duration = Field(
        default="24h", description="Lifetime of each kubeconfig's token, a duration between 10m and 8760h; rotated before it expires."
    )


class ArgoCDSpec(ApiModel):
    """Registration of the virtual cluster in Argo CD."""

    enabled: bool = Field(default=False, description="Register the virtual cluster as an Argo CD cluster Secret.")
    namespace: DnsLabel = Field(default="argocd", description="Namespace of Argo CD.")
    project: DnsSubdomain = Field(default="default", description="Argo CD project the cluster belongs to.")


def _subject_key(subject: Subject) -> str:
    return f"{subject.kind.value}/{subject.name}"


_SUBJECT_LIST = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["kind", "name"]}


def _is_whole(number: Optional[float]) -> bool:
    return number is None or float(number).is_integer()


class GpuTenantSpec(ApiModel):
    """Desired state of a tenant: who it is, how far it is trusted, what it may use."""

    trust: Trust = Field(description="Trusted (same team), Internal (other internal teams) or Untrusted (external customers).")
    display_name: Optional[str] = Field(default=None, max_length=128, description="Human-readable name of the team.")
    owners: Annotated[list[Subject], unique(_subject_key, "owners must be unique by kind and name")] = Field(
        min_length=1,
        max_length=32,
        json_schema_extra=_SUBJECT_LIST,
        description="Who owns the tenant: may read its kubeconfigs and administer its namespace.",
    )
    members: Annotated[list[Member], unique(_subject_key, "members must be unique by kind and name")] = Field(
        default_factory=list, max_length=256, json_schema_extra=_SUBJECT_LIST, description="Other principals and their roles."
    )
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

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.trust != 'Untrusted' || self.sharing.mode in ['Auto', 'MIG', 'Exclusive']",
            "Untrusted tenants need hardware isolation: set sharing.mode to Auto, MIG or Exclusive",
            lambda spec: spec.trust != Trust.UNTRUSTED
            or spec.sharing.mode in (SharingMode.AUTO, SharingMode.MIG, SharingMode.EXCLUSIVE),
            field_path=".sharing.mode",
        ),
        Rule(
            "self.trust != 'Internal' || self.sharing.mode != 'TimeSlicing'",
            "Internal tenants need memory isolation: set sharing.mode to Auto, HAMi, MIG or Exclusive, not TimeSlicing",
            lambda spec: spec.trust != Trust.INTERNAL or spec.sharing.mode != SharingMode.TIME_SLICING,
            field_path=".sharing.mode",
        ),
        Rule(
            "self.sharing.mode != 'Exclusive' || self.gpu.quota == double(int(self.gpu.quota))",
            "Exclusive sharing grants whole GPUs: make gpu.quota a whole number",
            lambda spec: spec.sharing.mode != SharingMode.EXCLUSIVE or _is_whole(spec.gpu.quota),
            field_path=".gpu.quota",
        ),
        Rule(
            "self.sharing.mode != 'Exclusive' || !has(self.gpu.limit) || self.gpu.limit == double(int(self.gpu.limit))",
            "Exclusive sharing grants whole GPUs: make gpu.limit a whole number",
            lambda spec: spec.sharing.mode != SharingMode.EXCLUSIVE or _is_whole(spec.gpu.limit),
            field_path=".gpu.limit",
        ),
    )


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A metav1.Condition, with its constraints."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Condition type, e.g. Ready or QueueReady.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="One CamelCase word for machines and printer columns.",
    )
    message: str = Field(default="", max_length=32768, description="What happened, for humans.")
    last_transition_time: str = Field(
        json_schema_extra={"format": "date-time"}, description="When status last changed (RFC 3339)."
    )
    observed_generation: Optional[int] = Field(default=None, ge=0, description="Generation the condition was set for.")


class SharingStatus(ApiModel):
    """The sharing mechanism and pool in force."""

    mode: Optional[SharingMode] = Field(default=None, description="The sharing mechanism in force.")
    pool: Optional[str] = Field(default=None, description="The GPU pool the tenant runs on.")
    reason: Optional[str] = Field(default=None, description="Why this mechanism and pool were chosen.")


class QueueGrantStatus(ApiModel):
    """The KAI Queue as the operator applied it."""

    name: Optional[str] = Field(default=None, description="KAI Queue name.")
    parent: Optional[str] = Field(default=None, description="Parent queue.")
    quota: Optional[float] = Field(default=None, description="Queue GPU quota in KAI units.")
    limit: Optional[float] = Field(default=None, description="Queue GPU limit in KAI units.")
    over_quota_weight: Optional[int] = Field(default=None, description="Queue over-quota weight.")
    priority: Optional[int] = Field(default=None, description="Queue priority.")


class GrantedStatus(ApiModel):
    """What the tenant was granted, in each mechanism's own units."""

    resources: dict[str, str] = Field(
        default_factory=dict, description="GPU entries of the host ResourceQuota, in the mechanism's resource names."
    )
    queue: Optional[QueueGrantStatus] = Field(default=None, description="The KAI Queue's GPU resources.")


class VClusterStatus(ApiModel):
    """The installed vCluster release."""

    release: Optional[str] = Field(default=None, description="Helm release name.")
    chart_version: Optional[str] = Field(default=None, description="Installed chart version.")
    endpoint: Optional[str] = Field(default=None, description="API server URL tenants use.")
    values_hash: Optional[str] = Field(default=None, description="Hash of the applied values; no Helm upgrade while it matches.")


class KubeconfigStatus(ApiModel):
    """One issued kubeconfig."""

    role: KubeconfigRole = Field(description="admin or view.")
    secret_name: str = Field(description="Secret in the host namespace holding the kubeconfig (key: config).")
    expires_at: Optional[str] = Field(default=None, description="When the token expires (RFC 3339).")


class GpuTenantStatus(ApiModel):
    """Observed state; written only through the status subresource."""

    observed_generation: Optional[int] = Field(default=None, description="The spec generation this status describes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Ready and one condition per part.",
    )
    namespace: Optional[str] = Field(default=None, description="The tenant's host namespace.")
    sharing: Optional[SharingStatus] = Field(default=None, description="The chosen sharing mechanism and why.")
    granted: Optional[GrantedStatus] = Field(default=None, description="Resources granted in each mechanism's units.")
    vcluster: Optional[VClusterStatus] = Field(default=None, description="The virtual cluster's release and endpoint.")
    kubeconfigs: list[KubeconfigStatus] = Field(
        default_factory=list,
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["role"]},
        description="Issued kubeconfig Secrets and expiry.",
    )


def _check_tenant_name(name: str) -> str:
    if not TENANT_NAME_RULE.holds(name):
        raise PydanticCustomError("rule", TENANT_NAME_RULE.message)
    return name


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else passes through."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, AfterValidator(_check_tenant_name)]
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
