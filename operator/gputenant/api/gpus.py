"""GPU models the operator knows, and the MIG profiles each one offers.

Source: NVIDIA MIG User Guide, "Supported MIG Profiles", cross-checked with the GPU Operator's
``default-mig-parted-config`` (see research notes gpu-sharing.md §3). Media-extension profiles
(``+me``) are left out: at most one fits per GPU, tenants have no use for the media engines, and
their resource name (``nvidia.com/mig-1g.10gb+me``) has a ``+``, which no ResourceQuota key may have.
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
    """Most instances of this profile one GPU can hold; that many make one GPU equivalent."""

    @property
    def resource_name(self) -> str:
        """Extended resource the device plugin advertises under the mixed MIG strategy."""
        return f"nvidia.com/mig-{self.name}"


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
"""MIG-capable GPU model -> its profiles, smallest first. Other models (e.g. L4) have no MIG."""

BALANCED_LAYOUTS: dict[str, dict[str, int]] = {
    "A100-40GB": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    "A100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H100-80GB": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "H200-141GB": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    "A30-24GB": {"1g.6gb": 2, "2g.12gb": 1},
}
"""Instances per GPU under the ``all-balanced`` mig-parted config (same source)."""


def all_mig_profile_names() -> list[str]:
    """Every profile that exists on at least one supported GPU, ordered by slices then memory."""
    unique = {profile.name: profile for profiles in MIG_PROFILES.values() for profile in profiles}
    return sorted(unique, key=lambda name: (unique[name].compute_slices, unique[name].memory_gb))


def mig_profile(gpu_model: str, profile: str) -> MigProfile | None:
    """The profile on that GPU model; None when the model lacks it or has no MIG at all."""
    return next((p for p in MIG_PROFILES.get(gpu_model, ()) if p.name == profile), None)


def mig_layout(gpu_model: str, mig_config: str) -> dict[str, int] | None:
    """Instances per GPU of the mig-parted configs every MIG node has (``all-<profile>``, ``all-balanced``).

    None for custom configs and models without MIG: their layout is unknown to the policy.
    """
    if mig_config == "all-balanced":
        layout = BALANCED_LAYOUTS.get(gpu_model)
        return dict(layout) if layout else None
    profile = mig_profile(gpu_model, mig_config.removeprefix("all-")) if mig_config.startswith("all-") else None
    return {profile.name: profile.max_instances} if profile else None
