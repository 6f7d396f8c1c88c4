"""The host namespace, and the operator's own RoleBinding in it before anything else is written."""

from __future__ import annotations

import asyncio
import time

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.kube import holds
from gputenant.kube.applier import object_key
from gputenant.reconcile.context import Pass
from gputenant.reconcile.ownership import adopt
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.steps.objects import apply_objects, not_applied

CONDITION = reasons.NAMESPACE_READY
KINDS = frozenset({"Namespace"})


async def ensure(run: Pass) -> bool:
    objects = run.plan.rendered.get(CONDITION) or []
    if not objects:
        run.set(CONDITION, False, *not_applied(CONDITION, run.plan.decision))
        return True
    if run.never_reconciled:
        # A new tenant's namespace is written without a read: the apply's answer (201 or 200) says
        # whether it was there, and the next pass reads it as any other.
        for namespace in objects:
            run.snapshot.fetched(namespace, None)
    await apply_objects(run, CONDITION, objects)
    await ensure_operator_access(run)
    return True


def operator_access_binding(config: OperatorConfig, host_namespace: str) -> dict | None:
    """The RoleBinding that gives the operator's ServiceAccount `config.tenant_namespace_cluster_role`
    in one host namespace (its only namespaced rights there, with the Helm chart's RBAC); None when
    the config names no such role (an operator with cluster-wide rights)."""
    if not config.tenant_namespace_cluster_role:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": naming.OPERATOR_ACCESS_BINDING_NAME, "namespace": host_namespace,
                     "labels": {naming.COMPONENT_LABEL: naming.OPERATOR_ACCESS_COMPONENT}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": config.tenant_namespace_cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": config.operator_service_account,
                      "namespace": config.operator_namespace}],
    }


async def ensure_operator_access(run: Pass) -> None:
    """Read with GET: the operator may lack a namespaced LIST of RoleBindings there until this binding
    is in force (the chart's drift watch grants a cluster-wide one, but only when drift.watch is on).
    Not read in a namespace this pass created: it cannot be there yet. Once per tenant and process the binding is
    also seen in force, even when it was there already: a pass that wrote it and failed before the
    API server applied it (a transient error, under load) left the next pass to write in that
    namespace refused (a 403 seen once in CI, QuotaReady on a brand-new tenant)."""
    binding = operator_access_binding(run.config, run.host_namespace)
    if binding is None:
        return
    binding = adopt(binding, run.body, run.host_namespace)
    metadata = binding["metadata"]
    live = None if run.snapshot.created(metadata["namespace"]) else \
        await run.client.get(binding["apiVersion"], binding["kind"], metadata["name"], metadata["namespace"])
    memory = run.services.memory
    if not holds(binding, live):
        await run.client.apply(binding)
        run.applier.result.applied.append(object_key(binding))
    elif memory.access_confirmed(run.uid):
        return
    await wait_until_granted(run)
    memory.confirm_access(run.uid)


ACCESS_WAIT_SECONDS = 10.0


def access_review(host_namespace: str) -> dict:
    """The SelfSubjectAccessReview that says whether the operator's RoleBinding is in force in
    `host_namespace`: `patch resourcequotas`, the quota step's first write. Only that binding grants
    it; `list` would not do, as the chart's cluster-wide role grants list and watch on
    ResourceQuotas for drift repair, so a list review is allowed before the binding is in force."""
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
            "spec": {"resourceAttributes": {"namespace": host_namespace, "verb": "patch",
                                            "resource": "resourcequotas"}}}


async def wait_until_granted(run: Pass) -> None:
    """The API server's RBAC authorizer learns of a new RoleBinding from its own watch, a moment
    after the write: until then the next step's write is refused (403). Ask the API server (a
    SelfSubjectAccessReview, which every user may create) until the binding is in force; if it is
    not within ACCESS_WAIT_SECONDS, retry the pass later rather than report a refusal."""
    review = access_review(run.host_namespace)
    deadline = time.monotonic() + ACCESS_WAIT_SECONDS
    while not ((await run.client.create(review)).get("status") or {}).get("allowed"):
        if time.monotonic() > deadline:
            raise StepError(reasons.WAITING_FOR_ACCESS,
                            f"the operator's RoleBinding {naming.OPERATOR_ACCESS_BINDING_NAME} in {run.host_namespace} "
                            f"is written but not in force after {ACCESS_WAIT_SECONDS:g} s; retrying",
                            transient=True)
        await asyncio.sleep(0.1)
