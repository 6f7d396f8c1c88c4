"""Admission-guard latency under bursts of pod creations against a real apiserver.

    .venv/bin/python bench/webhook_latency.py [--rates 10 50 100] [--seconds 3] [--guard process|thread]
    .venv/bin/python bench/webhook_latency.py --onboard 200 [--rate 50] [--repeats 3]

Starts a local control plane (or attaches to KUBEPLANE_DIR), one HAMi tenant (the heaviest
mutation: queue, scheduler, pool selector, toleration and the KAI ConfigMap prefix of a GPU share), and the guard
on loopback with TLS, in a process of its own as ``gputenant run`` serves it (``--guard thread``:
inside this process, as earlier rounds measured it, sharing the load generator's interpreter). For each rate it creates `rate x seconds` GPU pods as the tenant's user,
paced at that rate, and measures each creation end to end; the same burst into a namespace of no
tenant is the baseline without webhooks; ``--repeats`` rounds alternate the two so that load
drifts fall on both, and the table pools their samples. The apiserver's own histogram gives the mean time it
spent waiting on each webhook. Prints one table (the figures in docs/admission-guard.md).

With ``--onboard N`` the guard is measured while the operator onboards N tenants at once (its
reconciliation at full load, vCluster pods played by the LIGHTWEIGHT shared stand-in, bench/vcluster_shared.py): a first tenant is made
Ready, then the N are applied and ``--repeats`` bursts of dry-run GPU pods (every webhook runs, no
pod is stored, so the quota never fills) are sent at ``--rate`` into the first tenant's namespace.
The guard is the one ``gputenant run --webhook-host`` serves, as deployed. Each guarded burst is
followed by the same burst into a namespace of no tenant (no webhook: the API server's own latency
under that load). Prints p50/p99 per burst, the API server's mean wait on each pod webhook, and
the medians.

Each burst is also sent straight to the guard's HTTPS endpoint (``bench/guard_probe.py``: the two
AdmissionReviews the API server would send, as the tenant's user), which gives the guard's own
latency without the API server's. On this machine the API server, etcd and the load generator
share the operator's two cores, where a cluster runs the control plane on other machines:
``--operator-cpu N`` stands for that, running the operator (reconciler, guard and helm processes)
on CPU N alone and everything else this script started on the other CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import kubernetes
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "operator"), str(REPO_ROOT / "e2e")]

from bench.guard_probe import probe_at_priority  # noqa: E402
from bench.measure import HelmShim, paced  # noqa: E402
from bench.report import percentile  # noqa: E402
from bench.tenants import generate_tenants, operator_config  # noqa: E402
from bench.vcluster_shared import SharedVirtualCluster  # noqa: E402
from gputenant import naming  # noqa: E402
from gputenant.config.models import OperatorConfig  # noqa: E402
from gputenant.guard.flags import add_webhook_arguments  # noqa: E402
from gputenant.guard.standalone import GuardProcess, GuardThread  # noqa: E402
from kubeplane import ControlPlane, wait_for  # noqa: E402
from kubeplane.fixtures import install_crds, install_kai_queue_crd  # noqa: E402
from kubeplane.operator_process import OperatorProcess  # noqa: E402
from kubeplane.process import free_ports  # noqa: E402

TENANT = "bench-team"
GUARDED = f"tenant-{TENANT}"
UNGUARDED = "bench-no-tenant"
USER = "bench-team-dev"
CONFIG = OperatorConfig.model_validate({"pools": [{
    "name": "hami", "mode": "HAMi", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920, "gpus": 64,
    "nodeSelector": {"gputenant.io/pool": "hami"},
    "tolerations": [{"key": "gputenant.io/pool", "operator": "Equal", "value": "hami", "effect": "NoSchedule"}]}]})


def gpu_pod() -> dict:
    """One quarter-GPU share of the HAMi tier (a KAI GPU fraction, docs/units.md), named: the guard
    writes a share's KAI ConfigMap prefix from its name."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"burst-{uuid.uuid4().hex[:12]}", "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"containers": [{"name": "main", "image": "registry.example/train:1"}]}}


