"""Trust as one profile: every fact that depends on a tenant's trust level, one row per level
(``PROFILES``), read by the API's CEL rule, the policy, the renderer and the guard; no other module
compares trust levels itself.

Why (docs/trust-levels.md): time-slicing isolates nothing, HAMi caps memory and compute in user
space (best effort, bypassable from inside the pod), MIG partitions the GPU in hardware, and a
whole GPU shares nothing at all. A trust level may use its weakest allowed mechanism and every
stronger one; the API server refuses a weaker one at admission (``TRUST_RULES``), the operator's
configuration and policy refuse it too (``allowed_modes``). The less a tenant is trusted, the
stricter its Pod Security, its guard and its network (docs/threat-model.md, "The network").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gputenant.api.rules import Rule


class Trust(str, Enum):
    """How far the organisation trusts the tenant; decides how GPUs may be shared."""

    TRUSTED = "Trusted"
    INTERNAL = "Internal"
    UNTRUSTED = "Untrusted"


class SharingMode(str, Enum):
    """GPU-sharing mechanism. ``Auto`` takes the operator's default for the tenant's trust."""

    AUTO = "Auto"
    TIME_SLICING = "TimeSlicing"
    HAMI = "HAMi"
    MIG = "MIG"
    EXCLUSIVE = "Exclusive"


BY_STRENGTH: tuple[SharingMode, ...] = (
    SharingMode.TIME_SLICING,
    SharingMode.HAMI,
    SharingMode.MIG,
    SharingMode.EXCLUSIVE,
)
"""Weakest isolation first; Auto falls back along this order when its mechanism has no pool."""



@dataclass(frozen=True)
class TrustProfile:
    """What one trust level gets. ``rank`` orders the levels by the isolation they need (0: the
    least); moving a tenant to a lower rank weakens its isolation."""

    trust: Trust
    rank: int
    weakest_allowed: SharingMode
    isolation_needed: str
    """What its weakest mechanism gives, for messages."""
    pod_security: str
    """The Pod Security Standard its host namespace and virtual cluster enforce."""
    strict_guard: bool
    """The tenant's own pod variables may not switch off or change the GPU isolation it was given."""
    internet_egress: bool
    """Its pods reach addresses outside the cluster by default (config tenantEgress may change it)."""


PROFILES: dict[Trust, TrustProfile] = {profile.trust: profile for profile in (
    TrustProfile(Trust.TRUSTED, rank=0, weakest_allowed=SharingMode.TIME_SLICING, isolation_needed="no isolation",
                 pod_security="baseline", strict_guard=False, internet_egress=True),
    TrustProfile(Trust.INTERNAL, rank=1, weakest_allowed=SharingMode.HAMI, isolation_needed="memory isolation",
                 pod_security="baseline", strict_guard=True, internet_egress=True),
    TrustProfile(Trust.UNTRUSTED, rank=2, weakest_allowed=SharingMode.MIG, isolation_needed="hardware isolation",
                 pod_security="restricted", strict_guard=True, internet_egress=False),
)}
"""One row per trust level, least isolated first."""


def profile(trust: Trust) -> TrustProfile:
    return PROFILES[trust]


def weakens_isolation(before: Trust, after: Trust) -> bool:
    """Moving a tenant from `before` to `after` leaves it less isolated."""
    return PROFILES[after].rank < PROFILES[before].rank


def weakest_allowed(trust: Trust) -> SharingMode:
    """The weakest mechanism the trust level may use (the default of operator config trustModes)."""
    return PROFILES[trust].weakest_allowed


def allowed_modes(trust: Trust) -> tuple[SharingMode, ...]:
    """Mechanisms the trust level may use, weakest first."""
    return BY_STRENGTH[BY_STRENGTH.index(weakest_allowed(trust)) :]


def stronger_or_equal(mode: SharingMode) -> tuple[SharingMode, ...]:
    """The mechanism itself, then every stronger one: Auto's fallback candidates."""
    return BY_STRENGTH[BY_STRENGTH.index(mode) :]


def names(modes: tuple[SharingMode, ...]) -> str:
    """``MIG or Exclusive``: for messages."""
    values = [mode.value for mode in modes]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def _trust_rule(trust: Trust) -> Rule:
    """The GpuTenantSpec rule that refuses the mechanisms weaker than ``trust`` allows."""
    admitted = (SharingMode.AUTO, *allowed_modes(trust))
    refused = BY_STRENGTH[: BY_STRENGTH.index(weakest_allowed(trust))]
    listed = ", ".join(f"'{mode.value}'" for mode in admitted)
    return Rule(
        f"self.trust != '{trust.value}' || self.sharing.mode in [{listed}]",
        f"{trust.value} tenants need {PROFILES[trust].isolation_needed}: set sharing.mode to {names(admitted)}, "
        f"not {names(refused)}",
        lambda spec: spec.trust != trust or spec.sharing.mode in admitted,
        field_path=".sharing.mode",
    )


TRUST_RULES: tuple[Rule, ...] = tuple(
    _trust_rule(trust) for trust in reversed(Trust) if allowed_modes(trust) != BY_STRENGTH
)
"""One CEL rule per trust level that refuses some mechanism (Trusted may use any), least trusted first."""
