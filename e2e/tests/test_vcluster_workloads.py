"""A tenant's workload flows from inside its REAL virtual cluster (vCluster v0.36.1, installed by
the operator, `gputenant run`) through vCluster's syncer and the admission guard into the real
KAI-Scheduler, onto a SIMULATED GPU node (kwok; the only simulated part is the GPU hardware).

The tenant works as it would: with the admin kubeconfig the operator issued, from outside the node
(the NodePort exposure), inside its own virtual cluster. What it can see of each outcome is what
vCluster syncs back to the virtual pod (status, events); each test asserts that view, and the host
side (the host pod's queue, scheduler, node, the guard's refusal) from the platform's. vCluster
v0.36.1 shows the tenant a host refusal as a Warning event `SyncError` on the virtual pod quoting
it (the guard's message, the quota's), and syncs back the host pod's status conditions and the
events about it (KAI's `Unschedulable`, from `kai-scheduler`).

One module-scoped Untrusted tenant on whole GPUs (the `h100-exclusive` pool): Untrusted gets the
strictest rules and the restricted Pod Security Standard in the virtual cluster and on the host.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from gputenant import naming
from gputenant.render.tenant_view import VIRTUAL_NAME
from gputenant.render.tenant_view import VIRTUAL_NAMESPACE as VIEW_NAMESPACE
from kubeplane import ControlPlane, builders, wait_for
from kubeplane.builders import RESTRICTED
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.images import TEST_IMAGE
from kubeplane.kai import SCHEDULER_NAME
from kubeplane.kai_fixtures import KaiCluster
from kubeplane.virtual_cluster import (
    HOST_NAME_ANNOTATION,
    VIRTUAL_NAMESPACE,
    VirtualCluster,
    issued_kubeconfig,
    synced_host_pods,
)

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"{REAL_VCLUSTER_CHART} is missing")

OPERATOR_RESYNC_SECONDS = 36000
"""The production safety net (ten hours): the view follows the tenant's GPU pods through the
operator's watches (`view_watch.py`), not through a resync."""
READY_TIMEOUT_SECONDS = 480
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""
FLOW_TIMEOUT_SECONDS = 180
"""Virtual pod -> syncer -> host admission -> KAI -> kwok -> status synced back, on busy cores."""
TENANT = "vc-workloads"
POOL = "h100-exclusive"
OTHER_POOL = "a100-timeslice"
GPU_LIMIT = 2
"""The tenant's gpu.limit: its ResourceQuota and its KAI Queue both stop at 2 whole GPUs."""
OTHER_TENANT_QUEUE = "ml-platform"
PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")


def tenant_manifest(owner: str) -> dict:
    return builders.tenant(TENANT, "Untrusted", owner=owner, gpu={"limit": GPU_LIMIT}, sharing={"mode": "Exclusive"},
                           quotas={"cpu": "8", "memory": "16Gi", "pods": 30}, kubeconfig={"roles": ["admin"]},
                           preventDeletion=False)


@pytest.fixture(scope="module")
def tenant(vcluster_kai: KaiCluster, real_tenants, tmp_path_factory) -> VirtualCluster:
    plane = vcluster_kai.plane
    real_tenants.apply(tenant_manifest("vc-workloads-owner"))
    real_tenants.wait_ready(TENANT, timeout=READY_TIMEOUT_SECONDS)
    path = tmp_path_factory.mktemp("vc-workloads") / "admin.kubeconfig"
    return VirtualCluster(plane, issued_kubeconfig(plane, TENANT, host_namespace(), path))


def host_namespace() -> str:
    return f"tenant-{TENANT}"


def host_pods(plane: ControlPlane) -> list[dict]:
    return json.loads(plane.kubectl("get", "pods", "-n", host_namespace(), "-o", "json").stdout)["items"]


def host_pod_of(plane: ControlPlane, virtual_name: str) -> dict | None:
    """The host pod vCluster synced from the virtual pod `virtual_name`, if any."""
    return next(iter(synced_host_pods(plane, host_namespace(), virtual_name)), None)