def setup(plane: ControlPlane) -> Path:
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    with plane.api_client() as client:
        kubernetes.client.CustomObjectsApi(client).create_cluster_custom_object(
            "gputenant.io", "v1alpha1", "gputenants",
            {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": TENANT},
             "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": USER}], "gpu": {"quota": 4, "limit": 64}}})
        plane.create_namespace(GUARDED, labels=naming.tenant_labels(TENANT, "namespace"))
        plane.create_namespace(UNGUARDED)
        for namespace in (GUARDED, UNGUARDED):
            kubernetes.client.RbacAuthorizationV1Api(client).create_namespaced_role_binding(namespace, {
                "metadata": {"name": "bench-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]})
    return plane.user(USER)


def burst(core: kubernetes.client.CoreV1Api, namespace: str, rate: int, count: int,
          dry_run: bool = False) -> tuple[list[float], float]:
    """Create `count` pods paced at `rate` per second; each creation's latency (s), and the achieved rate."""
    def create(_: int) -> float:
        began = time.monotonic()
        core.create_namespaced_pod(namespace, gpu_pod(), **({"dry_run": "All"} if dry_run else {}))
        return time.monotonic() - began

    return paced(rate, count, create)

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[10, 50, 100], help="pods per second")
    parser.add_argument("--seconds", type=float, default=3.0, help="burst length; pods = rate x seconds")
    parser.add_argument("--onboard", type=int, help="measure while the operator onboards this many tenants")
    parser.add_argument("--rate", type=int, default=50, help="with --onboard: pods per second")
    parser.add_argument("--repeats", type=int, default=3, help="bursts per rate (with --onboard: during the onboarding)")
    parser.add_argument("--guard", choices=("process", "thread"), default="process",
                        help="the guard in a process of its own, as deployed (default), or a thread of this one")
    parser.add_argument("--operator-cpu", type=int, help="with --onboard: the operator on this CPU alone, "
                        "the control plane and the load generator on the others (as on separate machines)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.onboard:
        return during_onboarding(args)

    directory = os.environ.get("KUBEPLANE_DIR")
    plane = ControlPlane.attach(directory) if directory else ControlPlane().start()
    try:
        user = setup(plane)
        with guard_served(plane, args.guard):
            configuration = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=str(user), client_configuration=configuration)
            configuration.connection_pool_maxsize = 32
            with kubernetes.client.ApiClient(configuration) as client:
                core = kubernetes.client.CoreV1Api(client)
                wait_for(lambda: _guarded(core), timeout=60, what="the guard to serve the tenant namespace")
                rows = []
                for rate in args.rates:
                    count = int(rate * args.seconds)
                    guarded: list[float] = []
                    baseline: list[float] = []
                    achieved: list[float] = []
                    before = plane.admission_webhooks()
                    for _ in range(args.repeats):
                        seconds, pace = burst(core, GUARDED, rate, count)
                        guarded += seconds
                        achieved.append(pace)
                        baseline += burst(core, UNGUARDED, rate, count)[0]
                    after = plane.admission_webhooks()
                    means = {name.split(".")[1]: (after[name][0] - before.get(name, (0, 0))[0])
                             / max(1, after[name][1] - before.get(name, (0, 0))[1])
                             for name in after if name.startswith("pods.")}
                    rows.append((rate, count * args.repeats, statistics.median(achieved), guarded, baseline, means,
                                 os.getloadavg()[0]))
        print(f"guard: {args.guard}; {args.repeats} alternating rounds of {args.seconds:g} s per rate")
        print_table(rows)
    finally:
        plane.stop()
    return 0


@contextlib.contextmanager
def guard_served(plane: ControlPlane, how: str):
    """The guard for the bench: ``process``, the child process ``gputenant run --webhook-host``
    starts (its own interpreter, as deployed), or ``thread``, inside this process."""
    cert_dir = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    if how == "thread":
        with GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=cert_dir) as guard:
            yield guard
        return
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    [port] = free_ports(1)
    flags = parser.parse_args(["--webhook-host", "127.0.0.1", "--webhook-port", str(port),
                               "--webhook-cert-dir", str(cert_dir)])
    guard = GuardProcess(plane.kubeconfig_path, CONFIG, flags).start()
    try:
        yield guard
    finally:
        guard.stop()


def _guarded(core: kubernetes.client.CoreV1Api) -> bool:
    try:
        return core.create_namespaced_pod(GUARDED, gpu_pod(), dry_run="All").spec.scheduler_name == "kai-scheduler"
    except kubernetes.client.ApiException:
        return False


def during_onboarding(args: argparse.Namespace) -> int:
    """Guard latency while the operator onboards `args.onboard` tenants (see the module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-guard-onboard-"))
    plane = ControlPlane(workdir / "plane").start()
    operator: OperatorProcess | None = None
    try:
        install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
        install_kai_queue_crd(plane)
        config_path = operator_config(workdir, REPO_ROOT)
        document = yaml.safe_load(config_path.read_text())
        for pool in document["pools"]:
            pool.pop("gpus", None)  # N copies of three examples overbook the example pools on purpose
        config_path.write_text(yaml.safe_dump(document, sort_keys=False))
        shim = HelmShim(workdir / "helm-shim", plane.bin_dir / "helm")
        webhook, = free_ports(1)
        flags = ["--webhook-host", "127.0.0.1", "--webhook-port", str(webhook), "--webhook-cert-dir",
                 str(workdir / "guard-certs")]
        with SharedVirtualCluster(plane):
            operator = OperatorProcess(plane, config_path, workdir / "operator.log", flags,
                                       env={"GPUTENANT_TOOLS_DIR": str(shim.tools_dir),
                                            "PYTHONPATH": str(REPO_ROOT / "operator")},
                                       resync_seconds=None, deletion_retry_seconds=None,
                                       user="gputenant-operator", liveness=True).start()
            first = {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": TENANT},
                     "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": USER}],
                              "gpu": {"quota": 1, "limit": 4}}}
            plane.kubectl("apply", "-f", "-", input=json.dumps(first))
            plane.create_namespace(UNGUARDED)
            configuration = kubernetes.client.Configuration()
            kubernetes.config.load_kube_config(config_file=str(plane.kubeconfig_path), client_configuration=configuration)
            configuration.connection_pool_maxsize = 32
            with kubernetes.client.ApiClient(configuration) as client:
                core = kubernetes.client.CoreV1Api(client)
                wait_for(lambda: _guarded(core), timeout=300, what="the guard to serve the first tenant")
                if args.operator_cpu is not None:
                    pin_operator(operator.pid, args.operator_cpu)
                guard_url, guard_ca = f"https://127.0.0.1:{webhook}", str(workdir / "guard-certs" / "ca-bundle.crt")
                tenants = generate_tenants(args.onboard, "onboard-", REPO_ROOT / "examples" / "tenants")
                plane.kubectl("apply", "--server-side", "-f", "-",
                              input=yaml.safe_dump_all(tenants, sort_keys=False))
                rows = []
                probe_niceness = 0
                count = int(args.rate * args.seconds)
                for _ in range(args.repeats):
                    before = plane.admission_webhooks()
                    latencies, achieved = burst(core, GUARDED, args.rate, count, dry_run=True)
                    after = plane.admission_webhooks()
                    direct, probe_niceness = probe_at_priority(guard_url, guard_ca, gpu_pod, GUARDED, USER,
                                                               args.rate, count)
                    baseline, _ = burst(core, UNGUARDED, args.rate, count, dry_run=True)
                    waited = sum(after[name][0] - before.get(name, (0, 0))[0] for name in after
                                 if name.startswith("pods.")) / count
                    rows.append((percentile(latencies, 0.5), percentile(latencies, 0.99), achieved,
                                 percentile(baseline, 0.5), percentile(baseline, 0.99), waited,
                                 percentile(direct, 0.5), percentile(direct, 0.99)))
                ready = sum(1 for t in kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object(
                    "gputenant.io", "v1alpha1", "gputenants")["items"]
                    if any(c.get("type") == "Ready" and c.get("status") == "True"
                           for c in (t.get("status") or {}).get("conditions", [])))
        for index, (p50, p99, achieved, base50, base99, waited, guard50, guard99) in enumerate(rows, 1):
            print(f"burst {index}: {args.rate}/s asked, {achieved:.0f}/s achieved; guarded p50 {p50 * 1000:.1f} ms "
                  f"p99 {p99 * 1000:.1f} ms; no guard p50 {base50 * 1000:.1f} ms p99 {base99 * 1000:.1f} ms; "
                  f"webhooks {waited * 1000:.1f} ms per pod; guard alone p50 {guard50 * 1000:.1f} ms "
                  f"p99 {guard99 * 1000:.1f} ms")
        medians = [statistics.median(r[i] for r in rows) * 1000 for i in (0, 1, 3, 4, 5, 6, 7)]
        print(f"onboarding {args.onboard} tenants ({ready} Ready after the bursts), CPUs "
              f"{'shared by all' if args.operator_cpu is None else f'{args.operator_cpu} for the operator alone'}, medians of {len(rows)} bursts: "
              f"guarded p50 {medians[0]:.1f} ms p99 {medians[1]:.1f} ms; no guard p50 {medians[2]:.1f} ms "
              f"p99 {medians[3]:.1f} ms; webhooks {medians[4]:.1f} ms per pod; guard alone p50 {medians[5]:.1f} ms "
              f"p99 {medians[6]:.1f} ms (probe at niceness {probe_niceness})")
    finally:
        if operator is not None:
            operator.stop()
        plane.stop()
    return 0


def pin_operator(operator_pid: int, cpu: int) -> None:
    """Every thread of the operator's processes on `cpu`, and of every other process this script
    started (the plane, the load generator) on the remaining CPUs. Linux keeps the affinity per
    thread; threads and processes started later inherit their parent thread's."""
    others = os.sched_getaffinity(0) - {cpu}
    if not others:
        raise SystemExit(f"--operator-cpu {cpu} leaves no CPU for the rest of the benchmark")
    operator = _descendants(operator_pid) | {operator_pid}
    for pid in (_descendants(os.getpid()) | {os.getpid()}) - operator:
        _set_affinity(pid, others)
    for pid in operator:
        _set_affinity(pid, {cpu})


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = set(), [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _set_affinity(pid: int, cpus: set[int]) -> None:
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(thread), cpus)
    except (FileNotFoundError, ProcessLookupError):
        pass  # ended meanwhile


def print_table(rows) -> None:
    header = ("rate/s", "pods", "achieved/s", "guarded p50 ms", "guarded p99 ms", "no-guard p50 ms",
              "no-guard p99 ms", "p99 ratio", "mutate mean ms", "validate mean ms", "load avg")
    lines = [header] + [(
        str(rate), str(count), f"{achieved:.0f}",
        f"{percentile(guarded, 0.5) * 1000:.1f}", f"{percentile(guarded, 0.99) * 1000:.1f}",
        f"{percentile(baseline, 0.5) * 1000:.1f}", f"{percentile(baseline, 0.99) * 1000:.1f}",
        f"{percentile(guarded, 0.99) / percentile(baseline, 0.99):.2f}",
        f"{means.get('mutate', 0) * 1000:.1f}", f"{means.get('validate', 0) * 1000:.1f}", f"{load:.1f}",
    ) for rate, count, achieved, guarded, baseline, means, load in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
