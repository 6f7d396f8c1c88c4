"""Where the pinned control-plane binaries live, and building them when they are missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "build.sh"
# binary -> the key of its pin in `build.sh --versions`
PINS = {"etcd": "etcd", "kube-apiserver": "kube", "kube-controller-manager": "kube",
        "kubectl": "kube", "helm": "helm", "kubelet": "kube", "kube-proxy": "kube",
        "kube-scheduler": "kube", "pause": "pause", "httpsget": "httpsget", "kwok": "kwok",
        **{f"kai-{component}": "kai" for component in (
            "scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")},
        "vcluster": "vcluster", "kine": "kine", "coredns": "coredns",
        "local-path-provisioner": "local-path-provisioner", "kube-router": "kube-router",
        "metallb-controller": "metallb", "metallb-speaker": "metallb"}

# Files of the Debian packages build.sh installs for the node (containerd, runc,
# containernetworking-plugins, iptables, conntrack, ipset, busybox-static).
NODE_PACKAGE_FILES = [Path(p) for p in ("/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc",
                                        "/usr/lib/cni/bridge", "/usr/sbin/iptables",
                                        "/usr/sbin/conntrack", "/usr/sbin/ipset", "/bin/busybox")]


def tools_bin_dir() -> Path:
    """The same directory tools/build.sh writes to (outside the clone, so fresh clones reuse it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = os.environ.get("GPUTENANT_TOOLS_DIR") or os.path.join(cache, "gputenant-operator", "tools")
    return Path(root).resolve() / "bin"


def pinned_versions() -> dict[str, str]:
    """The versions build.sh pins, by key (kube, etcd, helm, kwok, kai, pause, httpsget, vcluster,
    kine, coredns, local-path-provisioner, kube-router, metallb, argocd; argocd is built only on
    request, see kubeplane.argocd)."""
    output = subprocess.run(["bash", str(BUILD_SCRIPT), "--versions"], check=True,
                            capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in output.split())


def _up_to_date(bin_dir: Path) -> bool:
    """Every binary is there and stamped with the version build.sh pins today, and the node's
    Debian packages are installed."""
    pinned = pinned_versions()
    for name, pin in PINS.items():
        stamp = bin_dir / f".{name}.version"
        if not (bin_dir / name).is_file() or not stamp.is_file() \
                or stamp.read_text().strip() != pinned[pin]:
            return False
    return all(path.exists() for path in NODE_PACKAGE_FILES)


def ensure_tools() -> Path:
    """Return the binary directory, running tools/build.sh first if a binary is missing or built
    at another version. The build's progress goes to stderr: a cold build takes minutes and a
    silent test session would look hung."""
    bin_dir = tools_bin_dir()
    if _up_to_date(bin_dir):
        return bin_dir
    print(f"kubeplane: control-plane tools missing or outdated in {bin_dir}; running {BUILD_SCRIPT}",
          file=sys.stderr, flush=True)
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=sys.stderr)
    return bin_dir
