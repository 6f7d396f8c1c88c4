"""GpuTenant v1alpha1: what platform engineers write in Git, and what the operator reports back.

These models are the single source of the API: ``crds/tenant.yaml`` is generated from them
(``make generate``), descriptions included, so ``kubectl explain`` and the pydantic validation
cannot drift apart. This module is the version's public surface: the spec is defined here, its
building blocks in ``types``, owners and members in ``subjects``, the vCluster block in
``vcluster``, the status in ``status``, trust and sharing modes in ``trust``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from gputenant.api.group import GROUP, KIND, V1ALPHA1
from gputenant.api.placement import PlacementSpec
from gputenant.api.rules import (
    DNS_LABEL,
    Rule,
    quantity_at_most,
    unique,
)
from gputenant.api.status import (
    ArgoCDStatus,
    Condition,
    ConditionStatus,
    GpuTenantStatus,
    GrantedStatus,
    KubeconfigStatus,
    QueueGrantStatus,
    SharingStatus,
    UsageGpuStatus,
    UsageStatus,
    VClusterStatus,
)
from gputenant.api.subjects import SUBJECT_LIST, Member, Subject, subject_key
from gputenant.api.trust import TRUST_RULES, SharingMode, Trust
from gputenant.api.types import (
    MAX_TOKEN_LIFETIME,
    MIN_TOKEN_LIFETIME,
    ApiModel,
    DeletionPolicy,
    DnsLabel,
    DnsSubdomain,
    Duration,
    HttpsUrl,
    KubeconfigRole,
    MemberRole,
    MigProfileName,
    Quantity,
    SubjectKind,
)
from gputenant.api.vcluster import (
    ResourceAmounts,
    SigningAlgorithm,
    VClusterOIDC,
    VClusterOverrides,
    VClusterResources,
    VClusterSpec,
)

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
MAX_GPUS = 10000
"""Upper bound of quota and limit; keeps the CEL whole-number check within int range."""


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
    limit: float | None = Field(
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
    parent_queue: DnsLabel | None = Field(
        default=None,
        description="Parent (department) KAI Queue, one of the operator config's parentQueues when it lists any. Unset: its defaultParentQueue."
    )
    pool: DnsLabel | None = Field(
        default=None, description="GPU pool from the operator configuration. Unset: the operator picks one."
    )
    model: str | None = Field(
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

    replicas: int | None = Field(
        default=None,
        ge=2,
        le=64,
        description="Time-slice replicas per GPU the pool must offer. Unset: any time-slicing pool.",
    )


class HamiSpec(ApiModel):
    """Parameters of HAMi-mode shares: KAI GPU fractions (pod annotation ``gpu-fraction``, docs/units.md)."""

    memory_mi_b: int | None = Field(
        default=None,
        alias="memoryMiB",
        ge=128,
        le=1048576,
        description=(
            "GPU memory per share in MiB. A share's memory is its portion of the GPU (the pool's gpuMemoryMiB times "
            "corePercent / 100, rounded down), so this may only restate that number. Unset: that portion."
        ),
    )
    core_percent: int = Field(
        default=25,
        ge=1,
        le=100,
        description=(
            "Size of one share in percent of a GPU: pods ask for whole multiples of it below one GPU with the "
            "annotation gpu-fraction (e.g. 25: gpu-fraction \"0.25\", \"0.5\" or \"0.75\"), and the tenant's KAI "
            "queue counts each as that fraction of a GPU. At least 100 / the pool's splitCount."
        ),
    )


class MigSpec(ApiModel):
    """Parameters of MIG (Multi-Instance GPU) partitions."""

    profile: MigProfileName | None = Field(
        default=None,
        description="MIG profile per share, e.g. 1g.10gb or 3g.40gb; it must exist on the pool's GPU model. Unset: the pool's default.",
    )


def _block_unset_or_of(attribute: str, mode: SharingMode) -> Callable[[Any], bool]:
    """Twin of the rule that a parameter block is set only for its own mode (or Auto)."""
    return lambda sharing: getattr(sharing, attribute) is None or sharing.mode in (SharingMode.AUTO, mode)


class SharingSpec(ApiModel):
    """How the tenant's GPUs are shared; weaker isolation than the trust allows is rejected."""

    mode: SharingMode = Field(
        default=SharingMode.AUTO,
        description=(
            "Auto (from trust), TimeSlicing, HAMi, MIG or Exclusive. Untrusted tenants may only use MIG or "
            "Exclusive; Internal tenants may not use TimeSlicing."
        ),
    )
    time_slicing: TimeSlicingSpec | None = Field(default=None, description="Parameters for TimeSlicing.")
    hami: HamiSpec | None = Field(default=None, description="Parameters for HAMi.")
    mig: MigSpec | None = Field(default=None, description="Parameters for MIG.")

    rules: ClassVar[tuple[Rule, ...]] = tuple(
        Rule(
            f"!has(self.{block}) || self.mode in ['Auto', '{mode.value}']",
            f"{block} parameters apply only to mode {mode.value} (or Auto): remove {block} or set mode: {mode.value}",
            _block_unset_or_of(attribute, mode),
            field_path=f".{block}",
            reason="FieldValueForbidden",
        )
        for block, attribute, mode in (
            ("timeSlicing", "time_slicing", SharingMode.TIME_SLICING),
            ("hami", "hami", SharingMode.HAMI),
            ("mig", "mig", SharingMode.MIG),
        )
    )


def _at_most(low: str, high: str) -> Callable[[Any], bool]:
    """Twin of the rule that the quantity in attribute ``low`` does not exceed the one in ``high``."""
    return lambda model: quantity_at_most(getattr(model, low), getattr(model, high))


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
            _at_most(low, high),
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


