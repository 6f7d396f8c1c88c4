"""The Mutating/ValidatingWebhookConfiguration of the guard, built and kept in sync by the operator.

kopf's own managed configurations cannot select namespaces, so the guard applies its own: pods are
and Services are sent only from namespaces labelled ``gputenant.io/tenant`` (never kube-system or the operator's
namespace), and the webhook fails closed for them.

Failing closed, they would block every tenant pod once the operator is gone; so when the operator
runs from its Helm chart, both are owned by the release's tenant-namespace ClusterRole
(``tenantNamespaceClusterRole``) and the garbage collector deletes them when `helm uninstall`
deletes that ClusterRole (docs/install.md).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient, holds

CONFIGURATION_NAME = "gputenant-guard"
MUTATE_POD = "mutate-pod"
VALIDATE_POD = "validate-pod"
VALIDATE_SERVICE = "validate-service"
VALIDATE_TENANT = "validate-tenant"
"""Handler ids; each is the URL path of its webhook."""
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
TIMEOUT_SECONDS = 10
SERVICE_HOST = re.compile(r"(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc")
"""A Service's in-cluster name, as the chart passes it in --webhook-host."""


def _client_config(client_config: dict, handler_id: str) -> dict:
    """kopf's {url, caBundle} for one handler. A URL at a Service's own name
    (``<service>.<namespace>.svc``, as the chart passes) becomes a `service` reference: the API
    server then dials it through its service resolver (the Service's ClusterIP) and checks the
    certificate against that name, where a URL would need the API server's host to resolve
    cluster DNS, which it usually cannot."""
    url = urlsplit(client_config["url"])
    service = SERVICE_HOST.fullmatch(url.hostname or "")
    if service:
        result: dict[str, Any] = {"service": {"namespace": service["namespace"], "name": service["name"],
                                              "port": url.port or 443, "path": f"/{handler_id}"}}
    else:
        result = {"url": f"{client_config['url'].rstrip('/')}/{handler_id}"}
    if client_config.get("caBundle"):
        result["caBundle"] = client_config["caBundle"]
    return result


def tenant_namespace_selector(config: OperatorConfig) -> dict:
    return {"matchExpressions": [
        {"key": naming.TENANT_LABEL, "operator": "Exists"},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": sorted({*SYSTEM_NAMESPACES, config.operator_namespace})},
    ]}


def _webhook(name: str, client_config: dict, handler_id: str, rules: list[dict], failure_policy: str,
             namespace_selector: dict | None = None, side_effects: str = "None") -> dict:
    webhook = {
        "name": f"{name}.{GROUP}",
        "clientConfig": _client_config(client_config, handler_id),
        "rules": rules,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": side_effects,
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": TIMEOUT_SECONDS,
    }
    if namespace_selector is not None:
        webhook["namespaceSelector"] = namespace_selector
    return webhook


def webhook_configurations(config: OperatorConfig, client_config: dict,
                           owner: dict | None = None) -> list[dict]:
    """Both configuration objects for the server at ``client_config`` ({url, caBundle}), owned by
    ``owner`` (an object's apiVersion, kind and metadata) when given."""
    selector = tenant_namespace_selector(config)
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
    ephemeral = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/ephemeralcontainers"],
                 "operations": ["UPDATE"], "scope": "Namespaced"}
    services = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["services", "services/status"],
                "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
    tenants = {"apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [PLURAL],
               "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}
    labels = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY, naming.COMPONENT_LABEL: "admission-guard"}
    # decides and patches only: a gang's PodGroup is written by the operator after admission (guard.gang_groups)
    mutating_pod = _webhook("pods.mutate", client_config, MUTATE_POD, [pods, ephemeral], "Fail", selector)
    mutating_pod["reinvocationPolicy"] = "IfNeeded"
    metadata: dict[str, Any] = {"name": CONFIGURATION_NAME, "labels": labels}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {**metadata},
         "webhooks": [mutating_pod]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {**metadata},
         "webhooks": [
             _webhook("pods.validate", client_config, VALIDATE_POD, [pods, ephemeral], "Fail", selector),
             # A tenant Service claiming an address would take traffic that is not its own: fail closed.
             _webhook("services.validate", client_config, VALIDATE_SERVICE, [services], "Fail", selector),
             # Capacity checks are advice on top of the operator's own status: a stopped operator
             # must not freeze every tenant change, so these fail open.
             _webhook("gputenants.validate", client_config, VALIDATE_TENANT, [tenants], "Ignore"),
         ]},
    ]


async def release_owner(client: KubeClient, config: OperatorConfig) -> dict | None:
    """The Helm release's tenant-namespace ClusterRole, to own the configurations; None when the
    operator does not run from the chart (no such role configured) or cannot see it."""
    if not config.tenant_namespace_cluster_role:
        return None
    try:
        return await client.get("rbac.authorization.k8s.io/v1", "ClusterRole", config.tenant_namespace_cluster_role)
    except ApiError as error:
        if error.status == 403:
            return None
        raise


async def sync_webhook_configurations(client: KubeClient, config: OperatorConfig, client_config: dict) -> int:
    """Apply both configurations where they differ from the cluster; returns how many were written."""
    written = 0
    owner = await release_owner(client, config)
    for desired in webhook_configurations(config, client_config, owner):
        live = await client.get(desired["apiVersion"], desired["kind"], desired["metadata"]["name"])
        if not holds(desired, live):
            await client.apply(desired)
            written += 1
    return written
