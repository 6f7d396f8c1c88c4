"""GpuTenant status: what the operator reports back, written only through the status subresource."""

from __future__ import annotations

from enum import Enum
from typing import Final

from pydantic import Field

from gputenant.api.placement import FleetStatus
from gputenant.api.trust import SharingMode
from gputenant.api.types import ApiModel, KubeconfigRole

PIPELINE: Final = "pipeline"
USAGE: Final = "usage"
ATTESTATION: Final = "attestation"
DELETION: Final = "deletion"
FLEET: Final = "fleet"
"""A fleet's hub (gputenant.fleet.hub): status.fleet and Ready, on the hub only, where no pipeline runs."""
"""The writers of a GpuTenant's status, each applying only its own fields under its own field manager
(``<field manager>-<writer>``, `KubeClient.apply_status`); docs/architecture.md, Status."""


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
    observed_generation: int | None = Field(default=None, ge=0, description="Generation the condition was set for.")


class SharingStatus(ApiModel):
    """The sharing mechanism and pool in force."""

    mode: SharingMode | None = Field(default=None, description="The sharing mechanism in force.")
    pool: str | None = Field(default=None, description="The GPU pool the tenant runs on.")
    reason: str | None = Field(default=None, description="Why this mechanism and pool were chosen.")


class QueueGrantStatus(ApiModel):
    """The KAI Queue as the operator applied it."""

    name: str | None = Field(default=None, description="KAI Queue name.")
    parent: str | None = Field(default=None, description="Parent queue.")
    quota: float | None = Field(default=None, description="Queue GPU quota in KAI units.")
    limit: float | None = Field(default=None, description="Queue GPU limit in KAI units.")
    over_quota_weight: int | None = Field(default=None, description="Queue over-quota weight.")
    priority: int | None = Field(default=None, description="Queue priority.")


class GrantedStatus(ApiModel):
    """What the tenant was granted, in each mechanism's own units."""

    resources: dict[str, str] = Field(
        default_factory=dict, description="GPU entries of the host ResourceQuota, in the mechanism's resource names."
    )
    queue: QueueGrantStatus | None = Field(default=None, description="The KAI Queue's GPU resources.")


class VClusterStatus(ApiModel):
    """The installed vCluster release."""

    release: str | None = Field(default=None, description="Helm release name.")
    chart_version: str | None = Field(default=None, description="Installed chart version.")
    endpoint: str | None = Field(default=None, description="API server URL tenants use.")
    values_hash: str | None = Field(default=None, description="Hash of the applied values; no Helm upgrade while it matches.")
    oidc_owners_hash: str | None = Field(
        default=None,
        description="Hash of the owners' OIDC binding inside the vCluster (spec.vcluster.oidc); rewritten only when it changes.",
    )


class KubeconfigStatus(ApiModel):
    """One issued kubeconfig."""

    role: KubeconfigRole = Field(description="admin or view.")
    secret_name: str = Field(description="Secret in the host namespace holding the kubeconfig (key: config).")
    expires_at: str | None = Field(default=None, description="When the token expires (RFC 3339).")


class ArgoCDStatus(ApiModel):
    """The Argo CD cluster Secret the operator wrote, recorded so that a registration later moved to
    another namespace or disabled is found there and removed."""

    namespace: str = Field(max_length=63, description="Namespace of the cluster Secret (spec.argocd.namespace when written).")
    secret_name: str = Field(max_length=253, description="Name of the cluster Secret.")


MAX_LISTED_GPUS = 8
"""Idle GPUs named in status at most; ``idleGpuCount`` counts them all (the rest: ``gputenant usage``)."""


class UsageGpuStatus(ApiModel):
    """One GPU a pod of the tenant holds."""

    pod: str = Field(max_length=253, description="Host pod holding the GPU.")
    gpu: str = Field(max_length=128, description="The GPU's UUID as DCGM names it.")


class UsageStatus(ApiModel):
    """GPUs held against GPUs used over the last window, from the DCGM exporter's series in Prometheus."""

    window: str = Field(max_length=32, description="The window the figures cover, e.g. 1h.")
    gpus_held: int = Field(default=0, ge=0, description="GPUs the tenant's pods held in the window.")
    gpu_hours_held: float = Field(default=0, ge=0, description="GPU-hours held in the window.")
    gpu_hours_used: float = Field(
        default=0, ge=0, description="GPU-hours of SM activity in the window (a GPU busy half the time counts half)."
    )
    idle_gpu_count: int = Field(default=0, ge=0, description="Held GPUs whose SMs stayed idle over the window.")
    idle_gpus: list[UsageGpuStatus] = Field(
        default_factory=list, max_length=MAX_LISTED_GPUS, description=f"The first {MAX_LISTED_GPUS} idle GPUs."
    )
    busy_not_working: bool = Field(
        default=False, description="Some held GPU reads busy (GPU_UTIL high) while its SMs do almost nothing (SM_ACTIVE low)."
    )
    all_idle_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Since when every GPU the tenant holds has been idle (RFC 3339); unset while one works or none is held.",
    )
    gpu_hours_by_share: float | None = Field(
        default=None, ge=0,
        description="GPU-hours held in the window counted by share (a quarter HAMi share counts a quarter, a time-slice "
                    "replica 1/replicas); unset until the operator's share series reach Prometheus.")
    cost: float | None = Field(
        default=None, ge=0, description="gpuHoursByShare priced by its pool's accounting.pricePerGpuHour, in costCurrency.")
    cost_currency: str | None = Field(default=None, max_length=8, description="The currency of cost (accounting.currency).")
    observed_at: str = Field(json_schema_extra={"format": "date-time"}, description="When these figures were read (RFC 3339).")


class WakeStatus(ApiModel):
    """An owner's wake request (ConfigMap gputenant-wake in the host namespace), which wins over
    spec.sleep.asleep until the wake ends; spec itself is never changed, so GitOps sees no drift."""

    request: str = Field(max_length=253, description="The last value of the request's data.request the operator acted on.")
    woken_at: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When that request woke the tenant (RFC 3339)."
    )
    until: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Earliest moment the wake ends (RFC 3339); it ends then if the GPUs are idle, later otherwise. Unset: not woken.",
    )


class GpuTenantStatus(ApiModel):
    """Observed state; written only through the status subresource."""

    observed_generation: int | None = Field(default=None, description="The spec generation this status describes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Ready and one condition per part.",
    )
    namespace: str | None = Field(default=None, description="The tenant's host namespace.")
    sharing: SharingStatus | None = Field(default=None, description="The chosen sharing mechanism and why.")
    granted: GrantedStatus | None = Field(default=None, description="Resources granted in each mechanism's units.")
    vcluster: VClusterStatus | None = Field(default=None, description="The virtual cluster's release and endpoint.")
    kubeconfigs: list[KubeconfigStatus] = Field(
        default_factory=list,
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["role"]},
        description="Issued kubeconfig Secrets and expiry.",
    )
    usage: UsageStatus | None = Field(
        default=None, description="GPU allocation against use, when the operator reads Prometheus (gputenant run --prometheus-url)."
    )
    wake: WakeStatus | None = Field(default=None, description="The owners' last wake request and how long it holds.")
    argocd: ArgoCDStatus | None = Field(
        default=None, description="The Argo CD cluster Secret written for spec.argocd; unset while none is registered.")
    fleet: FleetStatus | None = Field(
        default=None, description="Where a fleet's hub placed the tenant, and its Ready there; only on the hub (docs/fleet.md).")