class IdleSleepSpec(ApiModel):
    """Sleep a tenant whose GPUs do no work (the usage the operator reads from Prometheus)."""

    after: Duration = Field(
        description=(
            "Put the tenant to sleep (spec.sleep.asleep: true, written by the operator) once every GPU its pods hold "
            "has been idle this long, a duration between 10m and 8760h. Never while a non-preemptible workload runs "
            "(KAI: PodGroup or pod label kai.scheduler/preemptibility, else priority of at least 100). Needs "
            "gputenant run --prometheus-url."
        ),
    )


class SleepSpec(ApiModel):
    """Sleep: the virtual cluster stopped and its GPUs released, its data, Queue and quota kept."""

    asleep: bool = Field(
        default=False,
        description=(
            "While true, the vCluster control plane is scaled to zero and every pod in the host namespace is "
            "deleted, which releases the tenant's GPUs; the Queue, the quota and the virtual cluster's data "
            "volume stay. Set false to wake: the control plane restarts and re-creates the workloads its "
            "controllers own (bare pods are not restored). See docs/operations.md#sleep-and-wake."
        ),
    )
    idle: IdleSleepSpec | None = Field(default=None, description="Sleep automatically when the GPUs stay idle.")


def _is_whole(number: float | None) -> bool:
    return number is None or float(number).is_integer()


class GpuTenantSpec(ApiModel):
    """Desired state of a tenant: who it is, how far it is trusted, what it may use."""

    trust: Trust = Field(description="Trusted (same team), Internal (other internal teams) or Untrusted (external customers).")
    display_name: str | None = Field(default=None, max_length=128, description="Human-readable name of the team.")
    owners: Annotated[list[Subject], unique(subject_key, "owners must be unique by kind and name")] = Field(
        min_length=1,
        max_length=32,
        json_schema_extra=SUBJECT_LIST,
        description="Who owns the tenant: may read its kubeconfigs and administer its namespace.",
    )
    members: Annotated[list[Member], unique(subject_key, "members must be unique by kind and name")] = Field(
        default_factory=list, max_length=256, json_schema_extra=SUBJECT_LIST, description="Other principals and their roles."
    )
    gpu: GpuSpec = Field(default_factory=GpuSpec, description="GPU quota, limit and queue placement.")
    sharing: SharingSpec = Field(default_factory=SharingSpec, description="GPU-sharing mechanism and its parameters.")
    quotas: QuotaSpec = Field(default_factory=QuotaSpec, description="Host-namespace quotas and LimitRange defaults.")
    vcluster: VClusterSpec = Field(default_factory=VClusterSpec, description="The tenant's virtual cluster.")
    kubeconfig: KubeconfigSpec = Field(default_factory=KubeconfigSpec, description="Kubeconfigs issued to the owners.")
    argocd: ArgoCDSpec = Field(default_factory=ArgoCDSpec, description="Argo CD registration of the virtual cluster.")
    sleep: SleepSpec = Field(default_factory=SleepSpec, description="Put the tenant to sleep, or wake it.")
    deletion_policy: DeletionPolicy = Field(
        default=DeletionPolicy.DELETE,
        description="Delete removes the host namespace and its data with the tenant; Retain keeps the namespace (unlabelled).",
    )
    prevent_deletion: bool = Field(
        default=False,
        description=(
            "While true, a DELETE of the tenant is refused (the chart's ValidatingAdmissionPolicy); where that policy "
            "is not installed, the deletion is blocked by the operator's finalizer and reported."
        ),
    )
    placement: PlacementSpec | None = Field(
        default=None,
        description=(
            "Which member clusters of a fleet the tenant may go to; read only by a fleet's hub (docs/fleet.md). "
            "Unset: any member that fits."
        ),
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        *TRUST_RULES,
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


def _check_tenant_name(name: str) -> str:
    if not TENANT_NAME_RULE.holds(name):
        raise PydanticCustomError("rule", TENANT_NAME_RULE.message)
    return name


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else passes through."""

    model_config = ConfigDict(extra="allow")

    name: Annotated[str, AfterValidator(_check_tenant_name)]
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GpuTenant(BaseModel):
    """A GpuTenant object as stored by the API server."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(default=f"{GROUP}/{V1ALPHA1}", alias="apiVersion")
    kind: str = KIND
    metadata: ObjectMeta
    spec: GpuTenantSpec
    status: GpuTenantStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @classmethod
    def from_body(cls, body: Any) -> GpuTenant:
        """Validate a raw object (dict or kopf Body) into the model."""
        return cls.model_validate(dict(body))


__all__ = [
    "MAX_GPUS", "MAX_TENANT_NAME_LENGTH", "MAX_TOKEN_LIFETIME", "MIN_TOKEN_LIFETIME", "TENANT_NAME_RULE",
    "ApiModel", "ArgoCDSpec", "ArgoCDStatus", "Condition", "ConditionStatus", "DeletionPolicy", "DnsLabel", "DnsSubdomain",
    "Duration", "GpuSpec", "GpuTenant", "GpuTenantSpec", "GpuTenantStatus", "GrantedStatus", "HamiSpec",
    "HttpsUrl", "IdleSleepSpec", "KubeconfigRole", "KubeconfigSpec", "KubeconfigStatus", "LimitRangeSpec", "Member",
    "MemberRole", "MigProfileName", "MigSpec", "ObjectMeta", "Quantity", "QueueGrantStatus", "QuotaSpec",
    "ResourceAmounts", "SharingMode", "SharingSpec", "SleepSpec", "SharingStatus", "Subject", "SubjectKind",
    "SigningAlgorithm", "TimeSlicingSpec", "Trust", "UsageGpuStatus", "UsageStatus", "VClusterOIDC", "VClusterOverrides", "VClusterResources", "VClusterSpec", "VClusterStatus",
]
