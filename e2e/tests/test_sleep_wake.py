"""Sleep and wake a tenant with a REAL vCluster (upstream chart v0.36.1 on the plane's real node):
``spec.sleep.asleep: true`` scales the control plane to zero and leaves no pod in the host namespace
(the GPU it requested no longer counts in the quota), while the Queue and the quota stay; ``false``
brings the control plane back, its Deployment's pod synced again and a ConfigMap made before sleep
still there (the data volume is kept).

The plane has no GPU hardware and, in this module, no KAI-Scheduler: the GPU pod stays Pending, so
"released" is shown by the host ResourceQuota's used GPUs (which counts every pod that is not
finished, scheduled or not).
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.images import TEST_IMAGE
from kubeplane.tools import pinned_versions

READY_TIMEOUT_SECONDS = 480
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""
SETTLE_TIMEOUT_SECONDS = 240
NAME = "sleeper"
NAMESPACE = f"tenant-{NAME}"
GPU_RESOURCE = "nvidia.com/gpu"

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"{REAL_VCLUSTER_CHART} is missing")

WORKER = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "worker", "namespace": "default"},
    "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "worker"}},
             "template": {"metadata": {"labels": {"app": "worker"}}, "spec": {"containers": [{
                 "name": "worker", "image": TEST_IMAGE, "command": ["sleep", "infinity"],
                 "resources": {"limits": {GPU_RESOURCE: "1", "cpu": "100m", "memory": "64Mi"}}}]}}},
}
KEPT = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kept", "namespace": "default"},
        "data": {"checkpoint": "step-4200"}}


def _condition(body: dict | None, condition_type: str) -> dict:
    return next((c for c in ((body or {}).get("status") or {}).get("conditions") or []
                 if c["type"] == condition_type), {})


def _current(body: dict | None) -> bool:
    return bool(body) and (body.get("status") or {}).get("observedGeneration") == body["metadata"]["generation"]


def _host_pods(plane: ControlPlane) -> list[str]:
    return plane.kubectl("get", "pods", "-n", NAMESPACE, "-o", "name").stdout.split()


def _gpus_used(plane: ControlPlane) -> str:
    quota = json.loads(plane.kubectl("get", "resourcequota", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return "".join(str(((q.get("status") or {}).get("used") or {}).get(f"requests.{GPU_RESOURCE}", ""))
                   for q in quota)


def _statefulset(plane: ControlPlane) -> dict:
    return json.loads(plane.kubectl("get", "statefulset", naming.release_name(NAME), "-n", NAMESPACE,
                                    "-o", "json").stdout)


@pytest.fixture(scope="module")
def sleeper(vcluster_node: ControlPlane, real_tenants, tmp_path_factory) -> list[str]:
    """The module's one real tenant, Ready; kubectl inside its virtual cluster with its admin kubeconfig
    (read from its Secret, reached at the node port the exposure names)."""
    real_tenants.apply(real_tenants.manifest(NAME, "Trusted", "sleeper-owner", gpus=1,
                                             vcluster={"kubernetesVersion": pinned_versions()["kube"]},
                                             kubeconfig={"roles": ["admin"]}))
    _wait_tenant(vcluster_node, real_tenants, lambda body: _condition(body, "Ready").get("status") == "True",
                 READY_TIMEOUT_SECONDS, "Ready")
    secret = yaml.safe_load(vcluster_node.kubectl("get", "secret", naming.kubeconfig_secret_name(NAME, "admin"),
                                                  "-n", NAMESPACE, "-o", "yaml").stdout)
    path = tmp_path_factory.mktemp("sleeper") / "admin.kubeconfig"
    path.write_bytes(base64.b64decode(secret["data"]["config"]))
    return [str(vcluster_node.bin_dir / "kubectl"), f"--kubeconfig={path}"]


def _wait_tenant(plane: ControlPlane, tenants, holds, timeout: float, what: str) -> dict:
    try:
        return wait_for(lambda: (body := tenants.get(NAME)) and _current(body) and holds(body) and body,
                        timeout=timeout, interval=2, what=f"tenant {NAME} {what}")
    except TimeoutError:
        raise AssertionError(f"tenant {NAME} not {what}: {(tenants.get(NAME) or {}).get('status')}\n"
                             f"operator log:\n{tenants.operator.log_tail()}") from None


def _inside(kubectl: list[str], *args: str, input: str | None = None) -> str:
    return subprocess.run([*kubectl, *args], input=input, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def _worker_synced(plane: ControlPlane) -> list[str]:
    return [pod for pod in _host_pods(plane) if pod.startswith("pod/worker-")]


def _sleep(plane: ControlPlane, asleep: bool) -> None:
    plane.kubectl("patch", "gputenant", NAME, "--type=merge", "-p", json.dumps({"spec": {"sleep": {"asleep": asleep}}}))


def test_sleep_releases_everything_on_the_host_and_wake_restores_it_with_the_data(vcluster_node, real_tenants,
                                                                                    sleeper):
    plane = vcluster_node
    _inside(sleeper, "apply", "-f", "-", input=yaml.safe_dump_all([KEPT, WORKER]))
    wait_for(lambda: _worker_synced(plane), timeout=SETTLE_TIMEOUT_SECONDS, interval=2,
             what="the worker's pod synced into the host namespace")
    wait_for(lambda: _gpus_used(plane) == "1", timeout=60, interval=1, what="the worker's GPU counted in the quota")

    _sleep(plane, True)
    started = time.monotonic()
    asleep = _wait_tenant(plane, real_tenants, lambda body: _condition(body, "Asleep").get("status") == "True",
                          SETTLE_TIMEOUT_SECONDS, "Asleep")
    print(f"\ntenant {NAME} Asleep {time.monotonic() - started:.1f}s after spec.sleep.asleep: true")
    assert _condition(asleep, "Asleep")["reason"] == "SleepRequested"
    assert (_condition(asleep, "Ready")["status"], _condition(asleep, "Ready")["reason"]) == ("False", "Asleep")
    assert _statefulset(plane)["spec"]["replicas"] == 0
    assert _host_pods(plane) == []
    wait_for(lambda: _gpus_used(plane) == "0", timeout=60, interval=1, what="the quota's used GPUs back to 0")
    # what stays declared while asleep: the Queue (GPU quota in KAI) and the namespace's quota
    assert plane.kubectl("get", "queues.scheduling.run.ai", NAME, check=False).returncode == 0
    assert plane.kubectl("get", "resourcequota", "-n", NAMESPACE, "-o", "name").stdout.strip()
    assert plane.kubectl("get", "pvc", "-n", NAMESPACE, "-o", "name").stdout.strip(), "the data volume is kept"

    _sleep(plane, False)
    started = time.monotonic()
    awake = _wait_tenant(plane, real_tenants, lambda body: _condition(body, "Ready").get("status") == "True",
                         READY_TIMEOUT_SECONDS, "Ready again")
    print(f"tenant {NAME} Ready {time.monotonic() - started:.1f}s after spec.sleep.asleep: false")
    assert (_condition(awake, "Asleep")["status"], _condition(awake, "Asleep")["reason"]) == ("False", "Awake")
    assert _statefulset(plane)["status"].get("readyReplicas") == 1
    kept = json.loads(_inside(sleeper, "get", "configmap", "kept", "-n", "default", "-o", "json"))
    assert kept["data"] == KEPT["data"]
    wait_for(lambda: _worker_synced(plane), timeout=SETTLE_TIMEOUT_SECONDS, interval=2,
             what="the worker's pod synced again after waking")
    wait_for(lambda: _gpus_used(plane) == "1", timeout=60, interval=1, what="the worker's GPU counted again")


OTHER = "light-sleeper"
"""A second tenant, asleep from the start (its control plane never runs): its owner is another
tenant's owner to the sleeper."""


