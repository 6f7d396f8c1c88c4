"""The policy's output: what the tenant gets, in each mechanism's own units, and why.

A decision is data, never an exception: an impossible request (no pool for the mode, a MIG
profile the GPU does not have, a quota above the pool) is a decision with ``possible=False``,
a CamelCase ``reason`` and a message, which the operator turns into ``Ready=False``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from gputenant.api.hub import SharingMode, Trust
from gputenant.config.pools import Pool


@dataclass(frozen=True)
class QueueGrant:
    """The KAI Queue's GPU resources, in KAI units (a MIG instance counts as its compute slices)."""

    name: str
    quota: float
    limit: float
    over_quota_weight: int
    priority: int
    parent: str | None = None


@dataclass(frozen=True)
class PodRules:
    """What one pod of the tenant may ask for; the admission guard enforces it."""

    gpu_resources: tuple[str, ...]
    """Extended resources the tenant's pods may request, e.g. ("nvidia.com/mig-1g.10gb",)."""
    max_per_pod: dict[str, int] = field(default_factory=dict)
    """Largest amount of each resource one pod may request (the tenant's limit)."""
    max_per_container: dict[str, int] = field(default_factory=dict)
    """Largest amount per container, e.g. 1 time-sliced replica when the pool fails larger requests."""
    allow_fraction_annotations: bool = False
    """Whether KAI gpu-fraction / gpu-memory annotations are allowed."""
    fraction_share: Fraction | None = None
    """When set, the only GPU request allowed: a KAI ``gpu-fraction`` annotation that is a whole number of
    these shares, below one GPU and at most the tenant's limit (HAMi mode, docs/units.md); ``gpu-memory`` is
    refused, its queue charge depends on the node it lands on."""
    max_fraction: Fraction | None = None
    """The largest ``gpu-fraction`` one pod may ask for (below 1, at most the tenant's limit)."""
    forbid_isolation_overrides: bool = True
    """Reject env vars that disable GPU isolation (Internal and Untrusted tenants)."""


@dataclass(frozen=True)
class Decision:
    trust: Trust
    possible: bool
    reason: str
    """One CamelCase word, e.g. ChosenFromTrust, ExplicitMode, NoPoolForMode, ProfileNotOnGPU."""
    message: str
    """For humans: why this mechanism and pool, or what to change."""
    mode: SharingMode | None = None
    pool: Pool | None = None
    quota: dict[str, str] = field(default_factory=dict)
    """GPU entries of the host ResourceQuota's ``hard``, e.g. {"requests.nvidia.com/gpu": "8"}."""
    queue: QueueGrant | None = None
    pod_rules: PodRules | None = None
    warnings: tuple[str, ...] = ()
