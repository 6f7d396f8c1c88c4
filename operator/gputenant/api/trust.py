"""The trust -> sharing-mechanism matrix: the one table the policy and the CRD's CEL rule read.

Why (docs/trust-levels.md): time-slicing isolates nothing, HAMi caps memory and compute in user
space (best effort, bypassable from inside the pod), MIG partitions the GPU in hardware, and a
whole GPU shares nothing at all. A trust level may use its weakest allowed mechanism and every
stronger one; the API server refuses a weaker one at admission (``TRUST_RULES``), the operator's
configuration and policy refuse it too (``allowed_modes``).
"""

from __future__ import annotations

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

WEAKEST_ALLOWED: dict[Trust, tuple[SharingMode, str]] = {
    Trust.TRUSTED: (SharingMode.TIME_SLICING, "no isolation"),
    Trust.INTERNAL: (SharingMode.HAMI, "memory isolation"),
    Trust.UNTRUSTED: (SharingMode.MIG, "hardware isolation"),
}
"""The matrix: each trust level's weakest allowed mechanism, and the isolation that needs (for messages)."""


def weakest_allowed(trust: Trust) -> SharingMode:
    """The weakest mechanism the trust level may use (the default of operator config trustModes)."""
    return WEAKEST_ALLOWED[trust][0]


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
        f"{trust.value} tenants need {WEAKEST_ALLOWED[trust][1]}: set sharing.mode to {names(admitted)}, "
        f"not {names(refused)}",
        lambda spec: spec.trust != trust or spec.sharing.mode in admitted,
        field_path=".sharing.mode",
    )


TRUST_RULES: tuple[Rule, ...] = tuple(
    _trust_rule(trust) for trust in reversed(Trust) if allowed_modes(trust) != BY_STRENGTH
)
"""One CEL rule per trust level that refuses some mechanism (Trusted may use any), least trusted first."""