def _wake_request(plane: ControlPlane, user: Path, value: str):
    return plane.kubectl("patch", "configmap", naming.WAKE_CONFIGMAP, "-n", NAMESPACE, "--type=merge",
                         "-p", json.dumps({"data": {"request": value}}), kubeconfig_path=user, check=False)


def test_an_owner_wakes_a_gitops_sleeping_tenant_others_are_refused_and_the_spec_does_not_flap(
        vcluster_node, real_tenants, sleeper):
    plane = vcluster_node
    real_tenants.apply(real_tenants.manifest(OTHER, "Trusted", "other-owner", gpus=1, sleep={"asleep": True},
                                             kubeconfig={"roles": ["admin"]}))
    wait_for(lambda: plane.kubectl("get", "rolebinding", naming.WAKE_BINDING_NAME, "-n", f"tenant-{OTHER}",
                                   check=False).returncode == 0, timeout=SETTLE_TIMEOUT_SECONDS, interval=2,
             what=f"tenant {OTHER}'s owners bound")
    # the spec as Git holds it, applied by a GitOps tool's field manager: asleep
    gitops = real_tenants.manifest(NAME, "Trusted", "sleeper-owner", gpus=1,
                                   vcluster={"kubernetesVersion": pinned_versions()["kube"]},
                                   kubeconfig={"roles": ["admin"]}, sleep={"asleep": True})
    plane.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=argocd-controller", "-f", "-",
                  input=yaml.safe_dump(gitops))
    asleep = _wait_tenant(plane, real_tenants, lambda body: _condition(body, "Asleep").get("status") == "True",
                          SETTLE_TIMEOUT_SECONDS, "Asleep (GitOps)")
    generation = asleep["metadata"]["generation"]

    stranger, other_owner = plane.user("stranger"), plane.user("other-owner")
    for refused_user in (stranger, other_owner):
        refused = _wake_request(plane, refused_user, "let-me-in")
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    other_cm = plane.kubectl("patch", "configmap", naming.WAKE_CONFIGMAP, "-n", f"tenant-{OTHER}", "--type=merge",
                             "-p", '{"data":{"request":"x"}}', kubeconfig_path=plane.user("sleeper-owner"),
                             check=False)
    assert other_cm.returncode != 0 and "forbidden" in other_cm.stderr.lower(), "an owner wakes only its own tenant"
    # the refused attempts changed nothing: still asleep
    assert _condition(real_tenants.get(NAME), "Asleep").get("status") == "True"

    assert _wake_request(plane, plane.user("sleeper-owner"), "monday-0900").returncode == 0
    started = time.monotonic()
    awake = _wait_tenant(plane, real_tenants, lambda body: _condition(body, "Ready").get("status") == "True",
                         READY_TIMEOUT_SECONDS, "Ready after the owner's wake request")
    print(f"\ntenant {NAME} Ready {time.monotonic() - started:.1f}s after its owner's wake request")
    assert _condition(awake, "Asleep")["reason"] == "WokenOnRequest"
    assert awake["status"]["wake"]["request"] == "monday-0900" and awake["status"]["wake"]["until"]
    assert _statefulset(plane)["status"].get("readyReplicas") == 1

    # Git still says asleep and is applied again (a sync): no spec change, no flapping
    plane.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=argocd-controller", "-f", "-",
                  input=yaml.safe_dump(gitops))
    for _ in range(4):  # several resync periods of the operator (RESYNC_SECONDS)
        time.sleep(5)
        body = real_tenants.get(NAME)
        assert body["spec"]["sleep"]["asleep"] is True and body["metadata"]["generation"] == generation
        assert _condition(body, "Asleep")["reason"] == "WokenOnRequest", body["status"]
        assert _statefulset(plane)["spec"].get("replicas", 1) == 1
    managers = {entry["manager"] for entry in real_tenants.get(NAME)["metadata"]["managedFields"]
                if "f:spec" in json.dumps(entry.get("fieldsV1", {}))}
    assert "gputenant" not in " ".join(managers) and "gpu-tenant-operator" not in managers, managers
