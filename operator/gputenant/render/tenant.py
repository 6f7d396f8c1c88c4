"""Tenant spec + policy decision + operator config -> the host objects and the vCluster values.

Pure: no API calls, no clock, no randomness; the same inputs give byte-identical output, which
is what lets the operator skip writes when nothing changed and lets golden files review changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gputenant import naming
from gputenant.api.hub import GpuTenant, MemberRole, Subject, SubjectKind, Trust
from gputenant.config.models import ExposureType, OperatorConfig
from gputenant.policy.decision import Decision
from gputenant.render.errors import RenderError
from gputenant.render.podsecurity import POD_SECURITY_VERSION, pod_security_level
from gputenant.render.quantities import cpu_millicores, memory_megabytes
from gputenant.render.templates import render_documents
from gputenant.render.vcluster import oidc_ca_configmap, render_vcluster_values

GPU_RESOURCE = "requests.nvidia.com/gpu"

_READ = ["get", "list", "watch"]
_VIEW_RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log", "events", "services", "persistentvolumeclaims"],
     "verbs": _READ},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": _READ},
]
_DELETE_PODS_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}


@dataclass(frozen=True)
class RenderedTenant:
    objects: list[dict]
    """Host objects in apply order: Namespace, ResourceQuota, LimitRange, NetworkPolicies, Roles,
    RoleBindings, KAI Queue (the last four kinds only when the decision is possible)."""
    vcluster_values: dict | None
    """Values for the vcluster chart; None when the decision is not possible (install nothing)."""


def render_tenant(tenant: GpuTenant, decision: Decision, config: OperatorConfig) -> RenderedTenant:
    """Render every host object of `tenant` and its vCluster values.

    When ``decision.possible`` is False only what is safe without a grant is rendered: the
    namespace, its RBAC and a ResourceQuota with zero GPUs (no LimitRange, NetworkPolicy, Queue or
    vCluster values); the operator then reports Ready=False with the decision's reason.
    The API model has validated quantities, subjects and URLs; RenderError (naming the field)
    covers what only rendering knows: control-plane limits, pool tolerations, policy bugs.
    """
    spec = tenant.spec
    name = tenant.name
    namespace = naming.host_namespace(name, config)
    context = {
        "namespace": namespace,
        "release": naming.release_name(name),
        "labels": {component: _labels(name, spec.trust, component)
                   for component in ("quota", "limits", "network", "rbac", "queue")},
        "names": {
            "quota": naming.RESOURCE_QUOTA_NAME,
            "limit_range": naming.LIMIT_RANGE_NAME,
            "isolation_policy": naming.ISOLATION_POLICY_NAME,
            "vcluster_api_policy": naming.VCLUSTER_API_POLICY_NAME,
            "vcluster_egress_policy": naming.VCLUSTER_EGRESS_POLICY_NAME,
        },
    }
    objects = render_documents("namespace.yaml", **context,
                               namespace_labels=namespace_labels(name, spec.trust))
    objects += render_documents("resourcequota.yaml", **context, quota_hard=quota_hard(tenant, decision, config))
    if decision.possible:
        objects += render_documents("limitrange.yaml", **context, limit_range=tenant.spec.quotas.limit_range)
        internet, endpoints = config.egress(spec.trust)
        objects += render_documents(
            "networkpolicy.yaml", **context, operator_namespace=config.operator_namespace,
            internet=internet, platform_endpoints=[endpoint.rule() for endpoint in endpoints],
            cluster_networks=[str(network) for network in config.cluster_networks],
            api_server_networks=[str(network) for network in config.api_server_networks],
            api_server_port=config.api_server_port,
            vcluster_pod_labels=naming.vcluster_pod_labels(name),
            argocd_namespace=spec.argocd.namespace if spec.argocd.enabled else None,
            exposed=config.vcluster.exposure.type is not ExposureType.CLUSTER_IP)
    roles, bindings = rbac(tenant)
    objects += render_documents("rbac.yaml", **context, roles=roles, bindings=bindings)
    objects.append(wake_request(name, spec.trust, namespace))
    ca = oidc_ca_configmap(tenant, namespace)
    if ca:
        objects.append(ca)
    if not decision.possible:
        return RenderedTenant(objects=objects, vcluster_values=None)
    objects += render_documents("queue.yaml", **context, queue=_queue(tenant, decision))
    return RenderedTenant(objects=objects, vcluster_values=render_vcluster_values(tenant, decision, config))


def _labels(tenant: str, trust: Trust, component: str) -> dict[str, str]:
    return {**naming.tenant_labels(tenant, component), naming.TRUST_LABEL: trust.value}


def namespace_labels(tenant: str, trust: Trust) -> dict[str, str]:
    level = pod_security_level(trust)
    return {
        **_labels(tenant, trust, "namespace"),
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": POD_SECURITY_VERSION,
    }


POD_GROUPS_QUOTA = "count/podgroups.scheduling.run.ai"
"""KAI PodGroups in the namespace: KAI's pod-grouper's (one per ungrouped pod) and the gangs the operator
writes for the tenant's pods (guard.gang_groups). One per pod at most, so the default is the pod count."""
LOAD_BALANCERS_QUOTA = "services.loadbalancers"
NODE_PORTS_QUOTA = "services.nodeports"
VCLUSTER_NODE_PORTS = {ExposureType.NODE_PORT: 2, ExposureType.LOAD_BALANCER: 1}
"""Node ports of the vCluster's own Service by exposure: the pinned chart (0.36.1,
templates/service.yaml) gives it `https` and, unless it is a LoadBalancer, `kubelet`
(networking.advanced.proxyKubelets.byHostname, on by default); each port of a NodePort or
LoadBalancer Service takes a node port."""