def gpu_container(name: str, gpus: int, resource: str = "nvidia.com/gpu", **extra) -> dict:
    return {"name": name, "image": TEST_IMAGE, "command": ["sleep", "3600"], "securityContext": dict(RESTRICTED),
            "resources": {"limits": {resource: str(gpus), "cpu": "100m", "memory": "64Mi"},
                          "requests": {"cpu": "100m", "memory": "64Mi"}}, **extra}


def gpu_pod(name: str, gpus: int = 1, resource: str = "nvidia.com/gpu", labels: dict | None = None,
            **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": VIRTUAL_NAMESPACE, "labels": labels or {"app": name}},
            "spec": {"restartPolicy": "Never", "containers": [gpu_container("work", gpus, resource)], **spec}}


def event_messages(tenant: VirtualCluster, pod: str) -> list[str]:
    return [f"{e.get('reason')}: {e.get('message')}" for e in tenant.events(pod)]


def test_a_gpu_job_in_the_virtual_cluster_runs_on_the_tenants_pool_through_kai(vcluster_kai: KaiCluster,
                                                                              tenant: VirtualCluster):
    plane = vcluster_kai.plane
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": VIRTUAL_NAMESPACE},
           "spec": {"backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "containers": [gpu_container("train", 1)]}}}}
    created = time.monotonic()
    tenant.apply(job)

    def running_in_virtual_cluster():
        pods = tenant.job_pods("train")
        return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None
    try:
        virtual = wait_for(running_in_virtual_cluster, timeout=FLOW_TIMEOUT_SECONDS, interval=1,
                           what="the Job's pod Running in the virtual cluster")
    except TimeoutError:
        pods = tenant.job_pods("train")
        raise AssertionError(f"virtual pods: {[p['status'] for p in pods]}\n"
                             f"{tenant.describe(pods[0]['metadata']['name']) if pods else 'no pod'}\n"
                             f"host pods: {[(p['metadata']['name'], p['status']) for p in host_pods(plane)]}") from None
    print(f"\nJob created in the virtual cluster -> its pod Running there: {time.monotonic() - created:.1f}s "
          f"(syncer, guard, KAI, kwok-simulated GPU node)")

    host = host_pod_of(plane, virtual["metadata"]["name"])
    assert host is not None, [p["metadata"] for p in host_pods(plane)]
    assert host["metadata"]["labels"][naming.QUEUE_LABEL] == naming.queue_name(TENANT)
    assert host["spec"]["schedulerName"] == SCHEDULER_NAME
    assert host["spec"]["nodeName"] in vcluster_kai.node_names(POOL), "bound to a (simulated) node of the pool"
    assert host["status"]["phase"] == "Running"
    assert virtual["spec"]["nodeName"] == host["spec"]["nodeName"]
    podgroups = plane.kubectl("get", ".".join([PODGROUPS[2], PODGROUPS[0]]), "-n", host_namespace(),
                              "-o", "json").stdout
    assert {g["spec"]["queue"] for g in json.loads(podgroups)["items"]} == {naming.queue_name(TENANT)}


def test_over_the_limit_the_pod_stays_pending_in_the_virtual_cluster_with_the_quota_refusal(
        vcluster_kai: KaiCluster, tenant: VirtualCluster):
    """The tenant's ResourceQuota and its KAI Queue both stop at gpu.limit (docs/units.md), and the
    quota is checked first, at admission of the host pod: so over the limit the tenant meets the
    quota, quoted by the syncer, and the pod stays Pending in its virtual cluster. KAI's queue limit
    is the same number and never gets to refuse anything."""
    plane = vcluster_kai.plane
    wait_for(lambda: host_pod_of(plane, tenant.job_pods("train")[0]["metadata"]["name"]), timeout=60,
             what="the Job's host pod (test_a_gpu_job... holds 1 GPU)")
    tenant.apply(gpu_pod("over-limit", gpus=GPU_LIMIT))
    message = tenant.refusal_seen("over-limit", "exceeded quota")
    print(f"\nover the limit, the tenant sees: SyncError {message}")
    assert f"requested: requests.nvidia.com/gpu={GPU_LIMIT}" in message
    assert f"limited: requests.nvidia.com/gpu={GPU_LIMIT}" in message
    assert tenant.pod("over-limit")["status"]["phase"] == "Pending"
    assert host_pod_of(plane, "over-limit") is None
    tenant.kubectl("delete", "pod", "over-limit", "-n", VIRTUAL_NAMESPACE, "--wait=false")



def test_a_pod_kai_cannot_place_shows_kais_reason_in_the_virtual_cluster(vcluster_kai: KaiCluster,
                                                                         tenant: VirtualCluster):
    """Within the quota but on no node of the pool (node affinity to a host name the pool lacks):
    the host pod is admitted and KAI cannot bind it. What KAI says reaches the tenant."""
    plane = vcluster_kai.plane
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}]}]}}}
    tenant.apply(gpu_pod("nowhere", affinity=affinity))

    def unschedulable():
        pod = tenant.pod("nowhere") or {}
        [scheduled] = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"] \
            or [None]
        events = [e for e in tenant.events("nowhere") if e.get("reason") == "Unschedulable"]
        return (scheduled, events[0]) if scheduled and scheduled.get("reason") == "Unschedulable" and events else None
    try:
        condition, event = wait_for(unschedulable, timeout=FLOW_TIMEOUT_SECONDS, interval=1,
                                    what="KAI's Unschedulable condition and event on the virtual pod")
    except TimeoutError:
        raise AssertionError(tenant.describe("nowhere")) from None
    print(f"\nKAI cannot place it; the tenant sees: PodScheduled=False Unschedulable {condition['message']!r}; "
          f"event {event['reason']} from {event['source'].get('component')}: {event['message']!r}")
    host = host_pod_of(plane, "nowhere")
    assert host["metadata"]["labels"][naming.QUEUE_LABEL] == naming.queue_name(TENANT)
    assert not host["spec"].get("nodeName")
    assert condition["status"] == "False"
    assert condition["message"].startswith("no nodes with enough resources were found")
    assert event["source"].get("component") == SCHEDULER_NAME
    assert tenant.pod("nowhere")["status"]["phase"] == "Pending"
    tenant.kubectl("delete", "pod", "nowhere", "-n", VIRTUAL_NAMESPACE)
    wait_for(lambda: host_pod_of(plane, "nowhere") is None, timeout=60, what="its GPU back in the quota")

