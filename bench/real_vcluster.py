"""`python -m bench.real_vcluster`: what one REAL vCluster costs on this machine, and how many fit.

A fresh plane with a node (the project's vCluster images imported, the real local-path-provisioner
as default StorageClass), the operator (`gputenant run` on the host, the real chart from
../shared/third_party, NodePort exposure) and `--tenants` Trusted tenants: the first applied
alone, then the rest at once. Printed per tenant: seconds from `kubectl apply` to Ready (every
condition True at the current generation), and, after `--settle` seconds, the vCluster pod's
memory three ways: the pod cgroup's charge (cgroup v2 ``memory.current``, v1
``memory.usage_in_bytes``, page cache included), the kubelet's working set (what eviction and
`kubectl top` use) and the summed VmRSS of the pod's processes. How many fit is computed from those
figures and the node's allocatable CPU against the pod's CPU request: figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from kubeplane import ControlPlane, wait_for
from kubeplane.cgroups import hierarchies
from kubeplane.fixtures import ARGOCD_NAMESPACE, install_crds, install_kai_queue_crd
from kubeplane.operator_process import RESYNC_SECONDS, OperatorProcess, real_vcluster_config
from kubeplane.storage import LocalPathProvisioner
from kubeplane.tools import REPO_ROOT, pinned_versions, require_tools
from kubeplane.vcluster_images import vcluster_images

READY_TIMEOUT_SECONDS = 900


def tenant(name: str) -> dict:
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": f"{name}-owner"}],
                     "gpu": {"quota": 0.25}, "vcluster": {"kubernetesVersion": pinned_versions()["kube"]}}}


def is_ready(plane: ControlPlane, name: str) -> bool:
    body = plane.cluster_object("gputenant.io", "v1alpha1", "gputenants", name) or {}
    status = body.get("status") or {}
    conditions = status.get("conditions") or []
    return (status.get("observedGeneration") == body["metadata"]["generation"]
            and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions))


def apply_and_time(plane: ControlPlane, names: list[str]) -> dict[str, float]:
    """Seconds from applying `names` together to each one's Ready."""
    plane.kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-",
                  input=yaml.safe_dump_all([tenant(name) for name in names]))
    applied, ready = time.monotonic(), {}

    def all_ready() -> bool:
        for name in names:
            if name not in ready and is_ready(plane, name):
                ready[name] = time.monotonic() - applied
        return len(ready) == len(names)
    wait_for(all_ready, timeout=READY_TIMEOUT_SECONDS, interval=1, what=f"{names} Ready")
    return ready


def pod_cgroup(plane: ControlPlane, uid: str) -> tuple[Path, str] | None:
    """The pod's memory cgroup directory under the node's cgroupRoot and the file holding its charge."""
    for hierarchy in hierarchies():
        for file in ("memory.current", "memory.usage_in_bytes"):
            root = hierarchy / plane.node.cgroup.name
            if not (root / file).exists():
                continue
            for directory, _, _ in os.walk(root):
                if Path(directory).name in (f"pod{uid}", f"pod{uid.replace('-', '_')}"):
                    return Path(directory), file
    return None


def cgroup_pids(directory: Path) -> set[int]:
    pids: set[int] = set()
    for sub, _, _ in os.walk(directory):
        procs = Path(sub) / "cgroup.procs"
        if procs.exists():
            pids.update(int(pid) for pid in procs.read_text().split())
    return pids


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def vcluster_memory(plane: ControlPlane, name: str, summary: dict) -> dict[str, float]:
    namespace = f"tenant-{name}"
    pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", f"app=vcluster,release={name}",
                                    "-o", "json").stdout)["items"]
    [pod] = pods
    found = pod_cgroup(plane, pod["metadata"]["uid"])
    if found is None:
        raise RuntimeError(f"no memory cgroup for pod {namespace}/{pod['metadata']['name']}")
    directory, charge_file = found
    [stats] = [p for p in summary["pods"]
               if p["podRef"]["namespace"] == namespace and p["podRef"]["name"] == pod["metadata"]["name"]]
    return {"cgroup_mib": int((directory / charge_file).read_text()) / 2**20,
            "working_set_mib": stats["memory"]["workingSetBytes"] / 2**20,
            "rss_mib": sum(rss_bytes(pid) for pid in cgroup_pids(directory)) / 2**20,
            "cpu_request_m": sum(cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                                 for c in pod["spec"]["containers"])}