def quota_hard(tenant: GpuTenant, decision: Decision, config: OperatorConfig) -> dict[str, str]:
    """CPU and memory as both limits.* and requests.* (so every container must state both, and
    the LimitRange fills them in), object counts (KAI PodGroups as many as pods), storage, then the
    decision's GPU entries. An impossible decision grants zero GPUs. LoadBalancer Services and node
    ports: only the vCluster's own, with an exposure that needs one; a tenant's Service synced into
    the namespace would take an address of the platform's pool, or open a port on every node, and
    expose its pods outside the cluster."""
    quotas = tenant.spec.quotas
    exposure = config.vcluster.exposure.type
    own_load_balancers = 1 if exposure is ExposureType.LOAD_BALANCER else 0
    own_node_ports = VCLUSTER_NODE_PORTS.get(exposure, 0)
    hard = {
        "limits.cpu": quotas.cpu, "requests.cpu": quotas.cpu,
        "limits.memory": quotas.memory, "requests.memory": quotas.memory,
        "requests.storage": quotas.storage,
        "pods": str(quotas.pods), "services": str(quotas.services), POD_GROUPS_QUOTA: str(quotas.pods),
        LOAD_BALANCERS_QUOTA: str(own_load_balancers), NODE_PORTS_QUOTA: str(own_node_ports),
    }
    if decision.possible:
        hard.update(decision.quota)
    else:
        hard.update({resource: "0" for resource in decision.quota})
        hard[GPU_RESOURCE] = "0"
    return hard


def _subject(subject: Subject) -> dict:
    """An RBAC subject (the API model guarantees a ServiceAccount's namespace)."""
    if subject.kind == SubjectKind.SERVICE_ACCOUNT:
        return {"kind": "ServiceAccount", "name": subject.name, "namespace": subject.namespace}
    return {"kind": subject.kind.value, "name": subject.name, "apiGroup": "rbac.authorization.k8s.io"}


def owner_subjects(tenant: GpuTenant) -> list[dict]:
    return [_subject(owner) for owner in tenant.spec.owners]


def kubeconfig_secret_rule(tenant: GpuTenant) -> dict | None:
    """`get` on exactly the issued kubeconfig Secrets. None when no kubeconfig is issued: a rule
    with empty resourceNames would grant every Secret, including vc-<release>."""
    roles = [role.value for role in tenant.spec.kubeconfig.roles] + (
        [naming.OIDC_KUBECONFIG_ROLE] if tenant.spec.vcluster.oidc else [])
    names = [naming.kubeconfig_secret_name(tenant.name, role) for role in roles]
    if not names:
        return None
    return {"apiGroups": [""], "resources": ["secrets"], "resourceNames": names, "verbs": ["get"]}


