"""Two cells in one process against two host clusters (two real planes): each cell, built from its
own kubeconfig and registered into its own kopf registry (`handlers.register`), watches, reconciles
and installs Helm releases on its own plane only, while the process' $KUBECONFIG names a file that
does not exist. The product runs one cell per process; this is the ground several host clusters
build on (docs/architecture.md, "One cell per host cluster").

The planes have no node: each tenant's real vCluster chart is installed but its control plane never
starts, which is all this test needs (the namespace, Queue, Helm release and status each cell writes)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest
import yaml

from gputenant.config.models import OperatorConfig
from gputenant.config.settings import OperatorSettings
from gputenant.handlers import prepare, register
from kubeplane import ControlPlane, builders, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART, install_crds, install_kai_queue_crd
from kubeplane.tools import REPO_ROOT

CELL_USER = "gpu-tenant-operator"


def namespaces(plane: ControlPlane) -> set[str]:
    return set(plane.kubectl("get", "namespaces", "-o", "name").stdout.split())


def helm_releases(plane: ControlPlane) -> list[str]:
    return plane.helm("list", "--all-namespaces", "--all", "-q").stdout.split()


def reconciled(plane: ControlPlane, name: str) -> dict | None:
    """The tenant once a pass wrote its status for the current generation."""
    body = plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name) or {}
    status = body.get("status") or {}
    return body if status.get("observedGeneration") == body["metadata"]["generation"] else None


@pytest.fixture(scope="module")
def planes() -> Iterator[tuple[ControlPlane, ControlPlane]]:
    """Two planes of this module's own, each with the GpuTenant and KAI Queue CRDs: the session's
    plane is left without tenants whose finalizer no operator would remove."""
    with ControlPlane() as east, ControlPlane() as west:
        for each in (east, west):
            install_crds(each, REPO_ROOT / "crds" / "tenant.yaml")
            install_kai_queue_crd(each)
        yield east, west


class TwoCells:
    """Two cells, each on its own kopf registry, run by one event loop in one thread of this process."""

    def __init__(self, kubeconfigs: list[Path], config: OperatorConfig):
        self.cells = [prepare(config, str(path), OperatorSettings()) for path in kubeconfigs]
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._run(),), name="two-cells", daemon=True)

    async def _run(self) -> None:
        operators = []
        for cell in self.cells:
            registry = kopf.OperatorRegistry()
            register(registry, cell)
            operators.append(kopf.operator(registry=registry, clusterwide=True, standalone=True,
                                           stop_flag=self.stop_flag))
        await asyncio.gather(*operators)

    def __enter__(self) -> TwoCells:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=60)


def test_two_cells_in_one_process_each_reconcile_only_their_own_host_cluster(planes, tmp_path, monkeypatch):
    plane, second_plane = planes
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["vcluster"]["localPath"] = str(REAL_VCLUSTER_CHART)
    config = OperatorConfig.model_validate(document)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    kubeconfigs = [each.user(CELL_USER, groups=["system:masters"]) for each in (plane, second_plane)]
    with TwoCells(kubeconfigs, config):
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(builders.tenant("east-t")))
        second_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(builders.tenant("west-t")))
        for each, name in ((plane, "east-t"), (second_plane, "west-t")):
            wait_for(lambda each=each, name=name: reconciled(each, name), timeout=120,
                     what=f"tenant {name} reconciled on its own plane")
            wait_for(lambda each=each, name=name: name in helm_releases(each) or None, timeout=60,
                     what=f"the vCluster release of {name} on its own plane")
    assert "namespace/tenant-east-t" in namespaces(plane) and "namespace/tenant-east-t" not in namespaces(second_plane)
    assert "namespace/tenant-west-t" in namespaces(second_plane) and "namespace/tenant-west-t" not in namespaces(plane)
    assert "west-t" not in helm_releases(plane) and "east-t" not in helm_releases(second_plane)
    assert plane.cluster_object("scheduling.run.ai", "v2", "queues", "east-t") is not None
    assert second_plane.cluster_object("scheduling.run.ai", "v2", "queues", "east-t") is None
