"""The guard's rule registry: what a rule is, what it judges and how it is registered.

Kept apart from the rules themselves (``guard.rules``) so the registry's machinery stays small;
``guard.rules`` registers every rule on import, and only its ``validate_pod`` judges a pod, so no
caller can judge with an empty registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from gputenant.api.trust import Trust, profile
from gputenant.config.models import GuardConfig
from gputenant.config.pools import CpuPool
from gputenant.guard.mutation import placement, tenant_queue
from gputenant.guard.pods import requests_gpus
from gputenant.policy.decision import Decision

ALL_TRUST = frozenset(Trust)
STRICT = frozenset(trust for trust in Trust if profile(trust).strict_guard)
"""Trust levels whose GPU isolation the tenant's own variables must not switch off (api/trust.py)."""


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``rule`` is its registry id (also in docs/admission-guard.md), ``message``
    says what is wrong and what to change."""

    rule: str
    message: str


@dataclass
class Review:
    """One pod under review, with everything a rule may need to judge it."""

    pod: dict
    tenant: str
    trust: Trust
    decision: Decision
    operation: str = "CREATE"
    old: dict | None = None
    settings: GuardConfig = field(default_factory=GuardConfig)
    pool_keys: frozenset[str] = frozenset()
    """Node label and taint keys of every configured pool: where the pools are told apart."""
    by_tenant: bool = True
    """Whether the request comes from the tenant's side (its syncer, its users) rather than from a
    platform controller (KAI writes its own keys onto pods it groups)."""
    cpu_pool: CpuPool = field(default_factory=CpuPool)
    """Where pods without GPUs run."""

    @cached_property
    def spec(self) -> dict:
        return self.pod.get("spec") or {}

    @cached_property
    def labels(self) -> dict:
        return (self.pod.get("metadata") or {}).get("labels") or {}

    @cached_property
    def annotations(self) -> dict:
        return (self.pod.get("metadata") or {}).get("annotations") or {}

    @cached_property
    def gpu_pod(self) -> bool:
        return requests_gpus(self.pod)

    @property
    def queue(self) -> str:
        return tenant_queue(self.tenant, self.decision)

    @property
    def rules(self):
        return self.decision.pod_rules if self.decision.possible else None

    @cached_property
    def placement(self) -> tuple[dict[str, str], list[dict]]:
        """(nodeSelector, tolerations) of the nodes this pod belongs on: its GPU pool or the CPU pool."""
        return placement(self.pod, self.decision, self.cpu_pool)

    @property
    def pool_selector(self) -> dict[str, str]:
        return self.placement[0]

    @property
    def mode(self) -> str:
        return self.decision.mode.value if self.decision.mode else "none"


Check = Callable[[Review], Iterable[str]]


@dataclass(frozen=True)
class GuardRule:
    id: str
    trust: frozenset[Trust]
    refuses: str
    """What the rule refuses, in one line: the docs' rule table is this text."""
    check: Check


RULES: dict[str, GuardRule] = {}


def rule(rule_id: str, refuses: str, trust: frozenset[Trust] = ALL_TRUST) -> Callable[[Check], Check]:
    """Register a check under `rule_id`; rules run (and report) in registration order."""
    def register(check: Check) -> Check:
        if rule_id in RULES:
            raise ValueError(f"guard rule {rule_id} is registered twice")
        RULES[rule_id] = GuardRule(rule_id, trust, refuses, check)
        return check
    return register
