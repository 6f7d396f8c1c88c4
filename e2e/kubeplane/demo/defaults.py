"""Where the demo finds the project's files, and what it says about the simulation. Kept free of
heavy imports: the CLI builds its parser from these."""

from __future__ import annotations

import os
from pathlib import Path

import gputenant

SOURCE_ROOT = Path(gputenant.__file__).resolve().parents[2]
TENANT_CRD = SOURCE_ROOT / "crds" / "tenant.yaml"
LOCAL_CHART = SOURCE_ROOT / "charts" / "vcluster-local"
DEFAULT_CONFIG = SOURCE_ROOT / "examples" / "config.yaml"
DEFAULT_TENANTS = SOURCE_ROOT / "examples" / "tenants"
SIMULATION_NOTICE = (
    "NOTE: the vCluster control planes are SIMULATED. Containers cannot run here, so no vCluster pod\n"
    "starts; when a tenant's vCluster StatefulSet gets its Pod, a stand-in starts a second real\n"
    "kube-apiserver for that tenant and writes vc-<release> as vCluster would. Helm, the chart's\n"
    "objects, RBAC, quotas, the KAI Queue and the kubeconfigs are real.\n"
    "The GPU nodes are SIMULATED too: kwok keeps Node objects labelled and sized as the GPU Operator\n"
    "leaves them Ready; there are no GPUs here.")


def default_directory() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gputenant-operator" / "dev"
