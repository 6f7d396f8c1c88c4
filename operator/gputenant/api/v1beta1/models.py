"""GpuTenant v1beta1: v1alpha1 with what it got wrong fixed (docs/api-versions.md lists each change).

Only the models that changed are defined here; every other block is v1alpha1's, so both versions
say the same thing about it and ``crds/tenant.yaml`` carries one schema per version.

- ``sharing.hami.memoryMiB`` (an integer with its unit in its name) is ``sharing.hami.memory``, a
  Kubernetes quantity such as ``10Gi``, as every other memory field of the spec.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import Field

from gputenant.api.group import GROUP, V1BETA1
from gputenant.api.rules import value_rule
from gputenant.api.types import ApiModel
from gputenant.api.v1alpha1 import models as v1alpha1
from gputenant.quantities import parse_quantity

MEBIBYTE = 1 << 20
SMALLEST_SHARE_MEMORY = "128Mi"
LARGEST_SHARE_MEMORY = "1Ti"


SHARE_MEMORY_PATTERN = r"^[1-9][0-9]{0,9}(Mi|Gi|Ti)$"
"""A whole number of MiB, GiB or TiB: always a whole number of MiB, so v1alpha1 can hold it."""


def is_share_memory(text: str) -> bool:
    """Twin of the pattern and CEL rule of ``ShareMemory``."""
    value = parse_quantity(text) if isinstance(text, str) and re.match(SHARE_MEMORY_PATTERN, text) else None
    low, high = parse_quantity(SMALLEST_SHARE_MEMORY), parse_quantity(LARGEST_SHARE_MEMORY)
    return value is not None and low is not None and high is not None and low <= value <= high


ShareMemory = Annotated[
    str,
    Field(max_length=16, pattern=SHARE_MEMORY_PATTERN),
    *value_rule(
        f"isQuantity(self) && quantity(self).compareTo(quantity('{SMALLEST_SHARE_MEMORY}')) >= 0 "
        f"&& quantity(self).compareTo(quantity('{LARGEST_SHARE_MEMORY}')) <= 0",
        f"must be between {SMALLEST_SHARE_MEMORY} and {LARGEST_SHARE_MEMORY}",
        is_share_memory,
    ),
]
"""GPU memory of one HAMi share: a whole number with the unit Mi, Gi or Ti, such as 10Gi."""


def mebibytes(text: str) -> int:
    """The whole MiB of a ``ShareMemory`` (validated first, so exact)."""
    value = parse_quantity(text)
    if value is None or not is_share_memory(text):
        raise ValueError(f"{text!r} is not a whole number of Mi, Gi or Ti between {SMALLEST_SHARE_MEMORY} and "
                         f"{LARGEST_SHARE_MEMORY}")
    return int(value / Decimal(MEBIBYTE))


class HamiSpec(ApiModel):
    """Parameters of HAMi-mode shares: KAI GPU fractions (pod annotation ``gpu-fraction``, docs/units.md)."""

    memory: ShareMemory | None = Field(
        default=None,
        description=(
            "GPU memory per share, a whole number of Mi, Gi or Ti such as 10Gi. A share's memory is its portion of the GPU "
            "(the pool's gpuMemoryMiB times corePercent / 100, rounded down), so this may only restate that number. "
            "Unset: that portion."
        ),
    )
    core_percent: int = v1alpha1.HamiSpec.model_fields["core_percent"]  # type: ignore[assignment]


class SharingSpec(v1alpha1.SharingSpec):
    """How the tenant's GPUs are shared; weaker isolation than the trust allows is rejected."""

    hami: HamiSpec | None = Field(default=None, description="Parameters for HAMi.")  # type: ignore[assignment]


class GpuTenantSpec(v1alpha1.GpuTenantSpec):
    """Desired state of a tenant: who it is, how far it is trusted, what it may use."""

    sharing: SharingSpec = Field(
        default_factory=SharingSpec, description="GPU-sharing mechanism and its parameters."
    )


class GpuTenant(v1alpha1.GpuTenant):
    """A GpuTenant object as a v1beta1 client reads and writes it."""

    api_version: str = Field(default=f"{GROUP}/{V1BETA1}", alias="apiVersion")
    spec: GpuTenantSpec


__all__ = ["LARGEST_SHARE_MEMORY", "MEBIBYTE", "SHARE_MEMORY_PATTERN", "SMALLEST_SHARE_MEMORY", "GpuTenant", "GpuTenantSpec", "HamiSpec",
           "ShareMemory", "SharingSpec", "is_share_memory", "mebibytes"]
