"""Helpers several rule modules share: KAI's fraction-pod references and granted names."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from fractions import Fraction

from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.mutation import allows_fractions
from gputenant.guard.pods import asks_for_fraction
from gputenant.guard.registry import Review


def kai_prefix(review: Review) -> str | None:
    """The pod's KAI GPU-sharing ConfigMap prefix when KAI's references may hang on it: a fraction pod of a
    mode that allows fractions, carrying the prefix the guard's mutation gives it; None otherwise."""
    prefix = review.annotations.get(kai_sharing.CONFIGMAP_ANNOTATION)
    if prefix is None or not allows_fractions(review.decision) or not asks_for_fraction(review.pod):
        return None
    return prefix if prefix == kai_sharing.guard_prefix(review.pod) else None


def kai_container(key: str, index: int) -> bool:
    return key == "containers" and index == kai_sharing.FRACTION_CONTAINER


def granted_name(review: Review, field: str, granted: Iterable[str]) -> Iterator[str]:
    """A pod spec field naming a cluster object (a class) that the configuration must grant."""
    name = review.spec.get(field)
    if name and name not in granted:
        allowed = ", ".join(granted) or "none"
        yield f"{field} {name} is not granted to tenants (allowed: {allowed}); remove {field}"



def decimal(value: Fraction) -> str:
    return format(value.numerator / value.denominator, "g")



def kai_env(prefix: str | None, key: str, index: int, variable: dict) -> bool:
    return prefix is not None and kai_container(key, index) and kai_sharing.is_kai_env(variable, prefix)


def capped_container(review: Review, key: str, index: int) -> bool:
    """Whether this is the fraction container of a pod the guard caps with HAMi-core."""
    return kai_container(key, index) and hami_caps.pod_caps(review.pod, review.decision) is not None


def guard_cap(review: Review, key: str, index: int, item: dict, wanted: list[dict] | None = None) -> bool:
    """Whether `item` is one the guard's HAMi-core caps put into the capped fraction container of this pod:
    one of its cap variables (rule ``hami-caps`` checks their values), or with `wanted` exactly one of
    its mounts."""
    if not capped_container(review, key, index):
        return False
    if wanted is not None:
        return item in wanted
    return item.get("name") in hami_caps.CAP_VARIABLES
