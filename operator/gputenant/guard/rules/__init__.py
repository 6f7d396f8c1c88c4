"""The admission guard's rules: a registry of small checks, each with an id, the trust levels it
applies to and the one-line summary the docs' rule table is written from.

vCluster syncs a tenant's pods into its host namespace unchanged, and a tenant is cluster-admin of
its virtual cluster, so every pod there is shaped by the tenant. Each rule is an allow-list: what a
pod of that trust may say, everything else refused with a message naming the field and the fix.
Rules run after mutation (``guard.mutation``). On UPDATE only what the update adds is refused:
a rule the old object already broke (a pod admitted under an older policy) does not block KAI's
or the kubelet's later writes.
"""

from __future__ import annotations

from gputenant.api.hub import Trust
from gputenant.config.models import GuardConfig, OperatorConfig
from gputenant.config.pools import CpuPool
from gputenant.guard.registry import ALL_TRUST, RULES, STRICT, Review, Violation
from gputenant.policy.decision import Decision

# Each module registers its rules on import; registration order is the order they run and report in.
# isort: off
from gputenant.guard.rules import identity, gpu, placement, isolation, hami, network, fields  # noqa: E402, F401
# isort: on

__all__ = ["RULES", "STRICT", "Violation", "pool_keys_of", "policy_summary", "rejection_message", "rule_table",
           "validate_pod"]


def _violations(review: Review) -> list[Violation]:
    return [Violation(r.id, message) for r in RULES.values() if review.trust in r.trust for message in r.check(review)]


def validate_pod(pod: dict, tenant_name: str, trust: Trust, decision: Decision, *, operation: str = "CREATE",
                 old: dict | None = None, config: OperatorConfig | None = None,
                 by_tenant: bool = True) -> list[Violation]:
    """Every rule the pod breaks under the tenant's policy; empty when it may be admitted. On UPDATE,
    only violations the old object did not already have."""
    settings = config.guard if config else GuardConfig()
    cpu_pool = config.cpu_pool if config else CpuPool()
    pool_keys = frozenset(pool_keys_of(config)) if config else frozenset(
        decision.pool.node_selector if decision.pool else ())
    review = Review(pod, tenant_name, trust, decision, operation, old, settings, pool_keys, by_tenant, cpu_pool)
    found = _violations(review)
    if operation == "CREATE" or old is None:
        return found
    before = set(_violations(Review(old, tenant_name, trust, decision, operation, old, settings, pool_keys,
                                    by_tenant, cpu_pool)))
    return [v for v in found if v not in before]


def pool_keys_of(config: OperatorConfig) -> set[str]:
    """Node label and taint keys of every GPU pool and of the CPU pool."""
    selectors = [pool.node_selector for pool in config.pools] + [config.cpu_pool.node_selector]
    tolerations = [pool.tolerations for pool in config.pools] + [config.cpu_pool.tolerations]
    return ({key for selector in selectors for key in selector}
            | {t.key for listed in tolerations for t in listed if t.key})


def policy_summary(tenant_name: str, trust: Trust, decision: Decision) -> str:
    """The tenant's policy in one phrase, appended to every rejection so the tenant sees why."""
    mode = decision.mode.value if decision.mode else "none"
    pool = decision.pool.name if decision.pool else "none"
    return f"tenant {tenant_name}: trust {trust.value}, sharing {mode} on pool {pool}"


def rejection_message(violations: list[Violation], tenant_name: str, trust: Trust, decision: Decision) -> str:
    """One message for the apiserver to return: every violation, then the tenant's policy."""
    rules = "; ".join(f"[{v.rule}] {v.message}" for v in violations)
    return f"{rules} ({policy_summary(tenant_name, trust, decision)})"



def rule_table() -> str:
    """The docs' rule table (docs/admission-guard.md), one row per registered rule, in order."""
    rows = ["| rule | refuses | trust |", "|---|---|---|"]
    for r in RULES.values():
        trust = "all" if r.trust == ALL_TRUST else ", ".join(t.value for t in Trust if t in r.trust)
        rows.append(f"| `{r.id}` | {r.refuses} | {trust} |")
    return "\n".join(rows)
