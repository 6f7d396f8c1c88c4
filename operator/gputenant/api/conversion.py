"""Conversion of GpuTenant objects between the served versions, lossless both ways: what the API
server's conversion webhook answers (``review``) and what the operator and the CLI use to read any
version as the hub (``to_hub``).

Each field that differs between versions is a ``FieldChange``: its path in each version and a
function each way. A value one version cannot spell as the other wrote it (``10240Mi`` read back
from v1alpha1's ``memoryMiB: 10240`` would be ``10Gi``) is kept, as written, in the annotation
``conversion.gputenant.io/<version>`` of the converted object, and restored when the object goes
back to that version, provided the field still means the same; then the annotation is dropped.
Capsule keeps the fields one version lacks the same way. The functions are pure: no cluster state.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gputenant.api.group import GROUP, HUB_VERSION, SERVED_VERSIONS, V1ALPHA1, V1BETA1
from gputenant.api.v1beta1.models import mebibytes

PRESERVED_PREFIX = f"conversion.{GROUP}/"
"""Annotation ``conversion.gputenant.io/<version>``: JSON of path -> value that version wrote."""


class ConversionError(ValueError):
    """An object that cannot be converted: not a GpuTenant of a served version, or a value neither
    version can hold (one the schema would have refused)."""


def share_memory(mib: int) -> str:
    """``memoryMiB`` as a quantity in the largest binary unit that holds it exactly."""
    for suffix, size in (("Ti", 1 << 20), ("Gi", 1 << 10)):
        if mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


def _share_mebibytes(text: Any) -> int:
    try:
        return mebibytes(text)
    except (TypeError, ValueError) as error:
        raise ConversionError(f"spec.sharing.hami.memory: {error}") from None


def _whole_mebibytes(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConversionError(f"spec.sharing.hami.memoryMiB: {value!r} is not a positive whole number of MiB")
    return share_memory(value)


@dataclass(frozen=True)
class FieldChange:
    """One field that v1alpha1 and v1beta1 spell differently."""

    paths: dict[str, str]
    """Version -> dotted path of the field there."""
    convert: dict[tuple[str, str], Callable[[Any], Any]]
    """(from version, to version) -> the value's conversion."""


FIELD_CHANGES = (
    FieldChange(
        paths={V1ALPHA1: "spec.sharing.hami.memoryMiB", V1BETA1: "spec.sharing.hami.memory"},
        convert={(V1ALPHA1, V1BETA1): _whole_mebibytes, (V1BETA1, V1ALPHA1): _share_mebibytes},
    ),
)


def _get(obj: dict, path: str) -> tuple[bool, Any]:
    node: Any = obj
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _pop(obj: dict, path: str) -> None:
    *parents, leaf = path.split(".")
    node: Any = obj
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def _put(obj: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = obj
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def version_of(obj: dict) -> str:
    """The served version an object is in; ConversionError for anything else."""
    api_version = obj.get("apiVersion", "") if isinstance(obj, dict) else ""
    group, _, version = str(api_version).rpartition("/")
    if group != GROUP or version not in SERVED_VERSIONS or obj.get("kind") != "GpuTenant":
        raise ConversionError(f"apiVersion {api_version!r} kind {obj.get('kind') if isinstance(obj, dict) else None!r} "
                              f"is not a GpuTenant of {', '.join(f'{GROUP}/{v}' for v in SERVED_VERSIONS)}")
    return version


def _preserved(annotations: dict, version: str) -> dict[str, Any]:
    text = annotations.get(PRESERVED_PREFIX + version)
    try:
        kept = json.loads(text) if text else {}
    except ValueError:
        return {}
    return kept if isinstance(kept, dict) else {}


def convert(obj: dict, version: str) -> dict:
    """``obj`` as ``gputenant.io/<version>``: a new dict, ``obj`` untouched."""
    source = version_of(obj)
    if version not in SERVED_VERSIONS:
        raise ConversionError(f"version {version!r} is not served; served: {', '.join(SERVED_VERSIONS)}")
    result = copy.deepcopy(obj)
    result["apiVersion"] = f"{GROUP}/{version}"
    if source == version:
        return result
    if not isinstance(result.get("metadata") or {}, dict):
        raise ConversionError("metadata is not an object")
    annotations = dict((result.get("metadata") or {}).get("annotations") or {})
    restorable = _preserved(annotations, version)
    kept: dict[str, Any] = {}
    for change in FIELD_CHANGES:
        found, value = _get(obj, change.paths[source])
        if not found:
            continue
        converted = change.convert[(source, version)](value)
        original = restorable.get(change.paths[version])
        if original is not None and _converts_to(change, (version, source), original, value):
            converted = original
        _pop(result, change.paths[source])
        _put(result, change.paths[version], converted)
        if change.convert[(version, source)](converted) != value:
            kept[change.paths[source]] = value
    annotations.pop(PRESERVED_PREFIX + version, None)
    if kept:
        annotations[PRESERVED_PREFIX + source] = json.dumps(kept, sort_keys=True, separators=(",", ":"))
    else:
        annotations.pop(PRESERVED_PREFIX + source, None)
    metadata = result.get("metadata") or {}
    result["metadata"] = metadata
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    return result


def _converts_to(change: FieldChange, direction: tuple[str, str], original: Any, value: Any) -> bool:
    """Whether a kept ``original`` still means ``value`` (else the field was changed since: it wins)."""
    try:
        return bool(change.convert[direction](original) == value)
    except ConversionError:
        return False


def to_hub(obj: dict) -> dict:
    """Any served version as the hub's shape, which ``api.hub`` validates."""
    return convert(obj, HUB_VERSION)


def review(request: dict) -> dict:
    """The answer to an ``apiextensions.k8s.io/v1`` ConversionReview: every object converted, or a
    failure naming the first object that cannot be (the API server then fails the request)."""
    body = request.get("request")
    body = body if isinstance(body, dict) else {}
    uid = body.get("uid", "")
    desired = str(body.get("desiredAPIVersion", ""))
    group, _, version = desired.rpartition("/")
    try:
        if group != GROUP:
            raise ConversionError(f"desiredAPIVersion {desired!r} is not of group {GROUP}")
        objects = body.get("objects") or []
        if not isinstance(objects, list) or not all(isinstance(obj, dict) for obj in objects):
            raise ConversionError("request.objects is not a list of objects")
        converted = [convert(obj, version) for obj in objects]
        response: dict[str, Any] = {"uid": uid, "convertedObjects": converted, "result": {"status": "Success"}}
    except (ConversionError, AttributeError, TypeError) as error:
        response = {"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": str(error)}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}
