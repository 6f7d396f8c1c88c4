"""The Mutating/ValidatingWebhookConfiguration of the guard, built and kept in sync by the operator.

kopf's own managed configurations cannot select namespaces, so the guard applies its own: pods are
sent only from namespaces labelled ``gputenant.io/tenant`` (never kube-system or the operator's
namespace), and the webhook fails closed for them.
"""

from __future__ import annotations

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.config.models import OperatorConfig
from gputenant.kube import KubeClient, holds

CONFIGURATION_NAME = "gputenant-guard"
MUTATE_POD = "mutate-pod"
VALIDATE_POD = "validate-pod"
VALIDATE_TENANT = "validate-tenant"
"""Handler ids; each is the URL path of its webhook."""
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
TIMEOUT_SECONDS = 10


def _client_config(client_config: dict, handler_id: str) -> dict:
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
             namespace_selector: dict | None = None) -> dict:
    webhook = {
        "name": f"{name}.{GROUP}",
        "clientConfig": _client_config(client_config, handler_id),
        "rules": rules,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": TIMEOUT_SECONDS,
    }
    if namespace_selector is not None:
        webhook["namespaceSelector"] = namespace_selector
    return webhook


def webhook_configurations(config: OperatorConfig, client_config: dict) -> list[dict]:
    """Both configuration objects for the server at ``client_config`` ({url, caBundle})."""
    selector = tenant_namespace_selector(config)
    pods = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
    ephemeral = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/ephemeralcontainers"],
                 "operations": ["UPDATE"], "scope": "Namespaced"}
    tenants = {"apiGroups": [GROUP], "apiVersions": [VERSION], "resources": [PLURAL],
               "operations": ["CREATE", "UPDATE"], "scope": "Cluster"}
    labels = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY, naming.COMPONENT_LABEL: "admission-guard"}
    mutating_pod = _webhook("pods.mutate", client_config, MUTATE_POD, [pods, ephemeral], "Fail", selector)
    mutating_pod["reinvocationPolicy"] = "IfNeeded"
    return [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME, "labels": labels},
         "webhooks": [mutating_pod]},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": CONFIGURATION_NAME, "labels": labels},
         "webhooks": [
             _webhook("pods.validate", client_config, VALIDATE_POD, [pods, ephemeral], "Fail", selector),
             # Capacity checks are advice on top of the operator's own status: a stopped operator
             # must not freeze every tenant change, so these fail open.
             _webhook("gputenants.validate", client_config, VALIDATE_TENANT, [tenants], "Ignore"),
         ]},
    ]


async def sync_webhook_configurations(client: KubeClient, config: OperatorConfig, client_config: dict) -> int:
    """Apply both configurations where they differ from the cluster; returns how many were written."""
    written = 0
    for desired in webhook_configurations(config, client_config):
        live = await client.get(desired["apiVersion"], desired["kind"], desired["metadata"]["name"])
        if not holds(desired, live):
            await client.apply(desired)
            written += 1
    return written
