"""The GpuTenant CustomResourceDefinition, generated from the pydantic models.

pydantic's JSON Schema is turned into a structural OpenAPI v3 schema as the API server wants it:
``$ref``s inlined, ``Optional[X]`` as plain X (omitted means unset), pydantic defaults as
``default`` (``{}`` where a nested object takes its own defaults, so the API server fills in the
same values pydantic does), CEL rules and list types copied from ``json_schema_extra``.
``crds/tenant.yaml`` is this module's output, checked in; ``gputenant crd`` regenerates it.
"""

from __future__ import annotations

import copy
import json
from enum import Enum
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, NoDefault

from gputenant.api import v1alpha1, v1beta1
from gputenant.api.group import (
    DEPRECATED_VERSIONS,
    GROUP,
    KIND,
    PLURAL,
    PREFERRED_VERSION,
    SERVED_VERSIONS,
    STORAGE_VERSION,
    V1ALPHA1,
    V1BETA1,
)
from gputenant.api.rules import CEL_KEY
from gputenant.api.v1alpha1 import TENANT_NAME_RULE, GpuTenantStatus

SINGULAR = KIND.lower()
SHORT_NAMES = ["gput"]
CATEGORIES = ["gpu", "tenancy"]

# Keys pydantic emits that a structural schema has no use for (or forbids).
_DROPPED_KEYS = {"title", "additionalProperties", "$defs"}
# Order of keys in each schema node of the generated file: what it is first, its children last.
_KEY_ORDER = ["type", "format", "description", "default", "enum", "minimum", "exclusiveMinimum", "maximum",
              "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
              "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "required", "properties",
              "additionalProperties", "items", CEL_KEY]

READY = '.status.conditions[?(@.type=="Ready")]'
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Trust", "type": "string", "jsonPath": ".spec.trust", "description": "How far the tenant is trusted."},
    {"name": "Sharing", "type": "string", "jsonPath": ".status.sharing.mode", "description": "Sharing mechanism in force."},
    {"name": "GPUs", "type": "number", "jsonPath": ".spec.gpu.quota", "description": "Guaranteed GPUs."},
    {"name": "Ready", "type": "string", "jsonPath": f"{READY}.status", "description": "Whether every part is ready."},
    {"name": "Reason", "type": "string", "jsonPath": f"{READY}.reason", "description": "Why the tenant is (not) ready."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Pool", "type": "string", "jsonPath": ".status.sharing.pool", "priority": 1, "description": "GPU pool."},
    {"name": "Namespace", "type": "string", "jsonPath": ".status.namespace", "priority": 1, "description": "Host namespace."},
]

ROOT_RULES = [TENANT_NAME_RULE.cel()]
SPEC_MODELS: dict[str, type[BaseModel]] = {V1ALPHA1: v1alpha1.GpuTenantSpec, V1BETA1: v1beta1.GpuTenantSpec}
"""Each served version's spec; the status is the same in every version."""
CONVERSION_PATH = "/convert"
CONVERSION_SERVICE = {"namespace": "gpu-tenant-operator", "name": "gpu-tenant-operator-guard", "port": 9444}
"""The guard's Service of the documented install (release and namespace ``gpu-tenant-operator``,
docs/install.md), where the API server sends ConversionReviews until the operator writes its own
endpoint and CA bundle into the CRD (the chart fills in its own Service; guard.conversion keeps
both current, also after this file is applied again)."""


