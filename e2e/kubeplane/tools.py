"""Where the pinned control-plane binaries live. `make tools` (tools/build.sh) builds them before
any test starts; the harness only checks they are there and says how to build them if not (a
build inside a test session would be killed by the test timeout on a cold machine)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO_ROOT / "tools" / "versions.env"
# binary -> the key of its pin in tools/versions.env (KEY_VERSION, lower case, _ as -)
PINS = {"etcd": "etcd", "kube-apiserver": "kube", "kube-controller-manager": "kube",
        "kubectl": "kube", "helm": "helm", "kubelet": "kube", "kube-proxy": "kube",
        "kube-scheduler": "kube", "pause": "pause", "httpsget": "httpsget", "spoofudp": "spoofudp", "kwok": "kwok",
        **{f"kai-{component}": "kai" for component in (
            "scheduler", "binder", "podgrouper", "queuecontroller", "podgroupcontroller")},
        "vcluster": "vcluster", "kine": "kine", "coredns": "coredns",
        "local-path-provisioner": "local-path-provisioner", "kube-router": "kube-router",
        "metallb-controller": "metallb", "metallb-speaker": "metallb", "argocd": "argocd"}

# Files of the Debian packages build.sh installs for the node (containerd, runc,
# containernetworking-plugins, iptables, conntrack, ipset, busybox-static, redis-server, git).
NODE_PACKAGE_FILES = [Path(p) for p in ("/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc",
                                        "/usr/lib/cni/bridge", "/usr/sbin/iptables",
                                        "/usr/sbin/conntrack", "/usr/sbin/ipset", "/bin/busybox",
                                        "/usr/bin/redis-server", "/usr/bin/git")]


class ToolsMissing(RuntimeError):
    """A pinned tool is missing or built at another version: `make tools` builds it."""


def tools_bin_dir() -> Path:
    """The same directory tools/build.sh writes to (outside the clone, so fresh clones reuse it)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = os.environ.get("GPUTENANT_TOOLS_DIR") or os.path.join(cache, "gputenant-operator", "tools")
    return Path(root).resolve() / "bin"


def versions_file() -> dict[str, str]:
    """tools/versions.env as it is written: KEY_NAME -> value."""
    pairs = (line.split("=", 1) for line in VERSIONS_FILE.read_text().splitlines()
             if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def pinned_versions() -> dict[str, str]:
    """The versions tools/versions.env pins, by key (kube, etcd, helm, kwok, kai, pause, httpsget,
    spoofudp, vcluster, kine, coredns, local-path-provisioner, kube-router, metallb, argocd)."""
    return {key.removesuffix("_VERSION").lower().replace("_", "-"): value
            for key, value in versions_file().items() if key.endswith("_VERSION")}


def missing_tools(bin_dir: Path) -> list[str]:
    """The binaries not there or stamped with another version than the pin, and the node's
    Debian package files not installed."""
    pinned = pinned_versions()
    missing = []
    for name, pin in PINS.items():
        stamp = bin_dir / f".{name}.version"
        if not (bin_dir / name).is_file() or not stamp.is_file() \
                or stamp.read_text().strip() != pinned[pin]:
            missing.append(f"{name} {pinned[pin]}")
    return missing + [str(path) for path in NODE_PACKAGE_FILES if not path.exists()]


def require_tools() -> Path:
    """The binary directory, once every pinned tool is there; else ToolsMissing naming what is
    missing and the command that builds it."""
    bin_dir = tools_bin_dir()
    missing = missing_tools(bin_dir)
    if missing:
        raise ToolsMissing(f"pinned tools missing or outdated in {bin_dir}: {', '.join(missing)}. "
                           f"Run `make tools` (tools/build.sh) first; `make test` and `make dev` run it "
                           f"before they start.")
    return bin_dir