@pytest.mark.parametrize(("name", "pod", "rule"), [
    ("foreign-queue", gpu_pod("foreign-queue", labels={naming.QUEUE_LABEL: OTHER_TENANT_QUEUE}), "[queue-label]"),
    ("mig-resource", gpu_pod("mig-resource", resource="nvidia.com/mig-1g.10gb"), "[gpu-resource]"),
])
def test_a_pod_the_guard_refuses_shows_the_guards_message_in_the_virtual_cluster(
        vcluster_kai: KaiCluster, tenant: VirtualCluster, name: str, pod: dict, rule: str):
    plane = vcluster_kai.plane
    tenant.apply(pod)
    message = tenant.refusal_seen(name, rule)
    print(f"\n{name}: the tenant sees: SyncError {message}")
    assert 'admission webhook "pods.validate.gputenant.io" denied the request' in message
    assert f"tenant {TENANT}: trust Untrusted, sharing Exclusive on pool {POOL}" in message
    assert tenant.pod(name)["status"]["phase"] == "Pending"
    assert host_pod_of(plane, name) is None
    tenant.kubectl("delete", "pod", name, "-n", VIRTUAL_NAMESPACE, "--wait=false")


def test_a_pod_naming_another_pools_nodes_is_steered_back_or_refused(vcluster_kai: KaiCluster,
                                                                     tenant: VirtualCluster):
    """vCluster's `sync.fromHost.nodes.selector` (enforceNodeSelector) may replace the tenant's
    nodeSelector with its pool's on the host pod, so the guard may never see the other pool's key;
    if it does, it refuses it. Either way no host pod ever asks for another pool's nodes."""
    plane = vcluster_kai.plane
    tenant.apply(gpu_pod("other-pool", nodeSelector={"gputenant.io/pool": OTHER_POOL}))

    def outcome():
        host = host_pod_of(plane, "other-pool")
        if host is not None and host["spec"].get("nodeName"):
            return "steered", host
        refused = [m for m in tenant.sync_errors("other-pool") if "[node-selector]" in m]
        return ("refused", refused[0]) if refused else None
    try:
        how, seen = wait_for(outcome, timeout=FLOW_TIMEOUT_SECONDS, interval=1, what="other-pool steered or refused")
    except TimeoutError:
        raise AssertionError(tenant.describe("other-pool")) from None
    if how == "steered":
        print(f"\nother-pool: steered back, host nodeSelector {seen['spec']['nodeSelector']}, "
              f"bound to {seen['spec']['nodeName']} (simulated)")
        assert seen["spec"]["nodeSelector"]["gputenant.io/pool"] == POOL
        assert seen["spec"]["nodeName"] in vcluster_kai.node_names(POOL)
    else:
        print(f"\nother-pool: the tenant sees: SyncError {seen}")
        assert host_pod_of(plane, "other-pool") is None
    tenant.kubectl("delete", "pod", "other-pool", "-n", VIRTUAL_NAMESPACE, "--wait=false")


