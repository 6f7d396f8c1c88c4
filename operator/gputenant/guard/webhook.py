"""kopf admission handlers of the guard: the IO around ``rules``.

Every pod review is answered from memory: kopf indexes keep the tenant namespaces and the
GpuTenants, and specs and policy decisions are cached per tenant generation, so a pod review makes
no API call. GpuTenant reviews are rare and read the tenant's GPU pods from the API instead of
watching every pod of the cluster. ``register(registry, config, client)`` adds the handlers and
indexes to a kopf registry; the operator's ``handlers.py`` calls it and sets
``settings.admission.server`` to a ``GuardServer``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import jsonpatch
import kopf
from pydantic import ValidationError

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.api.v1alpha1 import GpuTenantSpec
from gputenant.config.models import OperatorConfig
from gputenant.guard.configuration import MUTATE_POD, VALIDATE_POD, VALIDATE_TENANT
from gputenant.guard.rules import mutate_pod, pod_summary, rejection_message, requests_gpus, validate_pod
from gputenant.guard.tenant_checks import check_tenant_change
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.policy.decision import Decision

log = logging.getLogger(__name__)

NAMESPACES_INDEX = "gputenant_guard_namespaces"
TENANTS_INDEX = "gputenant_guard_tenants"
DENIED = 403
NOT_READY = 503


@dataclass
class TenantView:
    """What the guard keeps of a GpuTenant: enough to decide, nothing more."""

    name: str
    generation: int
    spec: dict


@dataclass
class Guard:
    """The guard's state in one operator process."""

    config: OperatorConfig
    client: KubeClient
    decisions: dict[str, tuple[int, GpuTenantSpec, Decision]] = field(default_factory=dict)

    def decision(self, tenant: TenantView) -> tuple[GpuTenantSpec, Decision]:
        """The tenant's validated spec and policy decision, computed once per generation."""
        cached = self.decisions.get(tenant.name)
        if cached is None or cached[0] != tenant.generation:
            spec = GpuTenantSpec.model_validate(tenant.spec)
            cached = (tenant.generation, spec, decide(tenant.name, spec, self.config))
            self.decisions[tenant.name] = cached
        return cached[1], cached[2]

    async def gpu_pods(self, namespace: str) -> list[tuple[str, dict[str, str]]]:
        """(name, GPU resources) of the unfinished GPU pods in a namespace."""
        pods = await self.client.list("v1", "Pod", namespace=namespace)
        return [(p["metadata"]["name"], pod_summary(p)) for p in pods
                if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and requests_gpus(p)]


def _only(store: Any, key: str) -> Optional[Any]:
    """The single value an index holds for `key` (None if absent)."""
    if store is None or key not in store:
        return None
    values = list(store[key])
    return values[-1] if values else None


def _values(index: Any) -> list[Any]:
    return [value for key in list(index) for value in index[key]]


def _tenant_of_namespace(namespace: str, indices: dict) -> TenantView:
    """The tenant a pod's namespace belongs to. The webhook configuration only sends tenant
    namespaces, so a namespace or tenant the indexes have not seen yet is refused (fail closed)."""
    tenant_name = _only(indices[NAMESPACES_INDEX], namespace)
    if tenant_name is None:
        raise kopf.AdmissionError(f"namespace {namespace} is labelled {naming.TENANT_LABEL} but the admission guard "
                                  "has not seen it yet; retry in a few seconds", code=NOT_READY)
    tenant = _only(indices[TENANTS_INDEX], tenant_name)
    if tenant is None:
        raise kopf.AdmissionError(f"namespace {namespace} belongs to tenant {tenant_name}, which does not exist "
                                  "(or the guard has not seen it yet); pods here are refused until it does",
                                  code=NOT_READY)
    return tenant


def register(registry: kopf.OperatorRegistry, config: OperatorConfig, client: KubeClient) -> Guard:
    """Add the guard's indexes and admission handlers to `registry`; returns the guard's state.
    `client` is only used on GpuTenant reviews (to list the tenant's GPU pods)."""
    guard = Guard(config, client)

    @kopf.index("", "v1", "namespaces", id=NAMESPACES_INDEX, registry=registry,
                labels={naming.TENANT_LABEL: kopf.PRESENT})
    def tenant_namespaces(name: str, labels: dict, **_: Any) -> dict:
        return {name: labels[naming.TENANT_LABEL]}

    @kopf.index(GROUP, VERSION, PLURAL, id=TENANTS_INDEX, registry=registry)
    def tenants(name: str, body: kopf.Body, **_: Any) -> dict:
        return {name: TenantView(name=name, generation=body["metadata"].get("generation", 0),
                                 spec=dict(body.get("spec") or {}))}

    @kopf.on.mutate("", "v1", "pods", id=MUTATE_POD, registry=registry, operations=["CREATE", "UPDATE"])
    def mutate(body: kopf.Body, patch: kopf.Patch, operation: str, **kwargs: Any) -> None:
        pod = dict(body)
        tenant = _tenant_of_namespace(pod["metadata"]["namespace"], kwargs)
        try:
            _, decision = guard.decision(tenant)
        except ValidationError:
            return  # validate() refuses the pod with the reason
        operations = mutate_pod(pod, tenant.name, decision, operation=operation)
        if operations:
            patch.fns.append(lambda document: jsonpatch.apply_patch(document, operations, in_place=True))

    @kopf.on.validate("", "v1", "pods", id=VALIDATE_POD, registry=registry, subresource="*",
                      operations=["CREATE", "UPDATE"])
    def validate(body: kopf.Body, operation: str, **kwargs: Any) -> None:
        pod = dict(body)
        tenant = _tenant_of_namespace(pod["metadata"]["namespace"], kwargs)
        try:
            spec, decision = guard.decision(tenant)
        except ValidationError as error:
            raise kopf.AdmissionError(f"tenant {tenant.name} has an invalid spec, so its pods are refused: "
                                      f"{error.errors()[0]['msg']}", code=DENIED)
        violations = validate_pod(pod, tenant.name, spec.trust, decision, operation=operation)
        if violations:
            raise kopf.AdmissionError(rejection_message(violations, tenant.name, spec.trust, decision), code=DENIED)

    @kopf.on.validate(GROUP, VERSION, PLURAL, id=VALIDATE_TENANT, registry=registry, operations=["CREATE", "UPDATE"])
    async def validate_tenant(name: str, body: kopf.Body, old: Optional[kopf.Body], warnings: list[str],
                        **kwargs: Any) -> None:
        try:
            spec = GpuTenantSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError:
            return  # the operator reports an invalid spec in status; nothing cluster-wide to check
        others = []
        for view in _values(kwargs[TENANTS_INDEX]):
            try:
                others.append((view.name, *guard.decision(view)))
            except ValidationError:
                continue
        namespace = naming.host_namespace(name, config)
        old_spec = dict(old.get("spec") or {}) if old else None
        pods = await guard.gpu_pods(namespace) if old_spec is not None else []
        problems, advice = check_tenant_change(config, name, spec, old_spec, others, pods)
        warnings.extend(advice)
        if problems:
            raise kopf.AdmissionError("; ".join(problems), code=DENIED)

    return guard
