"""``fleet``: whether this operator is a fleet's hub, one of its members, or a single host cluster's
operator (the default). docs/fleet.md."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from gputenant.config.base import ConfigModel


class FleetRole(str, Enum):
    STANDALONE = "standalone"
    """One host cluster: the operator installs every tenant it sees (as before fleets)."""
    HUB = "hub"
    """Places tenants on members and shows their state; installs no vCluster itself."""
    MEMBER = "member"
    """Installs its tenants as a standalone operator does and reports its capacity to the hub."""


class FleetConfig(ConfigModel):
    """A hub reads its members through Argo CD's cluster Secrets; a member writes its capacity report."""

    role: FleetRole = Field(default=FleetRole.STANDALONE, description="standalone, hub or member.")
    argocd_namespace: str = Field(
        default="argocd",
        description="Hub: where Argo CD keeps its cluster Secrets, the ApplicationSet and the GpuTenantPlacements.",
    )
    member_label: str = Field(
        default="fleet.gputenant.io/member",
        description="Hub: a cluster Secret with this label set to \"true\" is a member.",
    )
    cordon_label: str = Field(
        default="fleet.gputenant.io/cordoned",
        description="Hub: a member whose cluster Secret has this label set to \"true\" gets no new tenant.",
    )
    application_name_prefix: str = Field(
        default="gputenant-",
        description="Hub: the ApplicationSet names each tenant's Application <prefix><tenant> (chart fleet.applicationSet).",
    )
    application_set_name: str = Field(
        default="gpu-tenant-operator-fleet",
        description=("Hub: the ApplicationSet the hub asks to read the decisions as soon as one changes (its refresh "
                     "annotation). The chart sets it to its own, <release>-fleet."),
    )
    report_config_map: str = Field(
        default="gpu-tenant-operator-fleet-report",
        description="The member's capacity report: a ConfigMap of this name in the member operator's namespace.",
    )
    report_max_age_seconds: float = Field(
        default=300.0, gt=0,
        description="Hub: a member report older than this is not trusted to place a tenant.",
    )
    poll_seconds: float = Field(
        default=15.0, gt=0,
        description="Hub: how often each member's report and tenants are read. Member: how often the report is renewed.",
    )
    member_timeout_seconds: float = Field(
        default=5.0, gt=0, description="Hub: how long one read of a member may take before it counts as unreachable.")

    @model_validator(mode="after")
    def _report_outlives_a_poll(self) -> FleetConfig:
        if self.report_max_age_seconds <= 2 * self.poll_seconds:
            raise ValueError(
                f"fleet.reportMaxAgeSeconds ({self.report_max_age_seconds:g}) must be more than twice "
                f"fleet.pollSeconds ({self.poll_seconds:g}), or every report is stale before the next one arrives")
        return self
