"""Several host clusters on this machine as a fleet (docs/fleet.md): a hub plane running the real Argo
CD, members registered there as Argo CD cluster Secrets (client certificates of a member user in
system:masters, as `argocd cluster add` registers a cluster with its admin's rights), and the chart's
fleet objects rendered by `helm template` (the decisions ConfigMap, the ApplicationSet, the
GpuTenantPlacement CRD), so the e2e runs what the chart ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kubeplane.plane import ControlPlane
from kubeplane.tools import REPO_ROOT

CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
ARGOCD_CLUSTER_TYPE_LABEL = "argocd.argoproj.io/secret-type"
MEMBER_LABEL = "fleet.gputenant.io/member"
CORDON_LABEL = "fleet.gputenant.io/cordoned"
MEMBER_USER = "argocd-manager"


def cluster_secret(name: str, member: ControlPlane, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Argo CD cluster Secret of `member`, named `name`, labelled a fleet member with `labels`."""
    kubeconfig = yaml.safe_load(member.user(MEMBER_USER, groups=["system:masters"]).read_text())
    cluster, user = kubeconfig["clusters"][0]["cluster"], kubeconfig["users"][0]["user"]
    config = {"tlsClientConfig": {"caData": cluster["certificate-authority-data"],
                                  "certData": user["client-certificate-data"], "keyData": user["client-key-data"]}}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": f"cluster-{name}", "namespace": namespace,
                         "labels": {ARGOCD_CLUSTER_TYPE_LABEL: "cluster", MEMBER_LABEL: "true", **labels}},
            "type": "Opaque",
            "stringData": {"name": name, "server": cluster["server"], "config": json.dumps(config)}}


def register_member(hub: ControlPlane, name: str, member: ControlPlane, namespace: str, labels: dict[str, str]) -> None:
    hub.kubectl("apply", "-f", "-", input=json.dumps(cluster_secret(name, member, namespace, labels)))


def label_member(hub: ControlPlane, name: str, namespace: str, label: str) -> None:
    """`label` is `key=value` to set, or `key-` to remove, on the member's cluster Secret."""
    hub.kubectl("label", "--overwrite", "-n", namespace, "secret", f"cluster-{name}", label)


def chart_fleet_objects(hub: ControlPlane, repo_url: str, requeue_seconds: int, path: str = "tenants") -> list[dict]:
    """What the chart renders for a hub (templates/fleet.yaml): the placement CRD, the generator's
    ConfigMap, the ApplicationSet and the RBAC in Argo CD's namespace."""
    rendered = hub.helm("template", "gto", str(CHART), "--show-only", "templates/fleet.yaml",
                        "--set", "config.fleet.role=hub", "--set", "config.apiServerNetworks={127.0.0.1/32}",
                        "--set", f"fleet.applicationSet.repoURL={repo_url}",
                        "--set", f"fleet.applicationSet.path={path}",
                        "--set", f"fleet.applicationSet.requeueAfterSeconds={requeue_seconds}").stdout
    return [document for document in yaml.safe_load_all(rendered) if document]


def hub_config(path: Path, application_set: str, *, poll_seconds: float, max_age_seconds: float) -> Path:
    """examples/config.yaml as a hub's: no pools (the hub installs no tenant), fleet.role hub, the
    ApplicationSet's name as the chart sets it."""
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["pools"] = []
    document["fleet"] = {"role": "hub", "pollSeconds": poll_seconds, "reportMaxAgeSeconds": max_age_seconds,
                         "memberTimeoutSeconds": 3, "applicationSetName": application_set}
    path.write_text(yaml.safe_dump(document))
    return path


def as_member(path: Path, pools: list[dict], *, poll_seconds: float, max_age_seconds: float) -> Path:
    """An operator configuration file made a member's, with `pools` only."""
    document = yaml.safe_load(path.read_text())
    document["pools"] = pools
    document["fleet"] = {"role": "member", "pollSeconds": poll_seconds, "reportMaxAgeSeconds": max_age_seconds}
    path.write_text(yaml.safe_dump(document))
    return path
