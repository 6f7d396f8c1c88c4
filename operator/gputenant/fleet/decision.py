"""GpuTenantPlacement: the hub's decision for one tenant, in Open Cluster Management's
PlacementDecision shape (``status.decisions[].clusterName``, ``reason``), so Argo CD's ApplicationSet
``clusterDecisionResource`` generator reads it unmodified and OCM's own Placement can later write it
instead (docs/fleet.md).

One GpuTenantPlacement per tenant, named after it, in Argo CD's namespace (the generator lists the
resource in its own namespace only), plus one ANCHOR with no decision: the generator fails with "no
clusterDecisionResources found" when its selector matches nothing, and a failing generator deletes
no Application, so without the anchor the last tenant's delivery would never be removed. Every
decision entry also carries ``tenant`` (the generator hands each key of an entry to the template as
a parameter). The status always has ``decisions``, an empty list while unplaced: the generator reads
``status.decisions`` of any object whose status is not empty without checking it is there."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gputenant.api.crd import crd_yaml, model_schema
from gputenant.api.group import GROUP, KIND, PLACEMENT_VERSION
from gputenant.api.types import ApiModel
from gputenant.fleet.placement import Placement

VERSION = PLACEMENT_VERSION
PLACEMENT_KIND = "GpuTenantPlacement"
PLURAL = "gputenantplacements"
API_VERSION = f"{GROUP}/{VERSION}"
DECISIONS_LABEL = "fleet.gputenant.io/decisions"
"""On every GpuTenantPlacement, the anchor included: the ApplicationSet generator's labelSelector."""
TENANT_LABEL = "fleet.gputenant.io/tenant"
ANCHOR = "gputenant-fleet-anchor-of-the-placement-decisions"
"""The placement without a decision: longer than a GpuTenant name may be (MAX_TENANT_NAME_LENGTH),
so no tenant's placement can take its place, and without TENANT_LABEL."""
STATUS_LIST_KEY = "decisions"
MATCH_KEY = "clusterName"


class PlacementSpec(ApiModel):
    tenant: str = Field(description="The GpuTenant this placement is for; empty on the fleet's anchor.")


class ClusterDecision(ApiModel):
    cluster_name: str = Field(description="The member's Argo CD cluster name.")
    reason: str = Field(description="Why this member (one CamelCase word).")
    tenant: str = Field(description="The tenant to deliver there (a parameter of the ApplicationSet's template).")


class ClusterVerdict(ApiModel):
    cluster_name: str = Field(description="A member's Argo CD cluster name.")
    fits: bool = Field(description="Whether the member could take the tenant.")
    reason: str = Field(description="Why (not), one CamelCase word.")
    message: str = Field(default="", description="Why (not), for humans.")


class PlacementStatus(ApiModel):
    decisions: list[ClusterDecision] = Field(
        default_factory=list, max_length=1, description="The chosen member; empty while none (OCM PlacementDecision shape).")
    clusters: list[ClusterVerdict] = Field(
        default_factory=list, max_length=256, description="Every member's verdict when the tenant was placed.")
    reason: str = Field(default="", description="Why this decision (one CamelCase word).")
    message: str = Field(default="", description="Why this decision, for humans.")


def placement_object(tenant: dict, namespace: str) -> dict[str, Any]:
    """The GpuTenantPlacement of a hub tenant (spec and labels; the status is written apart), owned
    by the tenant so it goes when the tenant does."""
    name = tenant["metadata"]["name"]
    return {
        "apiVersion": API_VERSION, "kind": PLACEMENT_KIND,
        "metadata": {
            "name": name, "namespace": namespace, "labels": {DECISIONS_LABEL: "true", TENANT_LABEL: name},
            "ownerReferences": [{"apiVersion": tenant["apiVersion"], "kind": KIND, "name": name,
                                 "uid": tenant["metadata"]["uid"], "blockOwnerDeletion": False}],
        },
        "spec": {"tenant": name},
    }


def anchor_object(namespace: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": PLACEMENT_KIND,
            "metadata": {"name": ANCHOR, "namespace": namespace, "labels": {DECISIONS_LABEL: "true"}},
            "spec": {"tenant": ""}}


def placement_status(tenant: str, placement: Placement) -> dict[str, Any]:
    """The status the hub writes for `placement` (every key always present: see the module)."""
    decisions = ([{"clusterName": placement.cluster, "reason": placement.reason, "tenant": tenant}]
                 if placement.cluster else [])
    return {"decisions": decisions,
            "clusters": [{"clusterName": v.cluster, "fits": v.fits, "reason": v.reason, "message": v.message}
                         for v in placement.verdicts],
            "reason": placement.reason, "message": placement.message}


def decided_cluster(placement: dict | None) -> str | None:
    """The member a GpuTenantPlacement names, if any."""
    decisions = ((placement or {}).get("status") or {}).get(STATUS_LIST_KEY) or []
    return decisions[0].get(MATCH_KEY) if decisions else None


def generator_config_map(namespace: str, name: str) -> dict[str, Any]:
    """The ConfigMap the ApplicationSet's ``clusterDecisionResource.configMapRef`` names."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {"apiVersion": API_VERSION, "kind": PLURAL, "statusListKey": STATUS_LIST_KEY, "matchKey": MATCH_KEY}}


def build_placement_crd() -> dict[str, Any]:
    schema = {"type": "object", "description": "The fleet hub's decision for one GpuTenant (OCM PlacementDecision shape).",
              "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                             "metadata": {"type": "object"},
                             "spec": model_schema(PlacementSpec), "status": model_schema(PlacementStatus)}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"kind": PLACEMENT_KIND, "listKind": f"{PLACEMENT_KIND}List", "plural": PLURAL,
                           "singular": PLACEMENT_KIND.lower(), "shortNames": ["gtp"], "categories": ["gputenant"]},
                 "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                               "additionalPrinterColumns": [
                                   {"name": "Cluster", "type": "string", "jsonPath": ".status.decisions[0].clusterName"},
                                   {"name": "Reason", "type": "string", "jsonPath": ".status.reason"},
                                   {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}],
                               "schema": {"openAPIV3Schema": schema}}]},
    }


def render_placement_crd_yaml() -> str:
    """``crds/placement.yaml``."""
    header = "# Generated from operator/gputenant/fleet/decision.py by `gputenant crd --placement`; do not edit.\n"
    return header + crd_yaml(build_placement_crd())
