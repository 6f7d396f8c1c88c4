"""Write values.schema.json: the chart's own values, plus `config` from the OperatorConfig model.

The `config` value is the operator's configuration document, so its schema is generated from the
pydantic model `gputenant run` loads; the chart cannot accept a config the operator would reject
for its shape. operator/tests/test_chart_schema.py fails when the file is stale.

Run: .venv/bin/python charts/gpu-tenant-operator/generate_schema.py
"""

from __future__ import annotations

import json
from pathlib import Path

from gputenant.config.models import OperatorConfig

SCHEMA_PATH = Path(__file__).with_name("values.schema.json")
CONFIG_SET_BY_CHART = ("operatorNamespace", "operatorServiceAccount", "tenantNamespaceClusterRole")
"""Set by the chart from the release; a value for them would be overridden, so it is refused."""

QUANTITY = {"type": ["string", "integer", "number"], "description": "A Kubernetes quantity, e.g. 100m or 256Mi."}
RESOURCE_LIST = {"type": "object", "additionalProperties": QUANTITY}


def _object(properties: dict, description: str, required: tuple[str, ...] = ()) -> dict:
    schema = {"type": "object", "description": description, "additionalProperties": False,
              "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


def _port(description: str) -> dict:
    return {"type": "integer", "minimum": 1024, "maximum": 65535,
            "description": f"{description} (unprivileged: the container runs as non-root)."}


def chart_values_schema() -> dict:
    operator_config = OperatorConfig.model_json_schema(by_alias=True, mode="validation")
    definitions = operator_config.pop("$defs", {})
    for name in CONFIG_SET_BY_CHART:
        operator_config["properties"].pop(name)
    operator_config["description"] = (
        "The operator configuration (OperatorConfig): GPU pools, trust -> sharing mapping, vCluster chart. "
        "operatorNamespace, operatorServiceAccount and tenantNamespaceClusterRole are set by the chart.")
    k8s_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpu-tenant-operator chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "image": _object({
                "repository": {"type": "string", "minLength": 1, "description": "Image repository."},
                "tag": {"type": "string", "description": "Image tag; empty: the chart's appVersion."},
                "digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$",
                           "description": "Image manifest digest; set: the image is named by it, not by tag."},
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            }, "The operator image (built from the repository's Dockerfile).", ("repository",)),
            "replicas": {"type": "integer", "minimum": 1, "description": (
                "Operator replicas: each serves the admission guard, the Lease holder reconciles.")},
            "imagePullSecrets": {"type": "array", "items": _object(
                {"name": {"type": "string", "minLength": 1}}, "A Secret in the release namespace.", ("name",))},
            "serviceAccount": _object({
                "name": {"type": "string", "description": "Empty: the release's full name."},
                "annotations": k8s_map,
            }, "The operator's ServiceAccount."),
            "resources": _object({
                "requests": RESOURCE_LIST, "limits": RESOURCE_LIST,
            }, "Resources of the operator container; requests are required so it is never starved.", ("requests",)),
            "logs": _object({
                "json": {"type": "boolean", "description": "gputenant run --json-logs."},
                "verbose": {"type": "boolean", "description": "gputenant run --verbose (debug logging)."},
            }, "Logging of `gputenant run`."),
            "liveness": _object({
                "port": _port("Port of kopf's liveness endpoint"),
                "path": {"type": "string", "pattern": "^/", "description": "Path of the liveness endpoint."},
                "initialDelaySeconds": {"type": "integer", "minimum": 0},
                "periodSeconds": {"type": "integer", "minimum": 1},
                "failureThreshold": {"type": "integer", "minimum": 1},
            }, "The liveness probe on `gputenant run`'s health endpoint."),
            "webhook": _object({
                "enabled": {"type": "boolean", "description": "Serve the admission guard on tenant pods."},
                "port": _port("Port the guard's HTTPS server listens on"),
                "conversionPort": _port("Port of the GpuTenant CRD's conversion webhook (no client certificate asked)"),
                "certificateSecret": {"type": "string", "description": (
                    "kubernetes.io/tls Secret with tls.crt, tls.key, ca.crt; empty: generated by the operator "
                    "(one replica) or by the chart (several).")},
                "clientCA": {"enum": ["FrontProxy", "ConfigMap", "None"], "description": (
                    "Which callers the guard answers: a client certificate from the API server's front-proxy CA "
                    "(FrontProxy, read from kube-system/extension-apiserver-authentication), from the ca.crt of "
                    "clientCAConfigMap (ConfigMap), or anyone past the NetworkPolicies (None).")},
                "clientCAConfigMap": {"type": "string", "description": (
                    "With clientCA ConfigMap: the ConfigMap whose ca.crt is the CA of the API server's webhook client "
                    "certificate (--webhook-client-ca).")},
            }, "The admission guard's webhook."),
            "metrics": _object({
                "enabled": {"type": "boolean", "description": "Serve Prometheus metrics (gputenant run --metrics-address) "
                            "and a Service for them."},
                "port": _port("Port of the metrics endpoint"),
                "serviceMonitor": _object({
                    "enabled": {"type": "boolean", "description": "Install a ServiceMonitor (Prometheus Operator CRDs)."},
                    "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$",
                                 "description": "Scrape interval, e.g. 30s."},
                    "labels": k8s_map,
                }, "A ServiceMonitor for the Prometheus Operator."),
                "prometheusRule": _object({
                    "enabled": {"type": "boolean", "description": "Install the alerts as a PrometheusRule "
                                "(Prometheus Operator CRDs)."},
                    "labels": k8s_map,
                }, "The alerts of docs/metrics.md (files/alerts.yaml) as a PrometheusRule."),
                "dashboard": _object({
                    "enabled": {"type": "boolean", "description": "Install the Grafana dashboard ConfigMap."},
                    "labels": k8s_map,
                }, "The Grafana dashboard, as a ConfigMap labelled for Grafana's dashboard sidecar."),
                "scrapeNamespaceSelector": {"type": "object", "description": (
                    "Namespaces (a label selector) whose pods may reach the metrics port; tenant namespaces never.")},
            }, "Prometheus metrics of the operator (docs/metrics.md)."),
            "usage": _object({
                "prometheusUrl": {"type": "string", "pattern": "^(https?://.+)?$", "description": (
                    "Prometheus scraping the dcgm-exporter (gputenant run --prometheus-url); empty: off.")},
                "window": {"type": "string", "pattern": "^([0-9]+(h|m|s))+$",
                           "description": "Window of the usage figures in whole h/m/s (gputenant run --usage-window)."},
            }, "Allocation against use per tenant, from DCGM series in Prometheus (docs/metrics.md)."),
            "attestation": _object({
                "enabled": {"type": "boolean", "description": "Run the isolation canary per GPU pool."},
                "image": {"type": "string", "description": "Image with python3 and attestation/canary.py at /canary/canary.py."},
                "intervalSeconds": {"type": "integer", "minimum": 60,
                                    "description": "Seconds between attestations of a pool (also on any change of it)."},
                "queue": {"type": "string", "description": "KAI queue the canaries are charged to; empty: none."},
            }, "Isolation attestation (docs/attestation.md)."),
            "drift": _object({
                "watch": {"type": "boolean", "description": (
                    "Watch the kinds the operator writes for tenants (metadata only, by the tenant label) and "
                    "repair another hand's change within seconds; needs cluster-wide list and watch on them.")},
                "watchSecrets": {"type": "boolean", "description": (
                    "With watch: watch the owned Secrets too (cluster-wide list and watch on Secrets).")},
                "resyncSeconds": {"type": "integer", "minimum": 60, "description": (
                    "Seconds between safety-net resyncs of every tenant (gputenant run --resync-seconds).")},
            }, "Drift repair (docs/operations.md, Drift)."),
            "nodeSelector": k8s_map,
            "tolerations": {"type": "array", "items": {"type": "object"}},
            "affinity": {"type": "object"},
            "priorityClassName": {"type": "string"},
            "podAnnotations": k8s_map,
            "podLabels": k8s_map,
            "crd": _object({
                "install": {"type": "boolean", "description": "Install and upgrade the GpuTenant CRD with the chart."},
            }, "The GpuTenant CRD."),
            "scopePolicy": _object({
                "enabled": {"type": "boolean", "description": "Install the ValidatingAdmissionPolicy (Kubernetes >= 1.30)."},
            }, "Admission policy keeping the operator to the namespaces it manages."),
            "argocd": _object({
                "namespaces": {"type": "array", "uniqueItems": True, "items": {
                    "type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                    "description": "Argo CD namespaces the operator may write cluster Secrets to."},
            }, "Argo CD registration of tenants' virtual clusters."),
            "fleet": _object({
                "applicationSet": _object({
                    "repoURL": {"type": "string", "description": "Git repository with one GpuTenant file per tenant (hub: required)."},
                    "targetRevision": {"type": "string", "description": "Git revision to deliver."},
                    "path": {"type": "string", "description": "Directory of the tenant files, <path>/<tenant>.yaml."},
                    "project": {"type": "string", "description": "Argo CD project of the tenants' Applications."},
                    "requeueAfterSeconds": {"type": "integer", "minimum": 1,
                                            "description": "How often Argo CD re-reads the decisions."},
                    "configMapName": {"type": "string", "description": "The generator's ConfigMap in Argo CD's namespace."},
                    "controllerServiceAccount": {"type": "string",
                                                 "description": "Argo CD's ApplicationSet controller ServiceAccount."},
                }, "The hub's ApplicationSet (config.fleet.role hub)."),
            }, "Fleet mode (docs/fleet.md); the role is config.fleet.role."),
            "config": operator_config,
        },
        "$defs": definitions,
    }


def render() -> str:
    return json.dumps(chart_values_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
