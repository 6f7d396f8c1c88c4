"""Where the pinned control-plane binaries live, and building them when they are missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")


def tools_bin_dir() -> Path:
    """The same directory tools/build.sh writes to (outside the clone, so fresh clones reuse it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = os.environ.get("GPUTENANT_TOOLS_DIR") or os.path.join(cache, "gputenant-operator", "tools")
    return Path(root).resolve() / "bin"


def ensure_tools() -> Path:
    """Return the binary directory, running tools/build.sh first if any binary is missing.

    The build's progress goes to stderr because a cold build takes minutes and a silent test
    session would look hung.
    """
    bin_dir = tools_bin_dir()
    if all((bin_dir / name).is_file() for name in BINARIES):
        return bin_dir
    print(f"kubeplane: control-plane tools missing in {bin_dir}; running {BUILD_SCRIPT}",
          file=sys.stderr, flush=True)
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=sys.stderr)
    return bin_dir
