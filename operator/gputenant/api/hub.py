"""The internal GpuTenant model: what every layer outside ``api/`` reads and writes, whatever version
a client sent (the conversion hub, as kubebuilder and Capsule name it).

The hub has v1alpha1's shape (``group.HUB_VERSION``), so it re-exports that version's models;
``GpuTenant.from_body`` reads an object of any served version and ``spec_from_stored`` a spec of
the stored one (``api.conversion.to_hub``), so no module outside ``api/`` names a version. Group,
kind and versions: ``api/group.py``.
"""

from __future__ import annotations

from typing import Any

from gputenant.api import v1beta1
from gputenant.api.conversion import ConversionError, to_hub, version_of
from gputenant.api.group import API_VERSION, GROUP, HUB_VERSION, KIND, V1ALPHA1, V1BETA1
from gputenant.api.v1alpha1 import (
    MAX_GPUS,
    MAX_TENANT_NAME_LENGTH,
    MAX_TOKEN_LIFETIME,
    MIN_TOKEN_LIFETIME,
    TENANT_NAME_RULE,
    ApiModel,
    ArgoCDSpec,
    ArgoCDStatus,
    Condition,
    ConditionStatus,
    DeletionPolicy,
    DnsLabel,
    DnsSubdomain,
    Duration,
    GpuSpec,
    GpuTenantSpec,
    GpuTenantStatus,
    GrantedStatus,
    HamiSpec,
    HttpsUrl,
    IdleSleepSpec,
    KubeconfigRole,
    KubeconfigSpec,
    KubeconfigStatus,
    LimitRangeSpec,
    Member,
    MemberRole,
    MigProfileName,
    MigSpec,
    ObjectMeta,
    Quantity,
    QueueGrantStatus,
    QuotaSpec,
    ResourceAmounts,
    SharingMode,
    SharingSpec,
    SharingStatus,
    SigningAlgorithm,
    SleepSpec,
    Subject,
    SubjectKind,
    TimeSlicingSpec,
    Trust,
    UsageGpuStatus,
    UsageStatus,
    VClusterOIDC,
    VClusterOverrides,
    VClusterResources,
    VClusterSpec,
    VClusterStatus,
)
from gputenant.api.v1alpha1 import GpuTenant as StoredGpuTenant

__all__ = ["ConversionError", "spec_from_stored",
    "MAX_GPUS", "MAX_TENANT_NAME_LENGTH", "MAX_TOKEN_LIFETIME", "MIN_TOKEN_LIFETIME", "TENANT_NAME_RULE", "ApiModel",
    "ArgoCDSpec", "ArgoCDStatus", "Condition", "ConditionStatus", "DeletionPolicy", "DnsLabel",
    "DnsSubdomain", "Duration", "GpuSpec", "GpuTenant", "GpuTenantSpec", "GpuTenantStatus",
    "GrantedStatus", "HamiSpec", "HttpsUrl", "IdleSleepSpec", "KubeconfigRole", "KubeconfigSpec",
    "KubeconfigStatus", "LimitRangeSpec", "Member", "MemberRole", "MigProfileName", "MigSpec",
    "ObjectMeta", "Quantity", "QueueGrantStatus", "QuotaSpec", "ResourceAmounts", "SharingMode",
    "SharingSpec", "SleepSpec", "SharingStatus", "Subject", "SubjectKind", "SigningAlgorithm",
    "TimeSlicingSpec", "Trust", "UsageGpuStatus", "UsageStatus", "VClusterOIDC", "VClusterOverrides",
    "VClusterResources", "VClusterSpec", "VClusterStatus",
]


class GpuTenant(StoredGpuTenant):
    """A GpuTenant in the hub's shape, read from an object of any served version."""

    @classmethod
    def from_body(cls, body: Any) -> GpuTenant:
        """Validated in its own version first, so an error names the field as its author wrote it;
        ``ConversionError`` for an apiVersion no version of the API has. A body without apiVersion
        is taken as the hub's shape."""
        raw = dict(body)
        api_version = raw.get("apiVersion", HUB_API_VERSION)
        if api_version != HUB_API_VERSION:
            version_of(raw)
            SERVED_MODELS[api_version].model_validate(raw)
            raw = to_hub(raw)
        return cls.model_validate(raw)


HUB_API_VERSION = f"{GROUP}/{HUB_VERSION}"
SERVED_MODELS: dict[str, type[StoredGpuTenant]] = {
    f"{GROUP}/{V1ALPHA1}": StoredGpuTenant, f"{GROUP}/{V1BETA1}": v1beta1.GpuTenant}


def spec_from_stored(spec: Any) -> GpuTenantSpec:
    """A spec as the API server hands it to the operator (the stored version's shape: the watch,
    the indexes, admission reviews), validated as the hub's."""
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "spec"}, "spec": dict(spec or {})}
    return GpuTenantSpec.model_validate(to_hub(body)["spec"])
