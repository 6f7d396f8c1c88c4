"""Where the demo finds the project's files, and what it says is simulated (the GPU nodes, only).
Kept free of heavy imports: the CLI builds its parser from these."""

from __future__ import annotations

import os
from pathlib import Path

import gputenant

from ..vcluster_chart import chart_dir

SOURCE_ROOT = Path(gputenant.__file__).resolve().parents[2]
TENANT_CRD = SOURCE_ROOT / "crds" / "tenant.yaml"
LOCAL_CHART = chart_dir()
"""The vCluster chart the demo installs from a local path (config vcluster.localPath): the REAL
upstream chart, ../shared/third_party's or the one `make tools` made from the vCluster Go module
(kubeplane.vcluster_chart), as no chart repository is reachable here."""
DEFAULT_CONFIG = SOURCE_ROOT / "examples" / "config.yaml"
DEFAULT_TENANTS = SOURCE_ROOT / "examples" / "tenants"
SIMULATION_NOTICE = (
    "NOTE: each tenant's vCluster is the REAL vCluster 0.36.1 (the upstream chart, its pod running on\n"
    "this plane's node, its data on a claim the real local-path-provisioner fills), reached from here\n"
    "by NodePort at the node's address. The GPU nodes are SIMULATED: kwok keeps Node objects labelled\n"
    "and sized as the GPU Operator leaves them Ready; there are no GPUs here.")


def default_directory() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gputenant-operator" / "dev"
