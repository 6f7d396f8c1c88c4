"""The node's container runtime: Debian's containerd (1.6) with runc, its root, state, socket, CNI
configuration and network-namespace mounts all under the plane's directory.

Two settings make it work on this machine kind: `restrict_oom_score_adj` (the kernel withholds
CAP_SYS_RESOURCE, so a sandbox's oom_score_adj of -998 is refused and runc fails with "can't get
final child's PID from pipe: EOF"), and a fully qualified `sandbox_image` that is imported, never
pulled (no registry is reachable). runc, not crun: crun refuses the hybrid cgroup layout.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from pathlib import Path

from .cgroups import NodeCgroup
from .netns import NodeNetwork
from .process import PlaneError, Process

CONTAINERD = "/usr/bin/containerd"
CTR = "/usr/bin/ctr"
RUNC = "/usr/sbin/runc"
CNI_BIN_DIR = "/usr/lib/cni"
CNI_RESULTS_DIR = Path("/var/lib/cni/results")
"""libcni's result cache; containerd 1.6 gives no setting for it."""
CRI_NAMESPACE = "k8s.io"
POD_CIDR = "10.244.0.0/24"
"""Pod addresses inside the node's network namespace; every node may use the same range."""

_SOCKET_PATH_MAX = 108

_CONFIG = """\
version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{runc_root}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{cni_conf_dir}"
"""


def cni_config(data_dir: Path) -> dict:
    """A bridge (`cni0`, inside the node's namespace) with host-local addresses from POD_CIDR,
    whose allocations live under the plane's directory instead of /var/lib/cni."""
    return {
        "cniVersion": "0.4.0", "name": "kubeplane",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(data_dir),
                      "ranges": [[{"subnet": POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


class Containerd:
    def __init__(self, directory: Path, network: NodeNetwork, cgroup: NodeCgroup, sandbox_image: str):
        self.directory = directory
        self.network = network
        self.cgroup = cgroup
        self.sandbox_image = sandbox_image
        self.socket = directory / "containerd.sock"
        self.config_path = directory / "config.toml"
        self.cni_conf_dir = directory / "cni" / "net.d"
        self.root = directory / "root"
        """Images and snapshots: a few GiB once the node's images are imported."""
        self._process: Process | None = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, log_path: Path, timeout: float = 60) -> Containerd:
        if len(f"{self.socket}.ttrpc") >= _SOCKET_PATH_MAX:
            raise PlaneError(f"containerd's socket path {self.socket} is too long for a unix socket "
                             f"({_SOCKET_PATH_MAX} bytes with its .ttrpc twin): use a shorter plane directory")
        self.cni_conf_dir.mkdir(parents=True, exist_ok=True)
        (self.cni_conf_dir / "10-kubeplane.conflist").write_text(
            json.dumps(cni_config(self.directory / "cni" / "ipam"), indent=2))
        self.config_path.write_text(_CONFIG.format(
            root=self.root, state=self.directory / "state", socket=self.socket,
            sandbox_image=self.sandbox_image, runc=RUNC, runc_root=self.directory / "state" / "runc",
            cni_bin_dir=CNI_BIN_DIR, cni_conf_dir=self.cni_conf_dir))
        self._process = Process("containerd", self.network.enter(
            [CONTAINERD, f"--config={self.config_path}", "--log-level=warn"]), log_path)
        self.cgroup.add_daemon(self._process.pid)
        deadline = time.monotonic() + timeout
        while self.ctr("version", check=False).returncode:
            self._process.check_running()
            if time.monotonic() > deadline:
                self.stop()
                raise PlaneError(f"containerd did not answer on {self.socket} within {timeout}s; "
                                 f"last lines of {log_path}:\n{self._process.log_tail()}")
            time.sleep(0.05)
        return self

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """containerd's own CLI against this containerd, in the namespace the CRI plugin uses."""
        result = subprocess.run([CTR, f"--address={self.socket}", f"--namespace={CRI_NAMESPACE}", *args],
                                capture_output=True, text=True)
        if check and result.returncode:
            raise PlaneError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def import_images(self, archives: list[Path]) -> None:
        for archive in archives:
            self.ctr("images", "import", str(archive))

    def containers(self) -> list[str]:
        return self.ctr("containers", "list", "--quiet").stdout.split()

    def remove_containers(self) -> None:
        """Kill and delete every container (sandboxes included), so their shims exit and the
        rootfs mounts go; what this misses, the cgroup and mount sweeps of the node remove."""
        for container in self.containers():
            self.ctr("tasks", "delete", "--force", container, check=False)
            self.ctr("containers", "delete", container, check=False)

    def network_results(self) -> list[Path]:
        """libcni's cached results of this containerd's sandboxes (its bridge network's, which name
        its IPAM directory, and the loopback entries of the same sandboxes). libcni keeps them in
        CNI_RESULTS_DIR, outside the plane's directory, and drops one only on a CNI DEL, which a
        sandbox removed with ctr, or still being torn down when the node stops, never gets."""
        ipam = str(self.directory / "cni" / "ipam")
        entries = []
        for path in sorted(CNI_RESULTS_DIR.glob("*")) if CNI_RESULTS_DIR.is_dir() else []:
            try:
                entry = json.loads(path.read_text())
                entries.append((path, entry["containerId"], base64.b64decode(entry["config"]).decode()))
            except (OSError, ValueError, KeyError):
                continue
        sandboxes = {sandbox for _, sandbox, config in entries if ipam in config}
        return [path for path, sandbox, _ in entries if sandbox in sandboxes]

    def remove_network_results(self) -> None:
        for path in self.network_results():
            path.unlink(missing_ok=True)

    def stop(self) -> None:
        if self._process:
            self._process.stop()
            self._process = None

    def remove_root(self) -> None:
        """Drop the image store of a stopped containerd with nothing mounted from it. A plane kept
        for its logs would otherwise keep GiBs of images nobody reads, and a few failed runs fill
        the disk until etcd cannot create its WAL."""
        shutil.rmtree(self.root, ignore_errors=True)