WAKE_RULE = {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [naming.WAKE_CONFIGMAP],
             "verbs": ["get", "patch", "update"]}
"""The owners' one write on the host: their wake request (docs/operations.md#wake-on-request)."""


def wake_request(tenant: str, trust: Trust, namespace: str) -> dict:
    """The empty wake request the owners fill in; the operator never writes its data (server-side
    apply leaves the owners' field alone)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": naming.WAKE_CONFIGMAP, "namespace": namespace,
                         "labels": _labels(tenant, trust, "wake")}}


def rbac(tenant: GpuTenant) -> tuple[list[dict], list[dict]]:
    """Roles view < edit (+ delete pods) < admin; owners are bound to admin, each member to the
    Role of its role. Only the owners read the kubeconfig Secrets and write the wake request (Roles
    of their own, bound to no member): a kubeconfig is the tenant's cluster-admin, so handing one
    out stays the owners' decision. Bindings without subjects are left out."""
    secret_rule = kubeconfig_secret_rule(tenant)
    rules = {
        MemberRole.VIEW: list(_VIEW_RULES),
        MemberRole.EDIT: [*_VIEW_RULES, _DELETE_PODS_RULE],
        MemberRole.ADMIN: [*_VIEW_RULES, _DELETE_PODS_RULE],
    }
    roles = [{"name": naming.role_name(role.value), "rules": rules[role]} for role in
             (MemberRole.VIEW, MemberRole.EDIT, MemberRole.ADMIN)]
    bindings = [{"name": naming.OWNERS_BINDING_NAME, "role": naming.role_name(MemberRole.ADMIN.value),
                 "subjects": [_subject(owner) for owner in tenant.spec.owners]}]
    roles.append({"name": naming.WAKE_ROLE_NAME, "rules": [WAKE_RULE]})
    bindings.append({"name": naming.WAKE_BINDING_NAME, "role": naming.WAKE_ROLE_NAME,
                     "subjects": [_subject(owner) for owner in tenant.spec.owners]})
    if secret_rule:
        roles.append({"name": naming.KUBECONFIGS_ROLE_NAME, "rules": [secret_rule]})
        bindings.append({"name": naming.KUBECONFIGS_BINDING_NAME, "role": naming.KUBECONFIGS_ROLE_NAME,
                         "subjects": owner_subjects(tenant)})
    for role in (MemberRole.VIEW, MemberRole.EDIT, MemberRole.ADMIN):
        members = [_subject(member) for member in tenant.spec.members if member.role == role]
        if members:
            bindings.append({"name": naming.members_binding_name(role.value),
                             "role": naming.role_name(role.value), "subjects": members})
    return roles, bindings


def _queue(tenant: GpuTenant, decision: Decision) -> dict:
    """The Queue's spec values. GPUs and the parent queue from the decision (KAI units); CPU and
    memory deserve and are capped at the namespace quota, weighted like the GPUs."""
    grant = decision.queue
    if grant is None or grant.parent is None:
        raise RenderError(f"decision for {tenant.name}: possible but without a queue grant or its parent queue (policy bug)")
    quotas = tenant.spec.quotas
    cpu = cpu_millicores(quotas.cpu, "spec.quotas.cpu")
    memory = memory_megabytes(quotas.memory, "spec.quotas.memory")
    return {
        "name": naming.queue_name(tenant.name),
        "display_name": tenant.spec.display_name or tenant.name,
        "parent": grant.parent,
        "priority": grant.priority,
        "gpu": {"quota": grant.quota, "limit": grant.limit, "overQuotaWeight": grant.over_quota_weight},
        "cpu": {"quota": cpu, "limit": cpu, "overQuotaWeight": grant.over_quota_weight},
        "memory": {"quota": memory, "limit": memory, "overQuotaWeight": grant.over_quota_weight},
    }
