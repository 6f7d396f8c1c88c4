"""The measured runs: onboarding by the operator and by the baseline scripts, the operator's steady
state and a quota change, and its memory with nothing to do.

Each onboarding run gets a fresh control plane, so no run sees another's objects, and every
variant is measured with the same instruments: the apiserver's audit log (by user), the Helm
shim's log, /proc for the operator process, and the LIGHTWEIGHT vCluster stand-in's Secret times (bench/vcluster_shared.py).
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
import yaml

from bench.measure import (
    CpuSeconds,
    HelmShim,
    HelmTally,
    RequestTally,
    RssSampler,
    cpu_seconds,
    kubeconfig_waits,
    rss_mib,
    tally_requests,
)
from bench.source import Source
from bench.tenants import BaselineInput, generate_tenants, operator_config, render_baseline_inputs
from bench.vcluster_shared import SharedVirtualCluster
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import install_crds, install_kai_queue_crd
from kubeplane.operator_process import OperatorProcess

OPERATOR_USER = "bench-operator"
BASELINE_USER = "bench-baseline"
TENANT_PREFIX = "bench-"
ADMIN_KUBECONFIG_SUFFIX = "-kubeconfig-admin"
"""The owners' kubeconfig Secret is ``<tenant>-kubeconfig-admin`` (``gputenant.naming.kubeconfig_secret_name``;
not imported: `--source` may measure another commit's operator)."""
READY_POLL_SECONDS = 1.0


@dataclass
class OnboardingResult:
    variant: str
    tenants: int
    seconds_to_secrets: float | None
    """Start until every tenant's ``vc-<release>`` Secret exists: the baseline's "ready"."""
    seconds_to_ready: float | None
    """Start until every GpuTenant is Ready at its generation (operator only: kubeconfigs issued too)."""
    requests: RequestTally
    helm: HelmTally
    cpu: CpuSeconds | None = None
    apiserver_cpu: float | None = None
    """CPU seconds of the host kube-apiserver during the run (everyone's requests, audit included)."""
    rss_peak_mib: float | None = None
    rss_steady_mib: float | None = None
    ready: int | None = None
    """Tenants Ready at the end (operator runs)."""
    load_average: float | None = None
    """The machine's 1-minute load average when the run ended: what else weighed on it."""
    kubeconfig_waits: list[float] = field(default_factory=list)
    """Per tenant, seconds from its control-plane pod turning ready to the operator's first write of
    its owners' kubeconfig Secret (operator runs; `measure.kubeconfig_waits`)."""
    notes: list[str] = field(default_factory=list)


@dataclass
class SteadyResult:
    tenants: int
    window_seconds: float
    tenants_resynced: int
    requests: RequestTally
    helm: HelmTally
    cpu: CpuSeconds
    apiserver_cpu: float
    """CPU seconds of the host kube-apiserver in the window: the cost the operator's reads cause."""
    drift_repair_seconds: dict[str, float | None] = field(default_factory=dict)
    """After the window: seconds from another hand's change of an owned object to its repair, by
    what was changed (None: not repaired within the bound)."""
    rss_at_rest_mib: float | None = None
    """The operator's median RSS over the window's last 5 s: every tenant Ready for a whole resync
    period, the onboarding burst over (its memory handed back, `gputenant.loops.memory`)."""


@dataclass
class QuotaChangeResult:
    tenant: str
    seconds_to_ready: float
    requests: RequestTally
    write_namespaces: dict[str, int]
    helm: HelmTally


@dataclass
class MemoryResult:
    tenants: int
    rss_steady_mib: float
    rss_peak_mib: float
    ready: int | None = None
    """How many of the tenants were Ready when memory was read (None: not counted, all for idle)."""


# -- the plane ------------------------------------------------------------------------------------

@contextmanager
def bench_plane(workdir: Path, source: Source) -> Iterator[ControlPlane]:
    """A fresh audited control plane with the source's GpuTenant CRD and KAI's Queue CRD."""
    plane = ControlPlane(workdir / "plane", audit=True)
    plane.start()
    try:
        install_crds(plane, source.root / "crds" / "tenant.yaml")
        install_kai_queue_crd(plane)
        yield plane
    finally:
        plane.stop()


def apply_tenants(plane: ControlPlane, tenants: list[dict]) -> None:
    """All tenants in one `kubectl apply --server-side`, as a platform engineer would."""
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all(tenants, sort_keys=False))


def tenant_bodies(plane: ControlPlane) -> list[dict]:
    with plane.api_client() as client:
        return kubernetes.client.CustomObjectsApi(client).list_cluster_custom_object(
            "gputenant.io", "v1alpha1", "gputenants")["items"]


