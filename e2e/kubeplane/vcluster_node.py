"""A plane with a node made ready for REAL vClusters: the project's vCluster images imported into the
node's containerd, the GpuTenant and Queue CRDs, a default StorageClass backed by the real
local-path-provisioner (the chart keeps vCluster's data on a claim) and Argo CD's namespace. The real
node carries examples/config.yaml's cpuPool labels: it is the CPU node that tenant pods without GPUs
are pinned to. The session's node plane (tests' `vcluster_node`) and a fleet's second member
(test_fleet.py) are both made ready this way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gputenant.config.models import OperatorConfig
from kubeplane.fixtures import ARGOCD_NAMESPACE, install_crds, install_kai_queue_crd, label_cpu_node
from kubeplane.plane import ControlPlane
from kubeplane.storage import LocalPathProvisioner
from kubeplane.tools import REPO_ROOT
from kubeplane.vcluster_images import vcluster_images


@contextlib.contextmanager
def ready_for_real_vclusters(plane: ControlPlane) -> Iterator[ControlPlane]:
    plane.require_node().containerd.import_images(list(vcluster_images(plane.bin_dir).values()))
    label_cpu_node(plane, OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml").cpu_pool.node_selector)
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(plane)
    plane.kubectl("create", "namespace", ARGOCD_NAMESPACE)
    provisioner = LocalPathProvisioner().start(plane)
    try:
        yield plane
    finally:
        provisioner.stop()
