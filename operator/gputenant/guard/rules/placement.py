"""Rules on where a pod may run: only the tenant's pool (GPU pods) or the CPU pool (all others)."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard.registry import Review, rule
from gputenant.guard.rules.common import granted_name


@rule("node-selector", "a `nodeSelector` naming a pool key with another value than the tenant's pool (every pod)")
def _node_selector(review: Review) -> Iterator[str]:
    own = review.pool_selector
    for key, value in (review.spec.get("nodeSelector") or {}).items():
        if key in review.pool_keys | set(own) and own.get(key) != value:
            wanted = f"it must be {key}={own[key]}" if key in own else "the tenant has no pool there"
            yield f"nodeSelector {key}={value} leaves the tenant's pool; {wanted} (remove it)"


@rule("node-affinity", "node affinity on a pool key with values outside the tenant's pool, or `matchFields` "
      "(node names)")
def _node_affinity(review: Review) -> Iterator[str]:
    node_affinity = (review.spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    terms = list(required or []) + [p.get("preference") or {} for p in
                                    node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
    own = review.pool_selector
    for term in terms:
        if term.get("matchFields"):
            yield "node affinity matchFields picks nodes by name, past the tenant's pool (remove matchFields)"
        for expression in term.get("matchExpressions") or []:
            key = expression.get("key")
            if key not in review.pool_keys | set(own):
                continue
            values = set(expression.get("values") or [])
            if expression.get("operator") != "In" or key not in own or values != {own[key]}:
                yield (f"node affinity on {key} ({expression.get('operator')} {sorted(values)}) reaches other "
                       "pools' nodes; the guard sets the tenant's pool (remove the expression)")


@rule("toleration", "a toleration of every taint (no key), or of a pool taint with another value than the "
      "tenant's pool")
def _tolerations(review: Review) -> Iterator[str]:
    own = review.placement[1]
    for toleration in review.spec.get("tolerations") or []:
        key = toleration.get("key")
        if not key:
            yield "a toleration without key tolerates every taint, other pools' included (give it a key)"
        elif key in review.pool_keys and toleration not in own:
            yield (f"toleration of {key} ({toleration.get('operator', 'Equal')} {toleration.get('value', '')}) "
                   "reaches other pools' nodes; the guard adds the tenant's pool toleration (remove it)")


@rule("node-name", "`spec.nodeName` set at creation (bypasses the scheduler and the pool)")
def _node_name(review: Review) -> Iterator[str]:
    if review.operation == "CREATE" and review.spec.get("nodeName"):
        yield (f"spec.nodeName {review.spec['nodeName']} bypasses the scheduler and the tenant's pool "
               "(remove spec.nodeName)")


@rule("runtime-class", "a `runtimeClassName` not in the configuration's `guard.runtimeClassNames` (the nvidia "
      "runtime shows a container the GPUs its variables name)")
def _runtime_class(review: Review) -> Iterator[str]:
    yield from granted_name(review, "runtimeClassName", review.settings.runtime_class_names)



@rule("pod-affinity-namespace", "pod affinity or anti-affinity terms (required or preferred) with a "
      "`namespaceSelector`, or `namespaces` other than the pod's own (they select other tenants' pods)")
def _pod_affinity_namespace(review: Review) -> Iterator[str]:
    own = (review.pod.get("metadata") or {}).get("namespace")
    affinity = review.spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        for path, term in _pod_affinity_terms(affinity.get(kind) or {}):
            field = f"spec.affinity.{kind}.{path}"
            if term.get("namespaceSelector") is not None:
                yield (f"{field}.namespaceSelector selects pods in other namespaces, other tenants' included "
                       "(remove namespaceSelector: a term without it selects the pod's own namespace)")
            foreign = sorted(set(term.get("namespaces") or ()) - {own})
            if foreign:
                yield (f"{field}.namespaces names {', '.join(foreign)}, not the pod's own namespace {own}; pods may "
                       "only be placed relative to their tenant's pods (remove namespaces)")


def _pod_affinity_terms(affinity: dict) -> Iterator[tuple[str, dict]]:
    """(field path, PodAffinityTerm) of every required and preferred term."""
    for index, term in enumerate(affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
        yield f"requiredDuringSchedulingIgnoredDuringExecution[{index}]", term or {}
    for index, weighted in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        yield (f"preferredDuringSchedulingIgnoredDuringExecution[{index}].podAffinityTerm",
               (weighted or {}).get("podAffinityTerm") or {})