def cpu_millis(quantity: str) -> float:
    return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000


def mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def operator_on_real_vclusters(workdir: Path, resync_seconds: int | None = RESYNC_SECONDS
                               ) -> Iterator[tuple[ControlPlane, Path]]:
    """A fresh plane with a node ready for real vClusters (the project's images imported, the tenant
    and KAI Queue CRDs, Argo CD's namespace, the real local-path-provisioner) and the operator on
    the host (real chart, NodePort exposure) resyncing every `resync_seconds` (None: production).
    Yields the plane and the operator's configuration file."""
    with ControlPlane(node=True) as plane:
        plane.require_node().containerd.import_images(list(vcluster_images(plane.bin_dir).values()))
        install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
        install_kai_queue_crd(plane)
        plane.kubectl("create", "namespace", ARGOCD_NAMESPACE)
        provisioner = LocalPathProvisioner().start(plane)
        config = real_vcluster_config(plane, workdir / "config.yaml")
        operator = OperatorProcess(plane, config, workdir / "operator.log", resync_seconds=resync_seconds).start()
        try:
            yield plane, config
        finally:
            operator.stop()
            provisioner.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.real_vcluster", description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=3, help="real vClusters to start (default 3)")
    parser.add_argument("--settle", type=float, default=30, help="seconds after Ready before memory is read")
    args = parser.parse_args(argv)
    require_tools()
    workdir = Path(tempfile.mkdtemp(prefix="gputenant-real-vcluster-"))
    available_before = mem_available_mib()
    with operator_on_real_vclusters(workdir) as (plane, _):
        names = [f"real-{index}" for index in range(args.tenants)]
        seconds = apply_and_time(plane, names[:1])
        if names[1:]:
            seconds |= apply_and_time(plane, names[1:])
        time.sleep(args.settle)
        node = plane.require_node()
        summary = json.loads(plane.kubectl("get", "--raw", f"/api/v1/nodes/{node.name}/proxy/stats/summary").stdout)
        memory = {name: vcluster_memory(plane, name, summary) for name in names}
        allocatable = json.loads(plane.kubectl("get", "node", node.name, "-o", "json").stdout)["status"]["allocatable"]
    print("# A real vCluster (v0.36.1, the upstream chart) on this machine\n")
    print(f"Machine: {os.cpu_count()} cores, MemAvailable before the run {available_before / 1024:.1f} GiB, "
          f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print("| tenant | apply -> Ready (s) | cgroup charge (MiB) | working set (MiB) | RSS of its processes (MiB) |")
    print("|---|---|---|---|---|")
    for name in names:
        alone = " (alone)" if name == names[0] else f" (with {len(names) - 1} at once)"
        m = memory[name]
        print(f"| {name}{alone} | {seconds[name]:.1f} | {m['cgroup_mib']:.0f} | {m['working_set_mib']:.0f} "
              f"| {m['rss_mib']:.0f} |")
    working_set = statistics.mean(m["working_set_mib"] for m in memory.values())
    rss = statistics.mean(m["rss_mib"] for m in memory.values())
    request = max(m["cpu_request_m"] for m in memory.values())
    by_cpu = int(cpu_millis(allocatable["cpu"]) // request) if request else 0
    print(f"\nHow many fit (computed from the figures above): by the scheduler, node allocatable CPU "
          f"{allocatable['cpu']} / the pod's CPU request {request:.0f}m = {by_cpu}; by memory, MemAvailable "
          f"{available_before / 1024:.1f} GiB / mean RSS {rss:.0f} MiB = {int(available_before // rss)} (RSS counts "
          f"the mapped binaries, which the page cache shares between vClusters of one image) up to / mean working "
          f"set {working_set:.0f} MiB = {int(available_before // working_set)}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
