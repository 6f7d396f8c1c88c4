"""What every sharing mechanism provides (`Mechanism`), and the parts they share: what one pod may
ask for (`PodRules`), what a mechanism grants on a pool (`Grant`), what a pool promises one pod
(`Promise`), and the arithmetic of whole units. Pure: no IO.

A mechanism is one module of this package and one row of `registry.MECHANISMS`; the policy, the
admission guard, the attestation and the docs ask the registry, never compare modes themselves.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import ClassVar

from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec
from gputenant.api.trust import SharingMode
from gputenant.config.pools import Pool, PoolMode

WHOLE_GPU = "nvidia.com/gpu"


class Refused(Exception):
    """Control flow inside the policy only: decide() turns it into an impossible Decision."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


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
class Grant:
    """What one mechanism grants on one pool, before the policy wraps it into a Decision."""

    quota: dict[str, str]
    queue_quota: Fraction
    queue_limit: Fraction
    pod_rules: PodRules
    summary: str
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Promise:
    """What one pod of the pool must see, and how strictly (the canary attests it)."""

    pool: str
    mode: str
    devices: int
    memory_mib: int
    """Total memory of the one device the pod gets: the GPU, the MIG slice or the HAMi cap."""
    memory_floor: float
    """Below this share of `memory_mib` the reading is wrong too (a smaller slice, a wrong GPU)."""
    resists_evasion: bool
    """True where isolation is outside the tenant's process (MIG, whole GPUs): a variable the
    program changes must not widen access. HAMi and time-slicing promise no such thing
    (docs/trust-levels.md), so there it is measured and reported, not failed."""
    resources: dict[str, str]
    description: str
    annotations: dict[str, str] = field(default_factory=dict)
    """How the pod asks for its GPU where no resource does (a KAI GPU fraction)."""
    capped: bool = True
    """Whether allocating past `memory_mib` must be refused. Time-slicing promises no cap, and its
    memory is its neighbours' too: the canary allocates nothing there, so it never starves them."""
    compute_percent: int | None = None
    """The share of the GPU's SMs the pod may use (HAMi-core's ``CUDA_DEVICE_SM_LIMIT``); None: no compute
    cap is promised (MIG slices and whole GPUs are sized by hardware, time-slices by turn-taking)."""


class Mechanism(ABC):
    """One GPU-sharing mechanism: what it grants and in which units, which spec and pool block
    parameterise it, what the guard lets a pod ask for, and what its pools promise one pod."""

    mode: ClassVar[SharingMode]
    pool_mode: ClassVar[PoolMode]
    unit: ClassVar[str]
    """The unit it grants in, plural (docs/units.md)."""
    isolation: ClassVar[str]
    """What it isolates between tenants, in a few words, for docs and messages."""
    spec_block: ClassVar[tuple[str, str] | None] = None
    """Its parameter block in spec.sharing: (wire name, attribute); None when it has none."""
    profile_resource_prefix: ClassVar[str | None] = None
    """Resources of this prefix name one of the mechanism's own profiles (MIG's ``nvidia.com/mig-``):
    a pod asking for an ungranted one is told so by the guard's profile rule, not as a foreign resource."""
    per_container_why: ClassVar[str] = ""
    """Why a container may hold at most `PodRules.max_per_container`, appended to the guard's refusal."""
    caps_in_process: ClassVar[bool] = False
    """The guard loads caps into each pod's processes (HAMi-core); the canary is capped the same way."""

    @abstractmethod
    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
        """The tenant's grant on `pool` in the mechanism's units; raises Refused when it cannot be granted."""

    @abstractmethod
    def promise(self, pool: Pool) -> Promise:
        """What one pod holding one unit of the pool's GPU resource must see."""

    def misfit(self, spec: GpuTenantSpec, pool: Pool) -> Refused | None:
        """Why `pool` cannot serve the mechanism's parameters in `spec`; None when it can."""
        return None

    def node_labels(self, pool: Pool) -> dict[str, str]:
        """Labels every node of the pool carries so the GPU Operator sets the mechanism up there."""
        return {}

    def device_plugin_config(self, pool: Pool) -> dict | None:
        """The pool's NVIDIA device-plugin config file; None: the default config serves it."""
        return None

    def whole_resource_share(self, pool: Pool, amount: Decimal) -> Decimal:
        """Physical GPUs held by `amount` of ``nvidia.com/gpu`` (or its ``.shared`` name) on the pool."""
        return amount


def exact(value: float) -> Fraction:
    """The decimal the user wrote (0.1 is 1/10, not the binary float near it)."""
    return Fraction(str(value))


def whole_units(value: float, units_per_gpu: Fraction | int, field_name: str, mechanism: str, unit: str) -> int:
    """``value`` GPUs in the mechanism's units, which must come out whole.

    Whole when the written decimal times units_per_gpu is an integer, or when the value is the float
    closest to k/units_per_gpu (so 3/7 of a GPU, 0.42857142857142855, is 3 one-seventh instances).
    """
    scaled = exact(value) * units_per_gpu
    nearest = round(scaled)
    if scaled.denominator == 1 or float(Fraction(nearest) / units_per_gpu) == value:
        return nearest
    below = math.floor(scaled)
    raise Refused(
        reasons.FRACTION_NOT_GRANTABLE,
        f"{field_name} {value} is {show(scaled)} {unit}; {mechanism} grants only whole {unit} "
        f"({show(Fraction(units_per_gpu))} per GPU): set {field_name} to {_gpus_for(below, units_per_gpu)} "
        f"({below} {unit}) or {_gpus_for(below + 1, units_per_gpu)} ({below + 1} {unit})",
    )


def _gpus_for(units: int, units_per_gpu: Fraction | int) -> str:
    """The shortest float that means ``units`` of the mechanism, as a tenant would write it."""
    return repr(float(Fraction(units) / units_per_gpu)).removesuffix(".0")


def show(value: Fraction) -> str:
    """A Fraction for messages: ``8``, ``0.5`` or ``3.5``; repeating decimals as their float."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))