def is_ready(body: dict) -> bool:
    status = body.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return ready.get("status") == "True" and status.get("observedGeneration") == body["metadata"].get("generation")


def apiserver_cpu(plane: ControlPlane) -> float:
    return cpu_seconds(plane.pids["kube-apiserver"]).own


def not_ready_reasons(plane: ControlPlane) -> dict[str, int]:
    """How many not-Ready tenants stand at each failing condition reason, e.g. {"HelmUnavailable": 159}."""
    reasons: dict[str, int] = {}
    for body in tenant_bodies(plane):
        if not is_ready(body):
            failing = [c for c in (body.get("status") or {}).get("conditions") or []
                       if c.get("status") != "True" and c.get("type") != "Ready"]
            reason = failing[0]["reason"] if failing else "NoStatusYet"
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def wait_until(probe, timeout: float, what: str, interval: float = READY_POLL_SECONDS):
    return wait_for(probe, timeout=timeout, interval=interval, what=what)


# -- the operator process -------------------------------------------------------------------------

def start_operator(plane: ControlPlane, workdir: Path, source: Source, shim: HelmShim,
                   resync_seconds: float, timeout: float = 60) -> OperatorProcess:
    """`gputenant run` of the frozen `source` as its own identity (so the audit log tells its
    requests apart), its helm going through the counting shim, with the production deletion retry;
    returned once its liveness endpoint answers. The source's package goes first on the import path,
    before whatever this process's PYTHONPATH holds (bench.memory_profile's tracemalloc hooks)."""
    return OperatorProcess(plane, operator_config(workdir, source.root), workdir / "operator.log",
                           env=source.env({"GPUTENANT_TOOLS_DIR": str(shim.tools_dir),
                                           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}),
                           resync_seconds=resync_seconds, deletion_retry_seconds=None, user=OPERATOR_USER,
                           command=source.gputenant(), cwd=source.root, liveness=True).start().wait_serving(timeout)


# -- onboarding -----------------------------------------------------------------------------------

def onboard_with_operator(plane: ControlPlane, workdir: Path, source: Source, count: int, *,
                          resync_seconds: float, timeout: float, then=None,
                          partial_ok: bool = False) -> OnboardingResult:
    """Apply `count` tenants at once and wait until all are Ready. `then(operator, sim, sampler,
    result)` runs afterwards with everything still up (the steady-state and quota measurements).
    With `partial_ok` (memory runs), a timeout ends the run with what was reached instead of
    failing it: `seconds_to_ready` stays None and `ready` says how many made it."""
    shim = HelmShim(workdir / "helm-shim", plane.bin_dir / "helm")
    tenants = generate_tenants(count, TENANT_PREFIX, source.root / "examples" / "tenants")
    namespaces = {f"tenant-{t['metadata']['name']}" for t in tenants}
    with SharedVirtualCluster(plane) as sim:
        operator = start_operator(plane, workdir, source, shim, resync_seconds)
        try:
            with RssSampler(operator.pid) as sampler:
                audit_start, helm_start = plane.audit_offset(), shim.offset()
                cpu_start = cpu_seconds(operator.pid)
                apiserver_start = apiserver_cpu(plane)
                started = time.monotonic()
                apply_tenants(plane, tenants)

                def all_ready() -> bool:
                    if operator.process.poll() is not None:
                        raise RuntimeError(f"the operator exited:\n{operator.log_tail()}")
                    bodies = tenant_bodies(plane)
                    return len(bodies) == count and all(map(is_ready, bodies))
                try:
                    wait_until(all_ready, timeout, f"{count} tenants Ready")
                    seconds_to_ready = time.monotonic() - started
                except TimeoutError:
                    ready = sum(map(is_ready, tenant_bodies(plane)))
                    if not partial_ok:
                        raise TimeoutError(f"{ready}/{count} tenants Ready after {timeout}s; lightweight vCluster stand-in errors "
                                           f"{sim.errors[-3:]}; operator log:\n{operator.log_tail()}") from None
                    seconds_to_ready = None
                cpu = cpu_seconds(operator.pid) - cpu_start
                last_secret = sim.last_written(namespaces)
                result = OnboardingResult(
                    "operator", count, last_secret - started if last_secret else None, seconds_to_ready,
                    tally_requests(plane.audit_events(audit_start), OPERATOR_USER), shim.tally(helm_start), cpu,
                    apiserver_cpu(plane) - apiserver_start)
                result.ready = sum(map(is_ready, tenant_bodies(plane)))
                result.kubeconfig_waits = kubeconfig_waits(plane.audit_events(audit_start), OPERATOR_USER,
                                                           ADMIN_KUBECONFIG_SUFFIX)
                if seconds_to_ready is None:
                    result.notes.append(f"{result.ready}/{count} tenants Ready when the {timeout:.0f} s bound ended "
                                        f"the run; conditions of the others: {not_ready_reasons(plane)}")
                settle_until = time.monotonic() + 10
                time.sleep(10)
                result.rss_peak_mib = sampler.peak
                result.rss_steady_mib = sampler.steady(settle_until - 5)
                if sim.errors:
                    result.notes.append(f"lightweight vCluster stand-in errors: {sim.errors[-3:]}")
                if then is not None:
                    then(plane, operator, shim, sampler, result)
                return result
        finally:
            operator.stop()


