"""`python -m bench.kubeconfig_latency`: what a tenant feels, apply -> a kubeconfig that works, on
REAL vClusters: the operator against a platform engineer's hand-written script.

A fresh plane with a node (the project's vCluster images, the real local-path-provisioner) and the
operator with the PRODUCTION resync (60 s; the e2e tests run at 5 s, which would hide a slow path).
Each round runs both variants, alternating which goes first so that load drifts fall on both:
- **operator**: `kubectl apply` of a Trusted GpuTenant; done when the owner kubeconfig the operator
  issued (its Secret in the tenant's namespace) answers `kubectl get namespaces`.
- **script**: what a platform engineer would type: the namespace and its ResourceQuota (as
  `gputenant render` prints them), `helm install` of the same chart with the values the operator
  renders, then wait for the vCluster's exported kubeconfig (`vc-<release>`) and `kubectl get
  namespaces` through it at the node port, polling as fast as the operator's variant is polled.
Both are polled every `--poll` seconds. Printed per round: apply -> working kubeconfig, apply -> the
control-plane pod Ready (as the poller first saw it) and the gap between the two; then medians and
the operator/script ratio, with the load average beside each row. Each variant's tenant is removed
before the next starts, so every vCluster starts on a node running no other.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.real_vcluster import operator_on_real_vclusters
from gputenant import naming
from gputenant.config.models import OperatorConfig
from kubeplane import ControlPlane
from kubeplane.operator_process import GPUTENANT
from kubeplane.tools import pinned_versions, require_tools

TIMEOUT_SECONDS = 600
OWNER_ROLE = "admin"


@dataclass(frozen=True)
class Timing:
    variant: str
    round: int
    working_s: float
    pod_ready_s: float | None
    load: float

    @property
    def after_pod_ready_s(self) -> float | None:
        return None if self.pod_ready_s is None else self.working_s - self.pod_ready_s


def tenant(name: str) -> dict:
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": f"{name}-owner"}],
                     "gpu": {"quota": 0.25}, "vcluster": {"kubernetesVersion": pinned_versions()["kube"]}}}


def rendered(config: Path, name: str) -> dict[str, dict]:
    """`gputenant render` of the tenant: its host objects by kind and the vCluster values document."""
    output = subprocess.run([str(GPUTENANT), "render", "-f", "-", "--config", str(config)], check=True,
                            capture_output=True, text=True, input=yaml.safe_dump(tenant(name))).stdout
    return {document["kind"]: document for document in yaml.safe_load_all(output) if document}


def answers(plane: ControlPlane, kubeconfig: Path) -> bool:
    return plane.kubectl("get", "namespaces", "--request-timeout=2s", kubeconfig_path=kubeconfig,
                         check=False).returncode == 0


def pod_ready(plane: ControlPlane, namespace: str, release: str) -> bool:
    pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-l", f"app=vcluster,release={release}",
                                    "-o", "json", check=False).stdout or '{"items": []}')["items"]
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for pod in pods for c in (pod.get("status") or {}).get("conditions") or [])


def secret_bytes(plane: ControlPlane, namespace: str, name: str) -> bytes | None:
    found = plane.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    return base64.b64decode(json.loads(found.stdout)["data"]["config"])


def poll_until_working(plane: ControlPlane, namespace: str, release: str, started: float, poll: float,
                       kubeconfig) -> tuple[float, float | None]:
    """Seconds from `started` until `kubeconfig()` (a path, or None while there is none) answers,
    and until the control-plane pod was first seen Ready."""
    pod_seen: float | None = None
    while time.monotonic() - started < TIMEOUT_SECONDS:
        if pod_seen is None and pod_ready(plane, namespace, release):
            pod_seen = time.monotonic() - started
        path = kubeconfig()
        if path is not None and answers(plane, path):
            return time.monotonic() - started, pod_seen
        time.sleep(poll)
    raise TimeoutError(f"no working kubeconfig for {release} in {TIMEOUT_SECONDS} s")


def by_operator(plane: ControlPlane, workdir: Path, config: Path, name: str,
                poll: float) -> tuple[float, float | None]:
    namespace = naming.host_namespace(name, OperatorConfig.load(config))
    path = workdir / f"{name}.kubeconfig"
    started = time.monotonic()
    plane.kubectl("apply", "--server-side", "--field-manager=bench", "-f", "-", input=yaml.safe_dump(tenant(name)))

    def issued() -> Path | None:
        config = secret_bytes(plane, namespace, naming.kubeconfig_secret_name(name, OWNER_ROLE))
        if config is None:
            return None
        path.write_bytes(config)
        return path
    timing = poll_until_working(plane, namespace, naming.release_name(name), started, poll, issued)
    plane.kubectl("delete", "gputenant", name, "--wait=true", "--timeout=300s")
    return timing


def by_script(plane: ControlPlane, workdir: Path, config: Path, name: str, poll: float) -> tuple[float, float | None]:
    documents = rendered(config, name)
    values = documents["VClusterValues"]
    namespace, release = values["namespace"], values["release"]
    values_file = workdir / f"{name}.values.yaml"
    values_file.write_text(yaml.safe_dump(values["values"]))
    chart = yaml.safe_load(config.read_text())["vcluster"]["localPath"]
    node_ip = plane.node.network.node_ip
    path = workdir / f"{name}.kubeconfig"
    started = time.monotonic()
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([documents["Namespace"], documents["ResourceQuota"]]))
    subprocess.run([str(plane.bin_dir / "helm"), "install", release, chart, "--namespace", namespace,
                    "--values", str(values_file), "--kubeconfig", str(plane.kubeconfig_path)],
                   check=True, capture_output=True, env={**os.environ, "HELM_CACHE_HOME": str(workdir / "helm")})

    def exported() -> Path | None:
        config_bytes = secret_bytes(plane, namespace, f"vc-{release}")
        service = plane.kubectl("get", "service", release, "-n", namespace, "-o", "json", check=False)
        if config_bytes is None or service.returncode != 0:
            return None
        [port] = [p["nodePort"] for p in json.loads(service.stdout)["spec"]["ports"] if p["name"] == "https"]
        document = yaml.safe_load(config_bytes)
        for cluster in document["clusters"]:
            cluster["cluster"]["server"] = f"https://{node_ip}:{port}"
        path.write_text(yaml.safe_dump(document))
        return path
    timing = poll_until_working(plane, namespace, release, started, poll, exported)
    subprocess.run([str(plane.bin_dir / "helm"), "uninstall", release, "--namespace", namespace, "--wait",
                    "--kubeconfig", str(plane.kubeconfig_path)], check=True, capture_output=True)
    plane.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=300s")
    return timing


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def print_report(timings: list[Timing]) -> None:
    print("# apply -> a working kubeconfig, real vCluster 0.36.1, production resync (60 s)\n")
    print(f"Machine: {os.cpu_count()} cores. Variants alternate within each round.\n")
    print("| round | variant | apply -> working kubeconfig (s) | apply -> pod Ready seen (s) | "
          "working after pod Ready (s) | load avg (1 min) |")
    print("|---|---|---|---|---|---|")
    for t in timings:
        ready = "-" if t.pod_ready_s is None else f"{t.pod_ready_s:.1f}"
        after = "-" if t.after_pod_ready_s is None else f"{t.after_pod_ready_s:.1f}"
        print(f"| {t.round} | {t.variant} | {t.working_s:.1f} | {ready} | {after} | {t.load:.1f} |")
    medians = {variant: statistics.median(t.working_s for t in timings if t.variant == variant)
               for variant in ("operator", "script")}
    print(f"\nMedians: operator {medians['operator']:.1f} s, script {medians['script']:.1f} s, "
          f"ratio {medians['operator'] / medians['script']:.2f}; operator's kubeconfig working after its pod "
          f"was Ready: median {median([t.after_pod_ready_s for t in timings if t.variant == 'operator' and t.after_pod_ready_s is not None])} s.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kubeconfig_latency", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both variants (default 3: medians of 3)")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between probes of either variant")
    args = parser.parse_args(argv)
    require_tools()
    workdir = Path(tempfile.mkdtemp(prefix="gputenant-kubeconfig-latency-"))
    timings: list[Timing] = []
    with operator_on_real_vclusters(workdir, resync_seconds=None) as (plane, config):
        for round_ in range(1, args.rounds + 1):
            order = ("operator", "script") if round_ % 2 else ("script", "operator")
            for variant in order:
                name = f"{variant[:2]}-{round_}"
                working, pod = (by_operator(plane, workdir, config, name, args.poll) if variant == "operator"
                                else by_script(plane, workdir, config, name, args.poll))
                timings.append(Timing(variant, round_, working, pod, os.getloadavg()[0]))
                print(f"round {round_} {variant}: {working:.1f} s", flush=True)
    print_report(timings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
