"""CPU the admission guard spends per pod review and per GpuTenant watch event, on a quiet plane.

    .venv/bin/python bench/guard_cpu.py [--pods 500] [--tenants 50] [--rounds 5]

Starts a local control plane, the HAMi tenant of ``bench/webhook_latency.py`` and the guard in a
thread (``GuardThread``) on loopback with TLS, and reads that thread's CPU time from /proc:
- around `--pods` pods sent straight to the guard at 50 per second (``bench/guard_probe.py``:
  mutate and validate, as the API server sends them), with their round-trip p50/p99;
- around `--rounds` status patches of each of `--tenants` other GpuTenants, which the guard's
  tenant index receives as watch events (what onboarding sends it, besides pods).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import kubernetes

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "operator"), str(REPO_ROOT / "e2e")]

from bench.guard_probe import probe  # noqa: E402
from bench.measure import cpu_seconds  # noqa: E402
from bench.report import percentile  # noqa: E402
from bench.webhook_latency import CONFIG, GUARDED, USER, gpu_pod, setup  # noqa: E402
from gputenant.guard.standalone import GuardThread  # noqa: E402
from kubeplane import ControlPlane, wait_for  # noqa: E402
from kubeplane.process import free_ports  # noqa: E402

SETTLE_SECONDS = 5.0
"""Time for the guard to take in the watch events of a round of writes."""


class MeasuredGuard(GuardThread):
    """A GuardThread that knows the kernel id of its thread, to read that thread's CPU time."""

    native_id = 0

    def _run(self) -> None:
        self.native_id = threading.get_native_id()
        super()._run()

    def cpu_seconds(self) -> float:
        return cpu_seconds(os.getpid(), thread=self.native_id).own


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--tenants", type=int, default=50, help="at most 60: the bench pool has 64 GPUs")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="bench-guard-cpu-")) / "plane").start()
    try:
        setup(plane)
        (port,) = free_ports(1)
        cert_dir = Path(tempfile.mkdtemp(prefix="bench-guard-cpu-certs-"))
        url, ca_file = f"https://127.0.0.1:{port}", str(cert_dir / "ca-bundle.crt")
        with MeasuredGuard(plane.kubeconfig_path, CONFIG, cert_dir=cert_dir, port=port) as guard:
            wait_for(lambda: Path(ca_file).exists(), timeout=60, what="the guard's certificates")
            probe(url, ca_file, gpu_pod, GUARDED, USER, 100, 100)  # warm-up: imports, caches, connections
            before = guard.cpu_seconds()
            latencies = probe(url, ca_file, gpu_pod, GUARDED, USER, 50, args.pods)
            per_pod = (guard.cpu_seconds() - before) / args.pods
            per_event = tenant_events(plane, guard, args.tenants, args.rounds)
        print(f"guard CPU per pod (mutate + validate): {per_pod * 1000:.2f} ms; round trip p50 "
              f"{percentile(latencies, 0.5) * 1000:.2f} ms p99 {percentile(latencies, 0.99) * 1000:.2f} ms")
        print(f"guard CPU per GpuTenant watch event: {per_event * 1000:.2f} ms "
              f"({args.tenants} tenants x {args.rounds} status writes)")
    finally:
        plane.stop()
    return 0


def tenant_events(plane: ControlPlane, guard: MeasuredGuard, tenants: int, rounds: int) -> float:
    """CPU seconds of the guard per status write of another tenant."""
    names = [f"watched-{index:03d}" for index in range(tenants)]
    with plane.api_client() as client:
        api = kubernetes.client.CustomObjectsApi(client)
        for name in names:
            api.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", {
                "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
                "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": USER}], "gpu": {"quota": 1, "limit": 2}}})
        time.sleep(SETTLE_SECONDS)
        before = guard.cpu_seconds()
        for generation in range(rounds):
            for name in names:
                api.patch_cluster_custom_object_status("gputenant.io", "v1alpha1", "gputenants", name, {"status": {
                    "observedGeneration": generation, "conditions": [{
                        "type": "Ready", "status": "False", "reason": f"Round{generation}", "message": "onboarding",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        time.sleep(SETTLE_SECONDS)
        return (guard.cpu_seconds() - before) / (tenants * rounds)


if __name__ == "__main__":
    sys.exit(main())