BASELINE_SCRIPT = """#!/usr/bin/env bash
# What a platform engineer would script per tenant, from `gputenant render` output.
# usage: onboard-tenant.sh <objects.yaml> <values.yaml> <namespace> <release>
set -euo pipefail
kubectl apply --server-side --field-manager=platform-script -f "$1"
helm upgrade --install "$4" {chart} --namespace "$3" --values "$2"
"""


def onboard_with_script(plane: ControlPlane, workdir: Path, source: Source, count: int, parallelism: int,
                        timeout: float) -> OnboardingResult:
    """The baseline: the per-tenant script run for every tenant serially (parallelism 1) or through
    `xargs -P parallelism`; done when every ``vc-<release>`` Secret exists (the lightweight stand-in writes
    it as soon as the release's Pod is admitted, exactly as for the operator)."""
    shim = HelmShim(workdir / "helm-shim", plane.bin_dir / "helm")
    tenants = generate_tenants(count, TENANT_PREFIX, source.root / "examples" / "tenants")
    inputs = render_baseline_inputs(tenants, operator_config(workdir, source.root), workdir / "rendered",
                                    source.gputenant("render"), source.env(dict(os.environ)))
    script = workdir / "onboard-tenant.sh"
    script.write_text(BASELINE_SCRIPT.format(chart=shlex.quote(str(source.local_chart))))
    script.chmod(0o755)
    arguments = workdir / "tenants.args"
    arguments.write_text("".join(_script_line(item) for item in inputs))
    kubeconfig = plane.user(BASELINE_USER, ["system:masters"])
    env = plane.env(kubeconfig)
    env["PATH"] = f"{shim.bin_dir}{os.pathsep}{env['PATH']}"
    command = (f"while read -r objects values namespace release; do {shlex.quote(str(script))} "
               f"\"$objects\" \"$values\" \"$namespace\" \"$release\"; done < {shlex.quote(str(arguments))}"
               if parallelism == 1 else
               f"xargs -P {parallelism} -L 1 {shlex.quote(str(script))} < {shlex.quote(str(arguments))}")
    namespaces = {item.namespace for item in inputs}
    with SharedVirtualCluster(plane) as sim:
        audit_start, helm_start = plane.audit_offset(), shim.offset()
        children_before = _children_cpu()
        apiserver_start = apiserver_cpu(plane)
        started = time.monotonic()
        script_run = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                                    timeout=timeout)
        if script_run.returncode:
            raise RuntimeError(f"baseline script failed ({script_run.returncode}):\n{script_run.stderr[-2000:]}")
        wait_until(lambda: sim.secrets_written(namespaces) == count, timeout,
                   f"{count} vc Secrets after the baseline script", interval=0.2)
        variant = "serial script" if parallelism == 1 else f"script, xargs -P {parallelism}"
        result = OnboardingResult(variant, count, sim.last_written(namespaces) - started, None,
                                  tally_requests(plane.audit_events(audit_start), BASELINE_USER),
                                  shim.tally(helm_start), CpuSeconds(0.0, _children_cpu() - children_before),
                                  apiserver_cpu(plane) - apiserver_start)
        if sim.errors:
            result.notes.append(f"lightweight vCluster stand-in errors: {sim.errors[-3:]}")
        return result


