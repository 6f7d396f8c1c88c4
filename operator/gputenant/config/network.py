"""Where tenant pods may connect beyond their own namespace: per trust level, an allow-list.

Every tenant pod reaches its own namespace (its vCluster's API and DNS run there) and the host's
DNS on port 53. Nothing else of the cluster is open unless the platform team names it here as a
platform endpoint of a trust level: a namespace (optionally some of its pods) or an address block,
always with its ports. Addresses outside the cluster (`internet`) follow the trust profile
(api/trust.py) unless set. docs/threat-model.md, "The network", explains each opening.
"""

from __future__ import annotations

from enum import Enum
from ipaddress import IPv4Network

from pydantic import Field, model_validator

from gputenant.api.trust import Trust, profile
from gputenant.api.types import DnsLabel
from gputenant.config.base import ConfigModel


class Protocol(str, Enum):
    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


class EndpointPort(ConfigModel):
    protocol: Protocol = Field(default=Protocol.TCP, description="TCP, UDP or SCTP.")
    port: int = Field(ge=1, le=65535, description="The port the endpoint serves.")


class PlatformEndpoint(ConfigModel):
    """One opening: a shared service a trust level's pods need (a model registry, a dataset cache)."""

    name: DnsLabel = Field(description="What the endpoint is (docs and messages only), e.g. model-registry.")
    namespace: DnsLabel | None = Field(
        default=None,
        description="The namespace the endpoint's pods run in. Set exactly one of namespace and cidr.",
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="With namespace: only its pods carrying these labels (empty: every pod of the namespace).",
    )
    cidr: IPv4Network | None = Field(
        default=None,
        description="An address block outside the pod network (e.g. a registry host inside clusterNetworks).",
    )
    ports: list[EndpointPort] = Field(
        min_length=1, description="The ports opened; an opening is never a whole namespace or host.")

    @model_validator(mode="after")
    def _one_target(self) -> PlatformEndpoint:
        if (self.namespace is None) == (self.cidr is None):
            raise ValueError(f"tenantEgress endpoint {self.name}: set exactly one of namespace and cidr")
        if self.pod_labels and self.namespace is None:
            raise ValueError(f"tenantEgress endpoint {self.name}: podLabels select pods of a namespace; set namespace")
        return self

    def peer(self) -> dict:
        """The NetworkPolicyPeer that selects the endpoint."""
        if self.cidr is not None:
            return {"ipBlock": {"cidr": str(self.cidr)}}
        peer: dict = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}}
        if self.pod_labels:
            peer["podSelector"] = {"matchLabels": dict(sorted(self.pod_labels.items()))}
        return peer

    def rule(self) -> dict:
        """The egress rule that opens the endpoint's ports."""
        return {"to": [self.peer()],
                "ports": [{"protocol": port.protocol.value, "port": port.port} for port in self.ports]}


class TierEgress(ConfigModel):
    """What the pods of one trust level may reach besides their namespace and DNS."""

    internet: bool | None = Field(
        default=None,
        description=(
            "Addresses outside clusterNetworks (registries, dataset hosts). Unset: the trust level's default "
            "(Trusted and Internal yes, Untrusted no)."
        ),
    )
    platform_endpoints: list[PlatformEndpoint] = Field(
        default_factory=list, description="Shared services of the platform this trust level's pods may reach.")


def egress_problems(tenant_egress: dict[Trust, TierEgress], operator_namespace: str, namespace_prefix: str) -> list[str]:
    """Openings that would let a tenant reach the operator or another tenant."""
    problems = []
    for trust, tier in tenant_egress.items():
        for endpoint in tier.platform_endpoints:
            where = f"tenantEgress.{trust.value}.platformEndpoints[{endpoint.name}].namespace"
            if endpoint.namespace == operator_namespace:
                problems.append(f"{where}: {endpoint.namespace} is the operator's namespace, whose guard answers only "
                                f"the API server; remove the endpoint")
            elif namespace_prefix and endpoint.namespace and endpoint.namespace.startswith(namespace_prefix):
                problems.append(f"{where}: {endpoint.namespace} starts with namespacePrefix {namespace_prefix!r}, the "
                                f"namespaces of tenants; name a platform namespace")
    return problems


def tier_egress(tenant_egress: dict[Trust, TierEgress], trust: Trust) -> tuple[bool, list[PlatformEndpoint]]:
    """(internet egress, platform endpoints) for the trust level's pods."""
    tier = tenant_egress.get(trust) or TierEgress()
    internet = profile(trust).internet_egress if tier.internet is None else tier.internet
    return internet, list(tier.platform_endpoints)
