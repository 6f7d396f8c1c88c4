"""The guard's decisions and their kopf wiring: the IO around ``rules`` and ``mutation``.

Every pod review is answered from memory: a kopf index keeps the GpuTenants by the host namespace
the operator recorded for each (``status.namespace``, or the one the configuration names before the
first status), and specs and policy decisions are cached per tenant uid and generation, so a pod
review makes no API call. A namespace's own labels never name its tenant: they only route pods to
the guard, and a namespace labelled as a tenant's that is not that tenant's host namespace has its
pods refused. Pod reviews are served by ``pod_reviews`` straight from that index, without kopf's
handler machinery; GpuTenant reviews are rare, go through kopf, and read the tenant's GPU pods from
the API instead of watching every pod of the cluster. ``register(registry, config, client)`` adds
the index and the GpuTenant handler to a kopf registry; ``standalone.GuardThread`` serves them on an
event loop of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from pydantic import ValidationError

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.api.hub import ConversionError, GpuTenantSpec, spec_from_stored
from gputenant.config.models import OperatorConfig
from gputenant.guard.configuration import VALIDATE_TENANT
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.pods import pod_summary, requests_gpus
from gputenant.guard.rules import rejection_message, validate_pod
from gputenant.guard.tenant_admission import tenant_api_problems
from gputenant.guard.tenant_checks import check_tenant_change, judges_spec
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.policy.decision import Decision

log = logging.getLogger(__name__)

TENANTS_INDEX = "gputenant_guard_tenants"
"""GpuTenants by host namespace."""
DENIED = 403
NOT_READY = 503
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
CLUSTER_ADMINS = "system:masters"
"""Members pass every authorization check; no tenant identity is one (e.g. a platform controller
run with an admin certificate, as the local plane runs KAI)."""
NO_RULE = "none"
"""The rule id reported for a pod no rule refuses."""


@dataclass
class TenantView:
    """What the guard keeps of a GpuTenant: enough to decide, nothing more."""

    name: str
    uid: str
    generation: int
    spec: dict
    namespace: str


@dataclass
class Guard:
    """The guard's state in one process. ``decisions`` holds one entry per live tenant uid."""

    config: OperatorConfig
    client: KubeClient
    decisions: dict[str, tuple[int, GpuTenantSpec, Decision]] = field(default_factory=dict)

    def decision(self, tenant: TenantView,
                 live_uids: Callable[[], set[str]] | None = None) -> tuple[GpuTenantSpec, Decision]:
        """The tenant's validated spec and policy decision, computed once per uid and generation: a
        tenant deleted and re-created under the same name is a new uid, judged by its own spec.
        `live_uids` (the index's tenants, asked only when an entry is computed, not on every review)
        lets a new entry drop those of deleted tenants."""
        cached = self.decisions.get(tenant.uid)
        if cached is None or cached[0] != tenant.generation:
            spec = spec_from_stored(tenant.spec)
            cached = (tenant.generation, spec, decide(tenant.name, spec, self.config))
            if live_uids is not None:
                live = live_uids()
                for uid in [uid for uid in self.decisions if uid not in live]:
                    del self.decisions[uid]
            self.decisions[tenant.uid] = cached
        return cached[1], cached[2]

    async def gpu_pods(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        """(name, GPU resources) of the unfinished GPU pods in a namespace."""
        pods = await self.client.list("v1", "Pod", namespace=namespace)
        return [(p["metadata"]["name"], pod_summary(p)) for p in pods
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and requests_gpus(p)]

    async def judge_tenant(self, name: str, body: dict, old: dict | None,
                           others: Callable[[], list[tuple[str, GpuTenantSpec, Decision]]]) -> tuple[list[str], list[str]]:
        """(refusals, warnings) for a GpuTenant CREATE or UPDATE; `others` gives every indexed tenant
        with its decision. Metadata-only updates are not judged (``tenant_checks.judges_spec``)."""
        if not judges_spec(body, old):
            return [], []
        refusals = await tenant_api_problems(self.client, self.config, name, body, old)
        try:
            spec = spec_from_stored(body.get("spec") or {})
        except (ValidationError, ConversionError):
            return refusals, []  # the operator reports an invalid spec in status; nothing cluster-wide to check
        old_spec = (old.get("spec") or {}) if old is not None else None
        pods = await self.gpu_pods(naming.host_namespace(name, self.config)) if old_spec is not None else []
        problems, advice = check_tenant_change(self.config, name, spec, old_spec, others(), pods)
        return [*refusals, *problems], advice

    def by_tenant(self, userinfo: Mapping[str, Any] | None, namespace: str) -> bool:
        """Whether a request comes from the tenant's side: its users and any ServiceAccount of a tenant
        namespace (the vCluster syncer), as opposed to the platform's controllers (``system:``
        users, ServiceAccounts elsewhere, e.g. KAI's, and members of ``system:masters``, which only a
        certificate from the cluster's CA grants and which bypasses authorization anyway)."""
        username = (userinfo or {}).get("username", "")
        if CLUSTER_ADMINS in ((userinfo or {}).get("groups") or ()):
            return False
        if username.startswith(SERVICE_ACCOUNT_PREFIX):
            account_namespace = username.removeprefix(SERVICE_ACCOUNT_PREFIX).split(":", 1)[0]
            return account_namespace == namespace or account_namespace.startswith(self.config.namespace_prefix)
        return not username.startswith("system:")

    def pod_patch(self, pod: dict, tenants: kopf.Index, *, operation: str, subresource: str | None,
                  old: dict | None) -> list[dict]:
        """JSON-patch operations for a tenant pod (``mutation.mutate_pod``); `tenants` is the index.
        A pod of a tenant with an invalid spec gets none: validation refuses it with the reason."""
        tenant = tenant_of_namespace(pod["metadata"]["namespace"], tenants)
        try:
            _, decision = self.tenant_decision(tenant, tenants)
        except ValidationError:
            return []
        return mutate_pod(pod, tenant.name, decision, operation=operation, subresource=subresource, old=old,
                          cpu_pool=self.config.cpu_pool)

    def pod_refusal(self, pod: dict, userinfo: Mapping[str, Any] | None, tenants: kopf.Index, *, operation: str,
                    old: dict | None) -> tuple[str, str | None]:
        """(the first refusing rule's id or ``NO_RULE``, the message to refuse the pod with or None).
        Raises ``kopf.AdmissionError`` for a namespace of no tenant or a tenant with an invalid spec."""
        namespace = pod["metadata"]["namespace"]
        tenant = tenant_of_namespace(namespace, tenants)
        try:
            spec, decision = self.tenant_decision(tenant, tenants)
        except ValidationError as error:
            raise kopf.AdmissionError(f"tenant {tenant.name} has an invalid spec, so its pods are refused: "
                                      f"{error.errors()[0]['msg']}", code=DENIED) from error
        violations = validate_pod(pod, tenant.name, spec.trust, decision, operation=operation, old=old,
                                  config=self.config, by_tenant=self.by_tenant(userinfo, namespace))
        if not violations:
            return NO_RULE, None
        return violations[0].rule, rejection_message(violations, tenant.name, spec.trust, decision)

    def tenant_decision(self, tenant: TenantView, tenants: kopf.Index) -> tuple[GpuTenantSpec, Decision]:
        """``decision`` with the index's live tenants."""
        return self.decision(tenant, lambda: {view.uid for view in _values(tenants)})


def _values(index: Any) -> list[Any]:
    return [value for key in list(index) for value in index[key]]


def tenant_of_namespace(namespace: str, tenants: kopf.Index) -> TenantView:
    """The tenant whose recorded host namespace this is. The webhook configuration sends only
    namespaces labelled as a tenant's, so one no tenant records is refused (fail closed)."""
    found = list(tenants[namespace]) if namespace in tenants else []
    if len(found) == 1:
        return found[0]
    if found:
        raise kopf.AdmissionError(f"namespace {namespace} is recorded as the host namespace of several tenants "
                                  f"({', '.join(sorted(t.name for t in found))}); pods here are refused",
                                  code=DENIED)
    raise kopf.AdmissionError(f"namespace {namespace} is labelled {naming.TENANT_LABEL} but is not the host namespace "
                              "of any GpuTenant the admission guard knows; pods here are refused (if the tenant was "
                              "just created, retry in a few seconds)", code=NOT_READY)


def _other_tenants(guard: Guard, tenants: kopf.Index) -> list[tuple[str, GpuTenantSpec, Decision]]:
    """Every indexed tenant with its decision, for the pool capacity check; invalid ones are skipped
    (the operator reports them in their own status)."""
    others = []
    for view in _values(tenants):
        try:
            others.append((view.name, *guard.tenant_decision(view, tenants)))
        except ValidationError:
            continue
    return others


def register(registry: kopf.OperatorRegistry, config: OperatorConfig, client: KubeClient) -> Guard:
    """Add the guard's index and GpuTenant admission handler to `registry`; returns the guard's
    state, whose pod decisions ``pod_reviews`` serves. `client` is used on GpuTenant reviews only (the
    tenant's pods, its namespace and Queue, other tenants' queues); pod reviews decide and patch
    without side effects (a gang's PodGroup: ``guard.gang_groups``).

    The index is a coroutine: kopf runs plain functions in a thread pool, and on a busy machine the
    thread hand-offs cost more than the work."""
    guard = Guard(config, client)

    @kopf.index(GROUP, VERSION, PLURAL, id=TENANTS_INDEX, registry=registry)
    async def tenants(name: str, uid: str, body: kopf.Body, status: kopf.Status, **_: Any) -> dict:
        namespace = dict(status or {}).get("namespace") or naming.host_namespace(name, config)
        return {namespace: TenantView(name=name, uid=uid, generation=body["metadata"].get("generation", 0),
                                      spec=dict(body.get("spec") or {}), namespace=namespace)}

    @kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_TENANT, registry=registry, operations=["CREATE", "UPDATE"])
    async def validate_tenant(name: str, body: kopf.Body, warnings: list[str], old: kopf.Body | None = None,
                        **kwargs: Any) -> None:
        index = kwargs[TENANTS_INDEX]
        problems, advice = await guard.judge_tenant(name, dict(body), dict(old) if old else None,
                                                    lambda: _other_tenants(guard, index))
        warnings.extend(advice)
        if problems:
            raise kopf.AdmissionError("; ".join(problems), code=DENIED)

    return guard
