"""The tenant's view (render/tenant_view.py) for each example tenant, one per trust level: what a pod
must ask for in its mechanism, quota and limit in the mechanism's units, the queue with each pending
pod's reason, sleep, usage and IsolationVerified; and that nothing in it names another tenant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.guard.hami_caps import caps_by_size
from gputenant.policy.choose import decide
from gputenant.render.tenant_view import (
    EXAMPLE_KEY,
    VIEW_KEY,
    pods_of,
    queued_pods,
    tenant_view,
    view_configmap,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
EXAMPLES = {path.stem: path for path in sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))}


def example(stem: str):
    tenant = GpuTenant.model_validate(yaml.safe_load(EXAMPLES[stem].read_text()))
    decision = decide(tenant.name, tenant.spec, CONFIG)
    assert decision.possible, decision.message
    return tenant, decision


def host_pod(name: str, *, bound: bool, limits: dict | None = None, fraction: str | None = None,
             scheduler: str | None = None, phase: str = "Pending") -> dict:
    """A host pod as vCluster syncs it (its virtual name and namespace in annotations)."""
    annotations = {"vcluster.loft.sh/object-name": name, "vcluster.loft.sh/object-namespace": "default"}
    if fraction:
        annotations["gpu-fraction"] = fraction
    status: dict = {"phase": "Running" if bound else phase}
    if scheduler:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": scheduler}]
    return {"metadata": {"name": f"{name}-x-default-x-vc", "annotations": annotations},
            "spec": {"nodeName": "gpu-1" if bound else None,
                     "containers": [{"name": "main", "resources": {"limits": limits or {}}}]},
            "status": status}


def caps(decision) -> list[dict]:
    return [{"gpuFraction": f"{float(c.fraction):g}", "memoryMiB": c.memory_mib, "smPercent": c.sm_percent}
            for c in caps_by_size(decision)]


def test_internal_hami_tenant_asks_with_the_fraction_annotation_and_gets_caps_per_size():
    tenant, decision = example("internal")
    view = tenant_view(tenant, decision, {}, [], caps(decision))
    assert (view["trust"], view["mechanism"], view["pool"]) == ("Internal", "HAMi", "l4-hami")
    ask = view["ask"]
    assert ask["annotation"] == "gpu-fraction"
    assert ask["sizes"] == ["0.25", "0.5", "0.75"]
    assert "resource" not in ask
    assert [c["gpuFraction"] for c in ask["hamiCaps"]] == ask["sizes"]
    assert ask["hamiCaps"][0]["smPercent"] == 25
    assert ask["examplePod"]["metadata"]["annotations"] == {"gpu-fraction": "0.25"}
    assert set(ask["examplePod"]["spec"]["containers"][0]["resources"]["limits"]) == {"cpu", "memory"}
    assert view["quota"]["queue"] == {"name": decision.queue.name, "quota": 2, "limit": 3, "unit": "GPUs"}
    assert view["quota"]["resourceQuota"]["requests.nvidia.com/gpu"] == "0"


def test_trusted_time_slicing_tenant_asks_for_the_resource_up_to_its_limit():
    tenant, decision = example("trusted")
    view = tenant_view(tenant, decision, {}, [])
    assert (view["trust"], view["mechanism"]) == ("Trusted", "TimeSlicing")
    ask = view["ask"]
    resource = decision.pod_rules.gpu_resources[0]
    assert ask["resource"] == resource and ask["maxPerPod"] == decision.pod_rules.max_per_pod[resource]
    assert "hamiCaps" not in ask
    assert ask["examplePod"]["spec"]["containers"][0]["resources"]["limits"][resource] == "1"


def test_a_tenant_granted_no_gpu_is_told_so_instead_of_an_example():
    """gpu.quota 0 (NoGpuRequested): no GPU resource to ask for; the view used to fail the whole pass
    (IndexError), found by the in-process tier (e2e/tests/test_reconciler_inprocess_failures.py)."""
    tenant = GpuTenant.model_validate({"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant",
                                       "metadata": {"name": "cpu-only"},
                                       "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "o"}],
                                                "gpu": {"quota": 0}}})
    decision = decide(tenant.name, tenant.spec, CONFIG)
    assert decision.possible and decision.reason == "NoGpuRequested"
    ask = tenant_view(tenant, decision, {}, [])["ask"]
    assert ask == {"possible": False, "why": decision.message}


def test_untrusted_mig_tenant_asks_for_its_mig_profile_and_counts_slices_in_the_queue():
    tenant, decision = example("untrusted")
    view = tenant_view(tenant, decision, {}, [])
    assert (view["trust"], view["mechanism"]) == ("Untrusted", "MIG")
    assert view["ask"]["resource"] == "nvidia.com/mig-3g.40gb"
    pods = queued_pods([host_pod("train", bound=True, limits={"nvidia.com/mig-3g.40gb": "1"})], decision)
    assert pods[0].units == 3, "a 3g.40gb instance is 3 KAI GPU units (docs/units.md)"


def test_a_pod_over_the_queue_limit_is_pending_for_the_limit_in_the_tenants_words():
    tenant, decision = example("internal")
    host = [host_pod(f"run-{i}", bound=True, fraction="0.75") for i in range(4)]
    host.append(host_pod("waits", bound=False, fraction="0.5", scheduler="queue quota exceeded"))
    host.append(host_pod("cpu-only", bound=True))
    host.append(host_pod("done", bound=False, fraction="0.25", phase="Succeeded"))
    view = tenant_view(tenant, decision, {}, queued_pods(host, decision))
    assert view["queue"]["allocated"] == 3 and view["queue"]["pending"] == 1
    [pending] = [p for p in view["queue"]["pods"] if p["state"] == "Pending"]
    assert pending["name"] == "waits" and pending["gpus"] == 0.5
    assert pending["reason"].startswith(f"queue {decision.queue.name} at its limit of 3 GPUs (3 allocated")
    assert pending["scheduler"] == "queue quota exceeded"
    assert pods_of(view) == {("default", "waits"): pending["reason"]}
    assert "cpu-only" not in json.dumps(view) and "done" not in json.dumps(view)


def test_a_share_whose_hami_core_library_was_not_delivered_is_listed_as_not_started_with_why():
    """vCluster shows the tenant no status of the guard's init container: the view (and the Event it
    drives) says why the placed pod does not start, even once it has failed."""
    tenant, decision = example("internal")
    failed = host_pod("no-library", bound=True, fraction="0.25")
    failed["status"]["phase"] = "Failed"
    view = tenant_view(tenant, decision, {}, queued_pods(
        [failed, host_pod("fine", bound=True, fraction="0.25")], decision,
        {"no-library-x-default-x-vc": "exit 1: HAMi-core library /x is not in this image"}))
    states = {p["name"]: p for p in view["queue"]["pods"]}
    assert states["fine"]["state"] == "Running"
    assert states["no-library"]["state"] == "NotStarted"
    assert "could not be delivered, so the pod does not start: exit 1: HAMi-core library /x" in \
        states["no-library"]["reason"]
    assert pods_of(view) == {("default", "no-library"): states["no-library"]["reason"]}


def test_a_pod_within_the_limit_waits_for_what_the_scheduler_said():
    tenant, decision = example("internal")
    pods = queued_pods([host_pod("big", bound=False, fraction="0.5", scheduler="no node with a free 0.5 share")],
                       decision)
    [pending] = tenant_view(tenant, decision, {}, pods)["queue"]["pods"]
    assert pending["reason"] == "the scheduler found no place on pool l4-hami: no node with a free 0.5 share"


def test_sleep_usage_and_isolation_come_from_status_without_a_moving_clock():
    tenant, decision = example("internal")
    tenant.spec.sleep.idle = type(tenant.spec.sleep).model_validate({"idle": {"after": "2h"}}).idle
    status = {"conditions": [
        {"type": "Asleep", "status": "False", "reason": "Awake", "message": "woken"},
        {"type": "IsolationVerified", "status": "False", "reason": "Unattested", "message": "no canary ran",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "usage": {"window": "1h", "gpusHeld": 2, "gpuHoursHeld": 2.0, "gpuHoursUsed": 0.1, "idleGpuCount": 2,
                  "busyNotWorking": False, "allIdleSince": "2026-01-01T10:00:00Z",
                  "observedAt": "2026-01-01T11:00:00Z"}}
    view = tenant_view(tenant, decision, status, [])
    assert view["sleep"] == {"asleep": False, "state": "Awake", "idlePolicy": {
        "after": "2h", "allIdleSince": "2026-01-01T10:00:00Z", "sleepsAt": "2026-01-01T12:00:00Z"}}
    assert view["isolationVerified"] == {"status": "False", "reason": "Unattested", "message": "no canary ran"}
    assert view["usage"]["gpuHoursUsed"] == 0.1 and "observedAt" not in view["usage"]


@pytest.mark.parametrize("stem", sorted(EXAMPLES))
def test_the_configmap_names_no_other_tenant(stem):
    tenant, decision = example(stem)
    cm = view_configmap(tenant.name, f"tenant-{tenant.name}", tenant_view(tenant, decision, {}, [], caps(decision)))
    text = json.dumps(cm)
    for other in EXAMPLES:
        other_name = yaml.safe_load(EXAMPLES[other].read_text())["metadata"]["name"]
        if other != stem:
            assert other_name not in text
    assert json.loads(cm["data"][VIEW_KEY])["tenant"] == tenant.name
    assert yaml.safe_load(cm["data"][EXAMPLE_KEY])["kind"] == "Pod"


def test_the_same_inputs_give_the_same_configmap():
    """Nothing in the view moves by itself, so an unchanged tenant is never rewritten."""
    tenant, decision = example("trusted")
    first = view_configmap(tenant.name, "ns", tenant_view(tenant, decision, {}, []))
    assert first == view_configmap(tenant.name, "ns", tenant_view(tenant, decision, {}, []))


def test_gputenant_status_prints_why_a_pod_is_pending():
    from gputenant.commands.status import format_view

    tenant, decision = example("internal")
    host = [host_pod(f"run-{i}", bound=True, fraction="0.75") for i in range(4)]
    host.append(host_pod("waits", bound=False, fraction="0.5"))
    text = format_view(tenant_view(tenant, decision, {}, queued_pods(host, decision), caps(decision)))
    assert "Tenant recsys: trust Internal, mechanism HAMi, pool l4-hami" in text
    assert "annotate the pod gpu-fraction: one of 0.25, 0.5, 0.75" in text
    assert "gpu-fraction 0.25: capped at" in text
    assert f"Queue {decision.queue.name}: quota 2 GPUs, limit 3, allocated 3, pending pods 1" in text
    [row] = [line for line in text.splitlines() if line.startswith("default") and "waits" in line]
    assert "Pending" in row and f"queue {decision.queue.name} at its limit of 3 GPUs" in row


def test_a_gpu_pods_view_signature_moves_when_what_the_view_shows_of_it_does():
    from gputenant.render.tenant_view import pod_signature_for_view

    waiting = host_pod("train", bound=False, limits={"nvidia.com/gpu": "1"}, scheduler="queue at its limit")
    bound = host_pod("train", bound=True, limits={"nvidia.com/gpu": "1"})
    fraction = host_pod("infer", bound=False, fraction="0.5")
    assert pod_signature_for_view(waiting) != pod_signature_for_view(bound)
    assert pod_signature_for_view(fraction) is not None
    relabelled = {**bound, "metadata": {**bound["metadata"], "labels": {"x": "y"}}}
    assert pod_signature_for_view(relabelled) == pod_signature_for_view(bound)
    cpu_only = host_pod("web", bound=True, limits={"cpu": "1"})
    host_only = {**bound, "metadata": {"name": "not-synced", "annotations": {}}}
    assert pod_signature_for_view(cpu_only) is None and pod_signature_for_view(host_only) is None


def test_the_status_signature_moves_with_usage_and_isolation_only():
    from gputenant.render.tenant_view import status_signature_for_view

    status = {"usage": {"gpusHeld": 1}, "conditions": [
        {"type": "IsolationVerified", "status": "True", "reason": "Attested", "message": "ok"},
        {"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}
    ready_changed = {**status, "conditions": [status["conditions"][0], {**status["conditions"][1], "status": "False"}]}
    assert status_signature_for_view(ready_changed) == status_signature_for_view(status)
    assert status_signature_for_view({**status, "usage": {"gpusHeld": 2}}) != status_signature_for_view(status)
    unverified = {**status, "conditions": [{**status["conditions"][0], "status": "False"}]}
    assert status_signature_for_view(unverified) != status_signature_for_view(status)
