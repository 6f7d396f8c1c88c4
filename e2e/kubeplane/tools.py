"""Where the pinned control-plane binaries live. `make tools` (tools/build.sh) builds them before
any test starts; the harness only checks they are there and says how to build them if not (a
build inside a test session would be killed by the test timeout on a cold machine).

The Kubernetes version the harness runs is one choice, GPUTENANT_KUBE_VERSION (default the pin,
KUBE_VERSION): the oldest supported minor, KUBE_COMPAT_VERSION, is built only on request (`make
tools-compat`, into its own folder of the cache) so that CI builds one Kubernetes, and every
component a plane starts takes its binary from kube_bin_dir(), so a plane never mixes versions.
"""

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


KUBE_VERSION_VARIABLE = "GPUTENANT_KUBE_VERSION"
"""Names the Kubernetes version the harness runs (KUBE_VERSION or KUBE_COMPAT_VERSION)."""
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy",
                 "kubectl")
"""The binaries of k8s.io/kubernetes, built by one group of tools/build.sh at either version."""


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
    """The versions tools/versions.env pins, by key (kube, kube-compat, etcd, helm, kwok, kai, pause, httpsget,
    spoofudp, vcluster, kine, coredns, local-path-provisioner, kube-router, metallb, argocd)."""
    return {key.removesuffix("_VERSION").lower().replace("_", "-"): value
            for key, value in versions_file().items() if key.endswith("_VERSION")}


def is_built(bin_dir: Path, name: str, version: str) -> bool:
    """The binary is there with build.sh's stamp of `version` beside it."""
    stamp = bin_dir / f".{name}.version"
    return (bin_dir / name).is_file() and stamp.is_file() and stamp.read_text().strip() == version


def missing_tools(bin_dir: Path) -> list[str]:
    """The binaries not there or stamped with another version than the pin, and the node's
    Debian package files not installed."""
    pinned = pinned_versions()
    missing = [f"{name} {pinned[pin]}" for name, pin in PINS.items() if not is_built(bin_dir, name, pinned[pin])]
    return missing + [str(path) for path in NODE_PACKAGE_FILES if not path.exists()]


def kube_version() -> str:
    """The Kubernetes version the harness runs: GPUTENANT_KUBE_VERSION, else the pin. Only the two
    versions tools/build.sh builds are accepted, so a typo cannot fall back to the pin unseen."""
    pinned = pinned_versions()
    chosen = os.environ.get(KUBE_VERSION_VARIABLE) or pinned["kube"]
    if chosen not in (pinned["kube"], pinned["kube-compat"]):
        raise ToolsMissing(f"{KUBE_VERSION_VARIABLE}={chosen}: the harness runs Kubernetes {pinned['kube']} "
                           f"(KUBE_VERSION, the default) or {pinned['kube-compat']} (KUBE_COMPAT_VERSION) "
                           f"from tools/versions.env, nothing else")
    return chosen


def kube_bin_dir(version: str | None = None) -> Path:
    """Where the Kubernetes binaries of `version` (default: kube_version()) are: the pinned ones
    beside every other tool, another version's in a folder of its own (kube-<version>/bin, where
    `make tools-compat` puts them), so building it never replaces the pinned ones."""
    version = version or kube_version()
    if version == pinned_versions()["kube"]:
        return tools_bin_dir()
    return tools_bin_dir().parent / f"kube-{version}" / "bin"


def require_kube_tools() -> Path:
    """kube_bin_dir() once the chosen version's six binaries are built there; else ToolsMissing
    naming them and the make target that builds them (no test builds one)."""
    version = kube_version()
    bin_dir = kube_bin_dir(version)
    missing = [name for name in KUBE_BINARIES if not is_built(bin_dir, name, version)]
    if missing:
        compat = version != pinned_versions()["kube"]
        target = "`make tools-compat` (tools/build.sh --compat)" if compat else "`make tools` (tools/build.sh)"
        raise ToolsMissing(f"Kubernetes {version}" + (f" ({KUBE_VERSION_VARIABLE})" if compat else "")
                           + f" is not built in {bin_dir}: {', '.join(missing)} missing or built at another "
                           f"version. Run {target} first" + ("; `make test-compat` runs it before it starts."
                                                             if compat else "."))
    return bin_dir


def require_tools() -> Path:
    """The binary directory, once every pinned tool is there, and the Kubernetes binaries of the
    chosen version too (require_kube_tools); else ToolsMissing naming what is missing and the
    command that builds it."""
    bin_dir = tools_bin_dir()
    missing = missing_tools(bin_dir)
    if missing:
        raise ToolsMissing(f"pinned tools missing or outdated in {bin_dir}: {', '.join(missing)}. "
                           f"Run `make tools` (tools/build.sh) first; `make test` and `make dev` run it "
                           f"before they start.")
    require_kube_tools()
    return bin_dir