def test_a_privileged_pod_is_refused_inside_the_virtual_cluster_even_in_a_privileged_namespace(
        vcluster_kai: KaiCluster, tenant: VirtualCluster):
    """The tenant is cluster-admin of its virtual cluster and labels a namespace privileged; the
    virtual cluster still enforces the trust level's standard (restricted for Untrusted), so the
    pod never reaches the syncer, the host's Pod Security or the guard (whose `privileged` rule
    stays the host's defence in depth, unit-tested in operator/tests)."""
    plane = vcluster_kai.plane
    tenant.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "anything-goes", "labels": {
        "pod-security.kubernetes.io/enforce": "privileged"}}})
    pod = gpu_pod("privileged")
    pod["metadata"]["namespace"] = "anything-goes"
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    refused = tenant.apply(pod, check=False)
    print(f"\nprivileged: the tenant sees: {refused.stderr.strip()}")
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
    assert "must not set securityContext.privileged=true" in refused.stderr
    assert not [p for p in host_pods(plane) if "privileged" in p["metadata"]["name"]]


# -- the tenant's view (render/tenant_view.py), read inside the virtual cluster ------------------


def test_the_view_inside_the_virtual_cluster_says_what_an_untrusted_tenant_may_ask_for(
        vcluster_kai: KaiCluster, tenant: VirtualCluster):
    view = tenant.wait_view(lambda v: v.get("tenant") == TENANT, "the view synced into the virtual cluster")
    print(f"\nthe view inside: trust {view['trust']}, mechanism {view['mechanism']}, ask {view['ask']['how']!r}")
    assert (view["trust"], view["mechanism"], view["pool"]) == ("Untrusted", "Exclusive", POOL)
    assert view["ask"]["resource"] == "nvidia.com/gpu" and view["ask"]["maxPerPod"] == GPU_LIMIT
    assert view["quota"]["queue"]["name"] == naming.queue_name(TENANT)
    assert (view["quota"]["queue"]["quota"], view["quota"]["queue"]["limit"]) == (1, GPU_LIMIT)
    assert view["quota"]["resourceQuota"]["requests.nvidia.com/gpu"] == str(GPU_LIMIT)
    assert view["sleep"]["asleep"] is False
    assert OTHER_TENANT_QUEUE not in json.dumps(tenant.view_configmap()), "the view names no other tenant"
    example = yaml.safe_load(tenant.view_configmap()["data"]["example-pod.yaml"])
    assert example["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    wait_for(lambda: json.loads(tenant.gputenant_status("-o", "json")) == tenant.view(), timeout=60,
             interval=1, what="gputenant status -o json printing the view (a pod of an earlier test may still go)")
    assert f"Tenant {TENANT}: trust Untrusted, mechanism Exclusive, pool {POOL}" in tenant.gputenant_status()


