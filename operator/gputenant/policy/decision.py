"""The policy's output: what the tenant gets, in each mechanism's own units, and why.

A decision is data, never an exception: an impossible request (no pool for the mode, a MIG
profile the GPU does not have, a quota above the pool) is a decision with ``possible=False``,
a CamelCase ``reason`` and a message, which the operator turns into ``Ready=False``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant.api.hub import SharingMode, Trust
from gputenant.config.pools import Pool
from gputenant.sharing.base import PodRules


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
