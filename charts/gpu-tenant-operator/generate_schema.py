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
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            }, "The operator image (built from the repository's Dockerfile).", ("repository",)),
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
                "enabled": {"type": "boolean", "description": "Run the admission guard on tenant pods."},
                "port": _port("Port the guard's HTTPS server listens on"),
                "failurePolicy": {"enum": ["Fail", "Ignore"],
                                  "description": "Fail: no tenant pod is admitted while the guard is down."},
                "timeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
            }, "The admission guard's webhook."),
            "serviceMonitor": _object({
                "enabled": {"type": "boolean"},
                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$", "description": "e.g. 30s."},
                "labels": k8s_map,
            }, "A Prometheus Operator ServiceMonitor for the operator."),
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
            "config": operator_config,
        },
        "$defs": definitions,
    }


def render() -> str:
    return json.dumps(chart_values_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")