def _children_cpu() -> float:
    """CPU seconds of every finished child of this process, kubectl and helm of the script included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _script_line(item: BaselineInput) -> str:
    return " ".join(map(shlex.quote, (str(item.objects_path), str(item.values_path), item.namespace,
                                      item.release))) + "\n"


# -- steady state and one change ------------------------------------------------------------------

def measure_resync(plane: ControlPlane, operator: OperatorProcess, shim: HelmShim, count: int) -> SteadyResult:
    """One full drift-timer period with nothing changed: every tenant's timer fires once in it."""
    window = operator.resync_seconds + 5
    audit_start, helm_start = plane.audit_offset(), shim.offset()
    cpu_start, apiserver_start = cpu_seconds(operator.pid), apiserver_cpu(plane)
    time.sleep(window)
    cpu = cpu_seconds(operator.pid) - cpu_start
    apiserver = apiserver_cpu(plane) - apiserver_start
    requests = tally_requests(plane.audit_events(audit_start), OPERATOR_USER)
    resynced = {selector for selector in requests.listed_selectors if selector.startswith("gputenant.io/tenant=")}
    return SteadyResult(count, window, len(resynced), requests, shim.tally(helm_start), cpu, apiserver)


DRIFT_REPAIR_BOUND_SECONDS = 150.0


def measure_drift_repair(plane: ControlPlane, tenant: str) -> dict[str, float | None]:
    """Delete the tenant's NetworkPolicy, then edit its ResourceQuota, as another hand would; the
    seconds until each is back as the operator renders it (polled every 0.1 s)."""
    namespace = f"tenant-{tenant}"
    selector = f"gputenant.io/tenant={tenant}"

    def first(kind: str) -> dict:
        items = json.loads(plane.kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "json").stdout)["items"]
        return items[0]

    def timed(changed, repaired) -> float | None:
        changed()
        started = time.monotonic()
        try:
            wait_until(repaired, DRIFT_REPAIR_BOUND_SECONDS, "the repair", interval=0.1)
        except TimeoutError:
            return None
        return time.monotonic() - started

    policy = first("networkpolicy")
    name, uid = policy["metadata"]["name"], policy["metadata"]["uid"]

    def policy_back() -> bool:
        found = plane.kubectl("get", "networkpolicy", name, "-n", namespace, "-o", "json", check=False)
        return found.returncode == 0 and json.loads(found.stdout)["metadata"]["uid"] != uid
    deleted = timed(lambda: plane.kubectl("delete", "networkpolicy", name, "-n", namespace), policy_back)
    quota = first("resourcequota")
    hard = quota["spec"]["hard"]
    key = sorted(hard)[0]

    def quota_back() -> bool:
        found = plane.kubectl("get", "resourcequota", quota["metadata"]["name"], "-n", namespace, "-o", "json")
        return json.loads(found.stdout)["spec"]["hard"].get(key) == hard[key]
    edited = timed(lambda: plane.kubectl("patch", "resourcequota", quota["metadata"]["name"], "-n", namespace,
                                         "--type=merge", "-p", json.dumps({"spec": {"hard": {key: "12345"}}})),
                   quota_back)
    return {"NetworkPolicy deleted": deleted, f"ResourceQuota {key} edited": edited}


def measure_quota_change(plane: ControlPlane, shim: HelmShim, tenant: str, timeout: float = 120) -> QuotaChangeResult:
    """Raise one tenant's CPU quota and wait until it is Ready at the new generation."""
    audit_start, helm_start = plane.audit_offset(), shim.offset()
    started = time.monotonic()
    plane.kubectl("patch", "gputenant", tenant, "--type=merge", "-p", '{"spec":{"quotas":{"cpu":"48"}}}')

    def ready() -> bool:
        body = next(b for b in tenant_bodies(plane) if b["metadata"]["name"] == tenant)
        return is_ready(body)
    wait_until(ready, timeout, f"{tenant} Ready after the quota change", interval=0.2)
    seconds = time.monotonic() - started
    events = plane.audit_events(audit_start)
    namespaces: dict[str, int] = {}
    for event in events:
        if event.get("user", {}).get("username") == OPERATOR_USER and event.get("verb") in (
                "create", "update", "patch", "delete"):
            ref = event.get("objectRef") or {}
            key = ref.get("namespace") or f"(cluster) {ref.get('resource')}/{ref.get('name')}"
            namespaces[key] = namespaces.get(key, 0) + 1
    return QuotaChangeResult(tenant, seconds, tally_requests(events, OPERATOR_USER), namespaces,
                             shim.tally(helm_start))


# -- memory with no tenants -----------------------------------------------------------------------

def idle_memory(plane: ControlPlane, workdir: Path, source: Source, seconds: float = 10) -> MemoryResult:
    shim = HelmShim(workdir / "helm-shim", plane.bin_dir / "helm")
    operator = start_operator(plane, workdir, source, shim, resync_seconds=60)
    try:
        with RssSampler(operator.pid) as sampler:
            since = time.monotonic()
            time.sleep(seconds)
            return MemoryResult(0, sampler.steady(since), rss_mib(operator.pid)[1])
    finally:
        operator.stop()