def test_the_tenant_cannot_change_its_view(vcluster_kai: KaiCluster, tenant: VirtualCluster):
    """The tenant is cluster-admin inside: its edit is accepted by the virtual API server, and the
    syncer puts the host's content back; a deletion is undone the same way."""
    original = tenant.wait_view(lambda v: v.get("tenant") == TENANT, "the view synced")
    forged = {"data": {"view.json": json.dumps({**original, "quota": {"queue": {"limit": 1000}}})}}
    tenant.kubectl("patch", "configmap", VIRTUAL_NAME, "-n", VIEW_NAMESPACE, "--type=merge", "-p", json.dumps(forged))
    tenant.wait_view(lambda v: v == original, "the edit undone by the syncer")
    tenant.kubectl("delete", "configmap", VIRTUAL_NAME, "-n", VIEW_NAMESPACE)
    tenant.wait_view(lambda v: v == original, "the deleted view back")
    host = json.loads(vcluster_kai.plane.kubectl("get", "configmap", "gputenant-view", "-n", host_namespace(),
                                                 "-o", "json").stdout)
    assert json.loads(host["data"]["view.json"]) == original


def test_a_tenant_cannot_open_a_node_port_from_inside_its_virtual_cluster(vcluster_kai: KaiCluster,
                                                                         tenant: VirtualCluster):
    """cluster-admin inside asks for a NodePort Service: vCluster creates the host Service while it
    answers, and the namespace's quota (only the vCluster's own node port) refuses it."""
    created = tenant.kubectl("create", "service", "nodeport", "tenant-np", "--tcp=80:80", check=False)
    assert created.returncode != 0
    assert "exceeded quota" in created.stderr and "services.nodeports" in created.stderr
    services = json.loads(vcluster_kai.plane.kubectl("get", "services", "-n", host_namespace(), "-o", "json").stdout)
    assert [s["metadata"]["name"] for s in services["items"] if s["spec"]["type"] == "NodePort"] == \
        [naming.release_name(TENANT)]


def test_a_pod_kai_cannot_place_is_pending_in_the_view_with_its_reason_and_an_event(
        vcluster_kai: KaiCluster, tenant: VirtualCluster):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["no-such-node"]}]}]}}}
    tenant.apply(gpu_pod("stuck", affinity=affinity))
    try:
        view = tenant.wait_view(lambda v: any(p["name"] == "stuck" and p.get("scheduler")
                                               for p in v["queue"]["pods"]), "stuck Pending in the view")
        [stuck] = [p for p in view["queue"]["pods"] if p["name"] == "stuck"]
        print(f"\nthe view says why stuck waits: {stuck['reason']!r}")
        assert stuck["state"] == "Pending" and stuck["namespace"] == VIRTUAL_NAMESPACE and stuck["gpus"] == 1
        assert stuck["reason"].startswith(f"the scheduler found no place on pool {POOL}: ")
        tenant.wait_pending_event("stuck", stuck["reason"])
        table = tenant.gputenant_status()
        assert any("stuck" in line and "Pending" in line and "the scheduler found no place" in line
                   for line in table.splitlines()), table
    finally:
        tenant.kubectl("delete", "pod", "stuck", "-n", VIRTUAL_NAMESPACE, "--wait=false")


SHARES_TENANT = "vc-shares"
SHARE_LIMIT = 0.5
"""An Internal tenant in HAMi mode with a limit of two quarter shares: a third waits for the queue."""


@pytest.fixture(scope="module")
def shares(vcluster_kai: KaiCluster, real_tenants, tmp_path_factory):
    """A second real vCluster tenant, Internal on l4-hami (KAI fractions): the queue, not the namespace
    quota, holds its shares (docs/units.md), so a pod over its limit reaches the host and waits there."""
    plane = vcluster_kai.plane
    real_tenants.apply(builders.tenant(SHARES_TENANT, "Internal", owner="shares-owner", gpus=0.25,
                                       gpu={"limit": SHARE_LIMIT}, sharing={"mode": "HAMi", "hami": {"corePercent": 25}},
                                       kubeconfig={"roles": ["admin"]}, preventDeletion=False))
    real_tenants.wait_ready(SHARES_TENANT, timeout=READY_TIMEOUT_SECONDS)
    path = issued_kubeconfig(plane, SHARES_TENANT, f"tenant-{SHARES_TENANT}",
                             tmp_path_factory.mktemp("vc-shares") / "admin.kubeconfig")
    yield VirtualCluster(plane, path)
    real_tenants.delete(SHARES_TENANT)


