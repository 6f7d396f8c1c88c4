"""``spec.placement``: which member clusters of a fleet a tenant may be placed on (docs/fleet.md).

Only a hub operator (``fleet.role: hub``) reads it; a member and a single-cluster install ignore it,
so the same GpuTenant file can be applied to the hub and delivered to the member. The hub writes
its choice to a GpuTenantPlacement (``fleet.decision``), never to this spec.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, ClassVar

from pydantic import Field

from gputenant.api.rules import Rule
from gputenant.api.types import ApiModel

ClusterName = Annotated[str, Field(min_length=1, max_length=253)]
"""An Argo CD cluster name (the ``name`` key of its cluster Secret)."""
LabelValue = Annotated[str, Field(max_length=63)]


class SelectorOperator(str, Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class ClusterSelectorRequirement(ApiModel):
    """One requirement on a member cluster's labels (the labels of its Argo CD cluster Secret)."""

    key: str = Field(min_length=1, max_length=317, description="Label key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[LabelValue] = Field(
        default_factory=list, max_length=64,
        description="Label values: at least one for In and NotIn, none for Exists and DoesNotExist.",
    )

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule("self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",
             "In and NotIn need values; Exists and DoesNotExist take none",
             lambda m: bool(m.values) == (m.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN))),
    )

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator is SelectorOperator.EXISTS:
            return self.key in labels
        if self.operator is SelectorOperator.DOES_NOT_EXIST:
            return self.key not in labels
        inside = self.key in labels and labels[self.key] in self.values
        return inside if self.operator is SelectorOperator.IN else not inside


class ClusterSelector(ApiModel):
    """A label selector over member clusters, as a Kubernetes LabelSelector: every entry must hold."""

    match_labels: dict[str, LabelValue] = Field(
        default_factory=dict, description="Labels a member's cluster Secret must carry.")
    match_expressions: list[ClusterSelectorRequirement] = Field(
        default_factory=list, max_length=32, description="Further requirements on the member's labels."
    )

    def matches(self, labels: dict[str, str]) -> bool:
        return (all(labels.get(key) == value for key, value in self.match_labels.items())
                and all(requirement.matches(labels) for requirement in self.match_expressions))

    def __str__(self) -> str:
        terms = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        terms += [f"{r.key} {r.operator.value} ({','.join(r.values)})" if r.values else f"{r.key} {r.operator.value}"
                  for r in self.match_expressions]
        return ", ".join(terms) or "(every member)"


class PlacementSpec(ApiModel):
    """Where a fleet's hub may place the tenant. Unset: any member that fits. The hub places a
    tenant once and keeps it there (docs/fleet.md, "Moving a tenant")."""

    clusters: list[ClusterName] = Field(
        default_factory=list, max_length=64,
        description="Member clusters (their Argo CD cluster names) the tenant may go to. Empty: any member.",
    )
    cluster_selector: ClusterSelector | None = Field(
        default=None,
        description="Labels of the member's Argo CD cluster Secret the tenant's cluster must match (region, zone, ...).",
    )

    def admits(self, cluster: str, labels: dict[str, str]) -> str | None:
        """None when `cluster` may hold the tenant, else why not (for the placement's reasons)."""
        if self.clusters and cluster not in self.clusters:
            return f"not in spec.placement.clusters ({', '.join(self.clusters)})"
        if self.cluster_selector is not None and not self.cluster_selector.matches(labels):
            return f"its labels do not match spec.placement.clusterSelector ({self.cluster_selector})"
        return None


class MemberTenantStatus(ApiModel):
    """The tenant as its member cluster's operator reports it, as the hub last read it."""

    ready: str | None = Field(default=None, description="The member tenant's Ready status: True, False or Unknown.")
    reason: str | None = Field(default=None, description="The member tenant's Ready reason.")
    message: str | None = Field(default=None, description="The member tenant's Ready message.")


class FleetStatus(ApiModel):
    """Where a fleet's hub placed the tenant and how its member sees it (written by the hub only)."""

    cluster: str | None = Field(default=None, description="The member cluster the tenant is placed on; unset while unplaced.")
    reason: str | None = Field(default=None, description="Why there, or why nowhere (one CamelCase word).")
    message: str | None = Field(default=None, description="The placement's reason for humans, every member's verdict included.")
    member: MemberTenantStatus | None = Field(default=None, description="The tenant on its member cluster.")
