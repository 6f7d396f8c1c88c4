"""Which sharing mechanisms each trust level may use, and their order of isolation strength.

Why (docs/trust-levels.md): time-slicing isolates nothing, HAMi caps memory and compute in user
space (best effort, bypassable from inside the pod), MIG partitions the GPU in hardware, and a
whole GPU shares nothing at all.
"""

from __future__ import annotations

from gputenant.api.v1alpha1 import SharingMode, Trust

BY_STRENGTH: tuple[SharingMode, ...] = (
    SharingMode.TIME_SLICING,
    SharingMode.HAMI,
    SharingMode.MIG,
    SharingMode.EXCLUSIVE,
)
"""Weakest isolation first; Auto falls back along this order when its mechanism has no pool."""

WEAKEST_ALLOWED: dict[Trust, SharingMode] = {
    Trust.TRUSTED: SharingMode.TIME_SLICING,
    Trust.INTERNAL: SharingMode.HAMI,
    Trust.UNTRUSTED: SharingMode.MIG,
}


def allowed_modes(trust: Trust) -> tuple[SharingMode, ...]:
    """Mechanisms the trust level may use, weakest first."""
    return BY_STRENGTH[BY_STRENGTH.index(WEAKEST_ALLOWED[trust]) :]


def stronger_or_equal(mode: SharingMode) -> tuple[SharingMode, ...]:
    """The mechanism itself, then every stronger one: Auto's fallback candidates."""
    return BY_STRENGTH[BY_STRENGTH.index(mode) :]


def names(modes: tuple[SharingMode, ...]) -> str:
    """``MIG or Exclusive``: for messages."""
    values = [mode.value for mode in modes]
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
