"""What the local demo starts from, checked before anything starts: its options, the operator
configuration made local (the upstream chart from ../shared/third_party, NodePort at the node), the
example tenants validated by the API model, and the simulated GPU nodes of the pools. Every
mistake is a `DevError` naming the flag and what to change."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from gputenant import KIND
from gputenant.api.fieldpath import validation_problems
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from kubeplane.demo.defaults import DEFAULT_CONFIG, DEFAULT_TENANTS, LOCAL_CHART
from kubeplane.gpu_nodes import GpuNode, GpuNodeError, pool_nodes


class DevError(RuntimeError):
    """The demo cannot start as asked; the message says what to change."""


@dataclass(frozen=True)
class DevOptions:
    directory: Path
    config_path: Path = DEFAULT_CONFIG
    tenants_path: Path = DEFAULT_TENANTS
    timeout_seconds: float = 600
    exit_when_ready: bool = False
    argocd: bool = False


def simulated_gpu_nodes(config_path: Path, config: OperatorConfig) -> list[GpuNode]:
    """The kwok-simulated nodes of every pool, or the pool field kwok cannot imitate, named before
    anything starts."""
    try:
        return pool_nodes(config)
    except GpuNodeError as error:
        raise DevError(f"--config {config_path}: {error}") from None


def load_tenant_manifests(path: Path) -> list[dict]:
    """Every GpuTenant in a YAML file or in the *.yaml files of a directory, validated by the API
    model so a mistake is named before anything starts."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise DevError(f"--tenants {path}: no GpuTenant YAML files there; pass a file or a directory of *.yaml")
    manifests = []
    for file in files:
        for document in yaml.safe_load_all(file.read_text()):
            if not document or document.get("kind") != KIND:
                continue
            try:
                GpuTenant.from_body(document)
            except ValidationError as error:
                raise DevError(f"{file}: invalid GpuTenant: {'; '.join(validation_problems(error))}") from None
            manifests.append(document)
    if not manifests:
        raise DevError(f"--tenants {path}: found no object of kind {KIND}")
    return manifests


def local_operator_config(config_path: Path) -> dict:
    """The operator config with the real vCluster chart from ../shared/third_party (no chart
    repository is reachable here); `expose_at_node` adds where its vClusters are reached."""
    try:
        OperatorConfig.load(config_path)
    except ValidationError as error:
        raise DevError(f"--config {config_path}: {'; '.join(validation_problems(error))}") from None
    except (OSError, ValueError) as error:
        raise DevError(f"--config {config_path}: {error}") from None
    document = yaml.safe_load(config_path.read_text()) or {}
    chart_version = yaml.safe_load((LOCAL_CHART / "Chart.yaml").read_text())["version"]
    document.setdefault("vcluster", {}).update(localPath=str(LOCAL_CHART), version=chart_version)
    return document


def expose_at_node(config_document: dict, node_address: str) -> dict:
    """NodePort exposure at the node's address: the operator and the kubeconfigs it issues run on
    the host, outside the node's network namespace, and reach each vCluster there."""
    document = {**config_document, "vcluster": {**config_document["vcluster"],
                                                "exposure": {"type": "NodePort", "address": node_address}}}
    OperatorConfig.model_validate(document)
    return document


def with_local_kubernetes(manifests: list[dict], version: str) -> list[dict]:
    """Tenants that leave spec.vcluster.kubernetesVersion unset get `version`, the distro image
    built here: the chart's default is a newer Kubernetes, whose image is not on the node."""
    return [{**m, "spec": {**m["spec"], "vcluster": {"kubernetesVersion": version, **(m["spec"].get("vcluster") or {})}}}
            for m in manifests]