class _FactoryDefaults(GenerateJsonSchema):
    """pydantic's schema generator, but defaults from ``default_factory`` are written too, and a
    nested model equal to its own defaults is written as ``{}`` (the API server fills it in)."""

    def get_default_value(self, schema: Any) -> Any:
        if "default_factory" in schema and not schema.get("default_factory_takes_data"):
            return schema["default_factory"]()
        return super().get_default_value(schema)

    def encode_default(self, default: Any) -> Any:
        if isinstance(default, BaseModel):
            dumped = _dump(default)
            return {} if dumped == _dump(type(default)()) else dumped
        if isinstance(default, list):
            return [item.value if isinstance(item, Enum) else item for item in default]
        return super().encode_default(default)


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _merge(outer: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """A referenced or wrapped schema with the field's own keys on top (its description wins,
    CEL rules of both apply)."""
    merged = {**inner, **outer}
    rules = inner.get(CEL_KEY, []) + outer.get(CEL_KEY, [])
    if rules:
        merged[CEL_KEY] = rules
    return merged


def _unwrapped(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """The node with pydantic's wrappers ($ref, single allOf, Optional's anyOf) merged into it."""
    node = dict(schema)
    if "$ref" in node:
        target = definitions[node.pop("$ref").split("/")[-1]]
        node = _merge(node, target)
    if "allOf" in node and len(node["allOf"]) == 1:
        node = _merge({k: v for k, v in node.items() if k != "allOf"}, node["allOf"][0])
    if "anyOf" in node:
        variants = [variant for variant in node["anyOf"] if variant != {"type": "null"}]
        if len(variants) != 1:
            raise ValueError(f"only Optional[X] unions can become a structural schema, got {node['anyOf']}")
        node = _merge({k: v for k, v in node.items() if k != "anyOf"}, variants[0])
        if node.get("default", NoDefault) is None:
            del node["default"]
    return node


def structural(schema: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-Schema node into a structural OpenAPI v3 node."""
    node = _unwrapped(schema, definitions)
    if "$ref" in node or "allOf" in node:
        return structural(node, definitions)

    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "properties":
            result[key] = {name: structural(child, definitions) for name, child in value.items()}
        elif key == "items":
            result[key] = structural(value, definitions)
        elif key == "exclusiveMinimum" or key == "exclusiveMaximum":
            result["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            result[key] = True
        else:
            result[key] = copy.deepcopy(value)
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        result["additionalProperties"] = structural(node["additionalProperties"], definitions)
    if "enum" in result and "type" not in result:
        result["type"] = "string"
    unknown = set(result) - set(_KEY_ORDER)
    if unknown:
        raise ValueError(f"schema keys {sorted(unknown)} are not supported by the CRD generator")
    return {key: result[key] for key in _KEY_ORDER if key in result}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of one API model (spec or status)."""
    generated = model.model_json_schema(by_alias=True, mode="validation", schema_generator=_FactoryDefaults)
    return structural(generated, generated.get("$defs", {}))


def version_schema(version: str) -> dict[str, Any]:
    """The openAPIV3Schema of one served version."""
    return {
        "type": "object",
        "description": (
            "A team's GPU-enabled virtual cluster on the shared host cluster: its host namespace, KAI Queue, "
            "vCluster, GPU-sharing policy (chosen from trust) and kubeconfigs."
        ),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"Versioned schema of this object: {GROUP}/{version}."},
            "kind": {"type": "string", "description": "Always GpuTenant."},
            # The API server allows only name constraints here, and no description.
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": model_schema(SPEC_MODELS[version]),
            "status": model_schema(GpuTenantStatus),
        },
        CEL_KEY: ROOT_RULES,
    }


def _version(version: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": version, "served": True, "storage": version == STORAGE_VERSION}
    if version in DEPRECATED_VERSIONS:
        entry["deprecated"] = True
        entry["deprecationWarning"] = (f"{GROUP}/{version} GpuTenant is deprecated; use {GROUP}/{PREFERRED_VERSION} "
                                       "(docs/api-versions.md)")
    entry.update({"subresources": {"status": {}}, "additionalPrinterColumns": PRINTER_COLUMNS,
                  "schema": {"openAPIV3Schema": version_schema(version)}})
    return entry


def conversion(client_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CRD's ``spec.conversion``: the operator's webhook, at ``client_config`` when given."""
    config = client_config or {"service": {**CONVERSION_SERVICE, "path": CONVERSION_PATH}}
    return {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": config}}


def build_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition as a dict, ready to apply."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "conversion": conversion(),
            "versions": [_version(version) for version in SERVED_VERSIONS],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Block style with long strings kept on one line, so diffs of the checked-in file stay small."""


def render_crd_yaml() -> str:
    """``crds/tenant.yaml``: the CRD with a header saying where it comes from."""
    header = "# Generated from operator/gputenant/api/v1alpha1/ and v1beta1/ by `gputenant crd`; do not edit.\n"
    return header + crd_yaml(build_crd())


def crd_yaml(crd: dict[str, Any]) -> str:
    """A CRD as block-style YAML, long strings on one line."""
    return yaml.dump(json.loads(json.dumps(crd)), Dumper=_Dumper, sort_keys=False, width=1_000_000)
