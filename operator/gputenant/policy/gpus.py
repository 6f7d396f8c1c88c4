"""GPU models the operator knows, and the MIG profiles each one offers.

Source: NVIDIA MIG User Guide, "Supported MIG Profiles", cross-checked with the GPU Operator's
``default-mig-parted-config`` (see research notes gpu-sharing.md §3). Media-extension profiles
(``+me``) are left out: at most one fits per GPU and tenants have no use for the media engines.
The API (``spec.sharing.mig.profile``) accepts exactly the profiles listed here, and the policy
checks that the chosen pool's GPU model has the profile.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigProfile:
    """One MIG instance size, e.g. ``3g.40gb``: 3 of 7 compute slices and 40 GB of memory."""

    name: str
    compute_slices: int
    """GPU compute slices (the ``<g>g`` part); KAI counts a MIG instance as its slices."""
    memory_gb: int
    max_instances: int
    """Most instances of this profile one GPU can hold."""


def _profiles(*rows: tuple[str, int]) -> tuple[MigProfile, ...]:
    """Build profiles from (name, max_instances); slices and memory are read from the name."""
    profiles = []
    for name, max_instances in rows:
        slices, memory = name.split(".")
        profiles.append(MigProfile(name, int(slices.removesuffix("g")), int(memory.removesuffix("gb")), max_instances))
    return tuple(profiles)


MIG_PROFILES: dict[str, tuple[MigProfile, ...]] = {
    "A100-40GB": _profiles(("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1)),
    "A100-80GB": _profiles(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1)),
    "H100-80GB": _profiles(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1)),
    "H200-141GB": _profiles(("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2), ("4g.71gb", 1), ("7g.141gb", 1)),
    "A30-24GB": _profiles(("1g.6gb", 4), ("2g.12gb", 2), ("4g.24gb", 1)),
}
"""MIG-capable GPU model -> its profiles, smallest first."""


def all_mig_profile_names() -> list[str]:
    """Every profile that exists on at least one supported GPU, ordered by slices then memory."""
    unique = {profile.name: profile for profiles in MIG_PROFILES.values() for profile in profiles}
    return sorted(unique, key=lambda name: (unique[name].compute_slices, unique[name].memory_gb))
