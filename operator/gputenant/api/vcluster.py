"""The tenant's vCluster in the GpuTenant spec: its control plane's resources, version and values
overrides. Part of v1alpha1 (``api.v1alpha1`` re-exports every name)."""

from __future__ import annotations

from enum import Enum
from functools import partial
from typing import Annotated, ClassVar

from pydantic import Field

from gputenant.api.rules import Rule, is_https_url, quantity_at_most, unique, value_rule
from gputenant.api.types import ApiModel, DnsSubdomain, HttpsUrl, Quantity


class ResourceAmounts(ApiModel):
    """CPU and memory of one container."""

    cpu: Quantity | None = Field(default=None, description="CPU quantity.")
    memory: Quantity | None = Field(default=None, description="Memory quantity.")


def _requests_within_limits(resources: VClusterResources, resource: str) -> bool:
    """The Python twin of the requests <= limits CEL rule, for one of cpu and memory."""
    request, limit = getattr(resources.requests, resource), getattr(resources.limits, resource)
    return request is None or limit is None or quantity_at_most(request, limit)


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
            partial(_requests_within_limits, resource=resource),
            field_path=f".requests.{resource}",
        )
        for resource in ("cpu", "memory")
    )


class VClusterOverrides(ApiModel):
    """The few vCluster values a tenant may change; everything else is the operator's."""

    sync_ingresses: bool = Field(default=False, description="Sync Ingresses from the tenant to the host.")
    storage_size: Quantity = Field(default="5Gi", description="Size of the control plane's data volume.")
    storage_class: DnsSubdomain | None = Field(default=None, description="StorageClass of the data volume. Unset: the default.")
    core_dns_replicas: int = Field(default=1, ge=1, le=3, alias="coreDNSReplicas", description="CoreDNS replicas.")


class SigningAlgorithm(str, Enum):
    """JOSE algorithms the API server's OIDC authenticator verifies (kube-apiserver --oidc-signing-algs)."""

    RS256 = "RS256"
    RS384 = "RS384"
    RS512 = "RS512"
    ES256 = "ES256"
    ES384 = "ES384"
    ES512 = "ES512"
    PS256 = "PS256"
    PS384 = "PS384"
    PS512 = "PS512"


RESERVED_PREFIX = "system:"
"""Kubernetes' own users and groups (system:masters is cluster-admin): no issuer may mint them."""

IssuerUrl = Annotated[
    str,
    Field(max_length=2048),
    *value_rule(
        "isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != '' "
        "&& !self.contains('?') && !self.contains('#') && !self.contains('@')",
        "must be the issuer's https URL exactly as its tokens' iss claim names it, without query, fragment or "
        "user; e.g. https://login.example.com/realms/gpu",
        lambda url: is_https_url(url) and not any(mark in url for mark in "?#@"),
    ),
]
"""One rule, not HttpsUrl's and another: a second value rule would replace the first in the CRD."""
Claim = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:/-]+$")]
NamePrefix = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:/@-]+$"),
    *value_rule(
        f"!self.startsWith('{RESERVED_PREFIX}') && self != '-'",
        f"must be a non-empty prefix outside Kubernetes' reserved '{RESERVED_PREFIX}' names (so no token can claim "
        "system:masters or a ServiceAccount), e.g. oidc:",
        lambda prefix: not prefix.startswith(RESERVED_PREFIX) and prefix != "-",
    ),
]
PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----"


class VClusterOIDC(ApiModel):
    """An OIDC issuer whose ID tokens the tenant's vCluster API server accepts (the kube-apiserver
    --oidc-* flags). The owners' groups and users, prefixed, are cluster-admin inside the vCluster."""

    issuer_url: IssuerUrl = Field(alias="issuerURL", description="https URL of the issuer; must equal the tokens' iss claim.")
    client_id: str = Field(alias="clientID", min_length=1, max_length=256, pattern=r"^\S+$",
                           description="Client ID the tokens must be issued for (their aud claim).")
    username_claim: Claim = Field(default="sub", description="Claim that names the user.")
    username_prefix: NamePrefix = Field(default="oidc:", description="Prefix of every OIDC user name inside the vCluster.")
    groups_claim: Claim = Field(default="groups", description="Claim that lists the user's groups.")
    groups_prefix: NamePrefix = Field(default="oidc:", description="Prefix of every OIDC group name inside the vCluster.")
    signing_algs: Annotated[list[SigningAlgorithm], unique(lambda alg: alg.value, "signingAlgs must be unique")] = Field(
        default_factory=lambda: [SigningAlgorithm.RS256], min_length=1, max_length=9,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Signing algorithms accepted (the issuer's keys decide: RS256 for RSA keys, ES256 for P-256).",
    )
    ca_bundle: str | None = Field(
        default=None, max_length=65536,
        description="PEM certificates that sign the issuer's serving certificate. Unset: the system's roots.",
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            f"!has(self.caBundle) || (self.caBundle.contains('{PEM_CERTIFICATE}') && !self.caBundle.contains('PRIVATE KEY'))",
            "caBundle must hold PEM certificates (-----BEGIN CERTIFICATE-----) and no private key: paste the "
            "issuer's CA certificate, or remove caBundle for a publicly trusted issuer",
            lambda oidc: oidc.ca_bundle is None or (PEM_CERTIFICATE in oidc.ca_bundle and "PRIVATE KEY" not in oidc.ca_bundle),
            field_path=".caBundle",
        ),
    )


class VClusterSpec(ApiModel):
    """The tenant's own control plane (loft-sh/vcluster chart)."""

    chart_version: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$",
        description="vcluster chart version, e.g. 0.36.1. Unset: the operator's default. Upgrades go one minor at a time."
    )
    kubernetes_version: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^v[0-9]+\.[0-9]+\.[0-9]+$",
        description="Kubernetes version of the virtual control plane, e.g. v1.35.4. Unset: the chart's default."
    )
    resources: VClusterResources = Field(default_factory=VClusterResources, description="Control-plane resources.")
    server_url: HttpsUrl | None = Field(
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
    oidc: VClusterOIDC | None = Field(
        default=None,
        description="Personal logins: an OIDC issuer the vCluster API server trusts. Unset: token kubeconfigs only.",
    )
