"""Admission checks of the tenant API that need the cluster's state: the platform engineer's (or an
attacker's) GpuTenant may not aim at a namespace or Queue the operator did not create, may not put
its queue under another tenant's, and may not weaken its trust while its pods run.

The checks the API server can make alone live in the chart's ValidatingAdmissionPolicies
(charts/gpu-tenant-operator/templates/admission-policies.yaml): refusing the DELETE of a tenant with
spec.preventDeletion, system namespaces as host namespace, and identity keys rewritten through
pods/status. ``tenant_api_problems`` is what the GpuTenant webhook adds to them, besides
``parent_queue_problem`` (called from ``tenant_checks``).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError

from gputenant import GROUP, naming
from gputenant.api.hub import ConversionError, GpuTenantSpec, Trust, spec_from_stored
from gputenant.api.trust import weakens_isolation
from gputenant.config.models import OperatorConfig
from gputenant.guard import keys
from gputenant.kube import ApiError, KubeClient

ALLOW_TRUST_CHANGE_ANNOTATION = f"{GROUP}/allow-trust-change"
"""Set by the platform team to the new trust (e.g. "Trusted") to weaken a tenant's trust while its pods run."""
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "default")
QUEUE_API = ("scheduling.run.ai/v2", "Queue")
MAX_NAMED_PODS = 5

PROTECTED_POD_KEYS = tuple(dict.fromkeys((*keys.PROTECTED_LABELS, *keys.PROTECTED_ANNOTATIONS)))
PROTECTED_POD_KEY_PREFIXES = keys.RESERVED_PREFIXES
PROTECTED_POD_LABEL_VALUES = keys.KAI_LABEL_VALUES
"""Pod labels and annotations that carry identity (the tenant label), queue and grouping (KAI,
Run:ai), pool and GPU share (KAI fractions, HAMi, NVIDIA). A pods/status write may not change them:
the chart's pod-status-identity policy lists the same keys (operator/tests/test_chart_render.py)."""


def host_namespace_problem(name: str, config: OperatorConfig) -> str | None:
    """A refusal when the tenant's host namespace would be a system namespace or the operator's."""
    namespace = naming.host_namespace(name, config)
    if namespace not in (*SYSTEM_NAMESPACES, config.operator_namespace):
        return None
    return (f"[host-namespace] metadata.name: tenant {name} would live in namespace {namespace} (namespacePrefix "
            f"{config.namespace_prefix!r} + the name), which is a system namespace or the operator's; choose another name")


def adoption_problem(name: str, config: OperatorConfig, namespace: dict | None, queue: dict | None) -> str | None:
    """A refusal when a new tenant would take over a namespace or KAI Queue the operator did not
    create for a tenant of that name (and delete it on offboarding)."""
    foreign = [f"{kind} {obj['metadata']['name']}" for kind, obj in (("namespace", namespace), ("KAI Queue", queue))
               if obj is not None and not _made_for(obj, name)]
    if not foreign:
        return None
    return (f"[not-created-by-operator] metadata.name: tenant {name} would take over {' and '.join(foreign)}, which the "
            f"operator did not create for it (no {naming.MANAGED_BY_LABEL}={naming.MANAGED_BY} and "
            f"{naming.TENANT_LABEL}={name} labels); choose another name, or remove the existing object first")


def parent_queue_problem(name: str, spec: GpuTenantSpec, tenant_names: Iterable[str], config: OperatorConfig) -> str | None:
    """A refusal when gpu.parentQueue names the tenant's own queue, another tenant's, or one outside
    the config's parentQueues: a parent's quota is shared by its children, so that tenant's
    guarantee would be taken."""
    parent = spec.gpu.parent_queue
    if parent is None:
        return None
    tenant_queues = {naming.queue_name(other): other for other in tenant_names}
    if parent == naming.queue_name(name):
        why = "is the tenant's own queue"
    elif parent in tenant_queues:
        why = f"is the queue of tenant {tenant_queues[parent]}"
    elif config.parent_queues and parent not in config.parent_queue_names:
        why = "is not one of the platform's parent queues"
    else:
        return None
    allowed = ", ".join(queue.name for queue in config.parent_queues) or "a department queue of the platform team"
    return f"[parent-queue] spec.gpu.parentQueue {parent} {why}; name {allowed}, or leave gpu.parentQueue unset"


def trust_change_problem(name: str, before: Trust, after: Trust, annotations: dict[str, str],
                         running_pods: list[str], namespace: str) -> str | None:
    """A refusal when spec.trust moves to weaker isolation while the tenant's pods run, unless the
    platform team allowed exactly that trust with ALLOW_TRUST_CHANGE_ANNOTATION."""
    if not weakens_isolation(before, after) or not running_pods:
        return None
    if annotations.get(ALLOW_TRUST_CHANGE_ANNOTATION) == after.value:
        return None
    shown = ", ".join(sorted(running_pods)[:MAX_NAMED_PODS]) + (", ..." if len(running_pods) > MAX_NAMED_PODS else "")
    return (f"[trust-weakened] spec.trust {before.value} -> {after.value} weakens the isolation of tenant {name} while "
            f"{len(running_pods)} of its pods run in {namespace} ({shown}); stop them first, or the platform team "
            f"annotates the GpuTenant {ALLOW_TRUST_CHANGE_ANNOTATION}: \"{after.value}\" (docs/trust-levels.md)")


async def tenant_api_problems(client: KubeClient, config: OperatorConfig, name: str, body: dict,
                              old: dict | None) -> list[str]:
    """Refusals for a GpuTenant CREATE (``old`` None) or UPDATE that need the API (namespaces,
    Queues, pods). The parent queue is checked by ``tenant_checks.check_tenant_change``, which
    has the other tenants from the guard's index."""
    problems = [host_namespace_problem(name, config)]
    namespace = naming.host_namespace(name, config)
    if old is None and problems[0] is None:
        problems.append(adoption_problem(name, config, await client.get("v1", "Namespace", namespace),
                                         await _queue(client, naming.queue_name(name))))
    spec = _spec(body)
    before = _spec(old) if old is not None else None
    if spec is not None and before is not None and weakens_isolation(before.trust, spec.trust):
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        problems.append(trust_change_problem(name, before.trust, spec.trust, annotations,
                                             await running_workload_pods(client, name, namespace), namespace))
    return [problem for problem in problems if problem]


async def running_workload_pods(client: KubeClient, name: str, namespace: str) -> list[str]:
    """Names of the unfinished pods in the host namespace, the vCluster control plane excepted."""
    control_plane = naming.vcluster_pod_labels(name)
    return [pod["metadata"]["name"] for pod in await client.list("v1", "Pod", namespace=namespace)
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not control_plane.items() <= (pod["metadata"].get("labels") or {}).items()]


def _made_for(obj: dict, name: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get(naming.MANAGED_BY_LABEL) == naming.MANAGED_BY and labels.get(naming.TENANT_LABEL) == name


def _spec(body: dict | None) -> GpuTenantSpec | None:
    try:
        return spec_from_stored((body or {}).get("spec") or {})
    except (ValidationError, ConversionError):
        return None


async def _queue(client: KubeClient, queue_name: str) -> dict | None:
    """The KAI Queue, or None where it or KAI's Queue CRD does not exist."""
    try:
        return await client.get(*QUEUE_API, queue_name)
    except ApiError as error:
        if error.not_found:
            return None
        raise