def share_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": VIRTUAL_NAMESPACE, "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "infer", "image": TEST_IMAGE, "command": ["sleep", "3600"], "securityContext": dict(RESTRICTED),
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def test_a_share_held_by_the_queue_limit_is_pending_in_the_view_for_the_limit(vcluster_kai: KaiCluster, shares):
    queue = naming.queue_name(SHARES_TENANT)
    view = shares.wait_view(lambda v: v.get("tenant") == SHARES_TENANT, "the Internal tenant's view")
    assert (view["trust"], view["mechanism"], view["ask"]["annotation"]) == ("Internal", "HAMi", "gpu-fraction")
    assert view["ask"]["sizes"] == ["0.25", "0.5"] and [c["gpuFraction"] for c in view["ask"]["hamiCaps"]] == ["0.25", "0.5"]
    for name in ("share-1", "share-2"):
        shares.apply(share_pod(name))
    shares.wait_view(lambda v: [p["state"] for p in v["queue"]["pods"]] == ["Running", "Running"],
              "two shares running")
    shares.apply(share_pod("share-3"))
    view = shares.wait_view(lambda v: any(p["name"] == "share-3" and p["state"] == "Pending"
                                           for p in v["queue"]["pods"]), "the third share Pending in the view")
    [held] = [p for p in view["queue"]["pods"] if p["name"] == "share-3"]
    print(f"\nthe view says why share-3 waits: {held['reason']!r} (KAI: {held.get('scheduler')!r})")
    assert held["reason"].startswith(f"queue {queue} at its limit of {SHARE_LIMIT:g} GPUs ({SHARE_LIMIT:g} allocated")
    assert view["queue"]["allocated"] == SHARE_LIMIT
    shares.wait_pending_event("share-3", held["reason"])


def test_deleting_the_tenant_removes_its_workloads_podgroups_release_and_volume(vcluster_kai: KaiCluster,
                                                                                tenant: VirtualCluster,
                                                                                real_tenants):
    plane = vcluster_kai.plane
    namespace = host_namespace()
    group, version, plural = PODGROUPS
    before = json.loads(plane.kubectl("get", f"{plural}.{group}", "-n", namespace, "-o", "json").stdout)["items"]
    workloads = [p["metadata"]["name"] for p in host_pods(plane)
                 if (p["metadata"].get("annotations") or {}).get(HOST_NAME_ANNOTATION)]
    claims = json.loads(plane.kubectl("get", "pvc", "-n", namespace, "-o", "json").stdout)["items"]
    volumes = {c["spec"]["volumeName"] for c in claims if c["spec"].get("volumeName")}
    assert before and workloads and volumes, (before, workloads, claims)

    plane.kubectl("delete", "gputenant", TENANT, "--wait=false")
    wait_for(lambda: real_tenants.get(TENANT) is None, timeout=300, interval=2, what=f"tenant {TENANT} offboarded")
    wait_for(lambda: plane.kubectl("get", "namespace", namespace, check=False).returncode != 0, timeout=300,
             interval=2, what=f"namespace {namespace} gone")

    assert plane.cluster_object("scheduling.run.ai", "v2", "queues", naming.queue_name(TENANT)) is None
    releases = plane.kubectl("get", "secrets", "-A", "-l", f"owner=helm,name={naming.release_name(TENANT)}",
                             "-o", "name").stdout.split()
    assert releases == []
    left_pods = json.loads(plane.kubectl("get", "pods", "-A", "-o", "json").stdout)["items"]
    assert not [p["metadata"]["name"] for p in left_pods if p["metadata"]["name"] in workloads]
    left_groups = json.loads(plane.kubectl("get", f"{plural}.{group}", "-A", "-o", "json").stdout)["items"]
    assert not [g for g in left_groups if g["metadata"]["namespace"] == namespace]
    wait_for(lambda: not (volumes & set(plane.kubectl("get", "pv", "-o", "name").stdout.replace(
        "persistentvolume/", "").split())), timeout=120, interval=2, what=f"volumes {volumes} deleted")
    labelled = plane.kubectl("get", "all,configmaps,secrets,pvc,roles,rolebindings,clusterroles,clusterrolebindings",
                             "-A", "-l", f"{naming.TENANT_LABEL}={TENANT}", "-o", "name").stdout.split()
    assert labelled == []
