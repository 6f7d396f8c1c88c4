"""HAMi-core's caps delivered on the plane's REAL node (containerd, runc), with a TEST DOUBLE of the
library (kubeplane.hami_core_double): the tenant works inside its REAL virtual cluster (vCluster v0.36.1,
installed by the operator, `gputenant run`), and what it sees is what vCluster syncs back.

What is shown (issue 22, the second acceptance item): the admission guard's init container copies the
library from the pool's library image into the pod's own volume; the loader preloads it through the
read-only `/etc/ld.so.preload` into EVERY process of the fraction container (the program and the child
it starts each report once); each process sees exactly the caps `hami_caps.caps_for` computes for its
share; the preload, the library and HAMi-core's override file cannot be written from inside. A pod whose
pool's library image lacks the library never starts its container; the tenant sees it Failed with its
`Initialized` condition naming the guard's init container (vCluster v0.36.1 syncs back no status of a
container the virtual pod lacks), and the reason through the operator: an Event on the pod and the pod's
entry in the tenant's view.

What is NOT shown: any cap on a GPU. The double caps nothing; the node has no GPU; whether the upstream
HAMi-core holds a cap is the attestation's business (docs/attestation.md).

TEST ARRANGEMENT (no production pool looks like this): two HAMi pools are added to examples/config.yaml,
both selecting the real node by its hostname label and scheduled by `default-scheduler`, so neither KAI
nor a GPU is needed; the guard caps a HAMi-mode `gpu-fraction` pod whatever schedules it. One pool's
library is the double's image and path, the other's names a path that image does not have. Both select
the same node, which the operator reports as a pool problem in its log ("make the pools' nodeSelectors
disjoint"); nothing here depends on that report.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from gputenant.config.pools import Pool
from gputenant.guard import hami_caps
from kubeplane import ControlPlane, wait_for
from kubeplane.builders import RESTRICTED
from kubeplane.canary_image import CANARY_IMAGE, canary_image
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.hami_core_double import DOUBLE_PATH, LIBRARY_IMAGE, library_image, reports
from kubeplane.node import NODE_NAME
from kubeplane.operator_process import guarded_operator
from kubeplane.virtual_cluster import VIRTUAL_NAMESPACE, VirtualCluster, issued_kubeconfig, synced_host_pods

pytestmark = pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                reason=f"{REAL_VCLUSTER_CHART} is missing")

READY_TIMEOUT_SECONDS = 480
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""
FLOW_TIMEOUT_SECONDS = 240
"""Virtual pod -> syncer -> guard -> scheduler -> kubelet (init container, then python) -> status back."""
POOL, MISSING_POOL = "hami-core-double", "hami-core-double-missing"
MISSING_PATH = "/usr/lib/hami-core-double/not-here.so"
TENANT, MISSING_TENANT = "hami-double", "hami-no-library"
CORE_PERCENT = 25


def double_pool(name: str, library_path: str) -> dict:
    """A HAMi pool on the real node (a test arrangement: see the module docstring)."""
    return {"name": name, "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 23034, "gpus": 1,
            "nodeSelector": {"kubernetes.io/hostname": NODE_NAME}, "schedulerName": "default-scheduler",
            "hami": {"splitCount": 4, "library": {"image": LIBRARY_IMAGE, "path": library_path,
                                                  "imagePullPolicy": "Never"}}}


POOLS = {POOL: double_pool(POOL, DOUBLE_PATH), MISSING_POOL: double_pool(MISSING_POOL, MISSING_PATH)}
WORKLOAD = """
import errno, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "pass"])
child.wait()
print(f"parent pid={os.getpid()} child={child.pid} exit={child.returncode}", flush=True)
for path in ("/etc/ld.so.preload", "/usr/local/vgpu/libvgpu.so", "/overrideEnv"):
    try:
        open(path, "w").close()
        outcome = "written"
    except OSError as error:
        outcome = errno.errorcode[error.errno]
    print(f"write {path}: {outcome}", flush=True)
print("preload list:", open("/etc/ld.so.preload").read().strip(), flush=True)
"""
"""Runs as the fraction container's program: starts a child python3, then tries to write the guard's files."""


@pytest.fixture(scope="module")
def operator(vcluster_node: ControlPlane, tmp_path_factory):
    """The operator with the two test pools, and the library and workload images on the real node."""
    vcluster_node.node.containerd.import_images([*library_image(vcluster_node.bin_dir).values(),
                                                 *canary_image(vcluster_node.bin_dir).values()])
    with guarded_operator(vcluster_node, tmp_path_factory.mktemp("operator"), POOLS.values()) as running:
        yield running


@pytest.fixture(scope="module")
def tenants(real_tenants, tmp_path_factory) -> dict[str, VirtualCluster]:
    """Both tenants, applied together so that their virtual control planes start side by side."""
    real_tenants.apply(*(real_tenants.manifest(
        name, "Internal", f"{name}-owner", gpu={"quota": 1, "pool": pool},
        sharing={"mode": "HAMi", "hami": {"corePercent": CORE_PERCENT}},
        kubeconfig={"roles": ["admin"]}, preventDeletion=False)
        for name, pool in ((TENANT, POOL), (MISSING_TENANT, MISSING_POOL))))
    views = {}
    for name in (TENANT, MISSING_TENANT):
        real_tenants.wait_ready(name, timeout=READY_TIMEOUT_SECONDS)
        path = tmp_path_factory.mktemp(name) / "admin.kubeconfig"
        views[name] = VirtualCluster(real_tenants.plane,
                                     issued_kubeconfig(real_tenants.plane, name, f"tenant-{name}", path))
    return views


def fraction_pod(name: str, fraction: str) -> dict:
    """What the tenant writes: a python3 program on a `gpu-fraction` share, nothing about HAMi-core."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": VIRTUAL_NAMESPACE, "annotations": {"gpu-fraction": fraction}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "work", "image": CANARY_IMAGE, "command": ["python3", "-c", WORKLOAD],
                "securityContext": dict(RESTRICTED),
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "500m", "memory": "128Mi"}}}]}}


def finished(tenant: VirtualCluster, name: str) -> dict:
    """The virtual pod once its phase is Succeeded or Failed, as the tenant reads it."""
    def done():
        pod = tenant.pod(name)
        return pod if pod and pod["status"].get("phase") in ("Succeeded", "Failed") else None
    try:
        return wait_for(done, timeout=FLOW_TIMEOUT_SECONDS, interval=2, what=f"virtual pod {name} finished")
    except TimeoutError:
        raise AssertionError(tenant.describe(name)) from None


@pytest.mark.parametrize(("name", "fraction"), [("share-quarter", "0.25"), ("share-half", "0.5")])
def test_every_process_of_a_fraction_container_loads_the_library_with_its_shares_caps(
        tenants: dict[str, VirtualCluster], name: str, fraction: str):
    tenant = tenants[TENANT]
    caps = hami_caps.caps_for(Fraction(fraction), Pool.model_validate(POOLS[POOL]))
    tenant.apply(fraction_pod(name, fraction))
    pod = finished(tenant, name)
    log = tenant.kubectl("logs", name, "-c", "work", "-n", VIRTUAL_NAMESPACE).stdout
    print(f"\n{name} ({fraction} of a GPU), as the tenant reads its log in the virtual cluster:\n{log}")
    assert pod["status"]["phase"] == "Succeeded", tenant.describe(name)

    [parent_line] = [line for line in log.splitlines() if line.startswith("parent ")]
    fields = dict(field.split("=", 1) for field in parent_line.split()[1:])
    assert fields["exit"] == "0"
    loaded = reports(log)
    assert [report["pid"] for report in loaded] == [fields["pid"], fields["child"]], "once in each process"
    expected = {variable["name"]: variable["value"] for variable in caps.env()}
    assert expected == {hami_caps.MEMORY_LIMIT: f"{caps.memory_mib}m", hami_caps.SM_LIMIT: str(caps.sm_percent),
                        hami_caps.SHARED_CACHE: hami_caps.CACHE_FILE}
    for report in loaded:
        assert report["exe"] == "/usr/bin/python3.11"
        assert {key: report[key] for key in expected} == expected
    for path in (hami_caps.PRELOAD, hami_caps.LIBRARY, hami_caps.OVERRIDE_ENV_FILE):
        assert f"write {path}: EROFS" in log.splitlines(), f"{path} must be on a read-only mount"
    assert f"preload list: {hami_caps.LIBRARY}" in log.splitlines()


def test_a_pod_whose_pool_image_lacks_the_library_never_starts_and_the_tenant_sees_why(
        operator, tenants: dict[str, VirtualCluster]):
    """Fail closed: the guard's init container finds no library, so the program never starts (it would
    otherwise run uncapped: the loader skips a missing preload with a warning).

    What the tenant sees in its virtual cluster: the pod Failed, its container never started, and the
    `Initialized` condition naming the guard's init container. The REASON (the init container's message)
    reaches only the platform, in the host pod's status: vCluster v0.36.1 syncs back no status of an init
    container the virtual pod does not have (`stripInjectedSidecarContainers`,
    pkg/controllers/resources/pods/translate/diff.go), and the virtual API server refuses its log. Both
    are asserted, so that a vCluster that lifts either shows here. The operator's pool report names the
    pool's problem with that reason (pools/hami_library.py), and the operator tells the tenant why: a
    `GpuPodPending` Event on the pod, synced into the virtual cluster, and the pod's entry in its view."""
    tenant = tenants[MISSING_TENANT]
    tenant.apply(fraction_pod("no-library", "0.25"))
    pod = finished(tenant, "no-library")
    status = pod["status"]
    logs = tenant.kubectl("logs", "no-library", "-c", hami_caps.INIT_CONTAINER, "-n", VIRTUAL_NAMESPACE, check=False)
    host = host_pod(tenant.plane, MISSING_TENANT, "no-library")
    print(f"\nno-library, as the tenant reads it in the virtual cluster: phase {status['phase']}, "
          f"conditions {status.get('conditions')}, init containers {status.get('initContainerStatuses')}\n"
          f"events {event_lines(tenant, 'no-library')}\nlog of the guard's init container: {logs.stderr.strip()}\n"
          f"host pod init containers, as the platform reads them: {host['status'].get('initContainerStatuses')}")
    assert status["phase"] == "Failed"
    [work] = status["containerStatuses"]
    assert work["state"] == {"waiting": {"reason": "PodInitializing"}} and not work["started"], "never started"
    [initialized] = [c for c in status["conditions"] if c["type"] == "Initialized"]
    assert (initialized["status"], initialized["reason"], initialized["message"]) == (
        "False", "ContainersNotInitialized", f"containers with incomplete status: [{hami_caps.INIT_CONTAINER}]")
    assert not status.get("initContainerStatuses"), "vCluster v0.36.1 strips the guard's init container's status"
    assert logs.returncode != 0
    assert f"container {hami_caps.INIT_CONTAINER} is not valid for pod no-library" in logs.stderr

    [host_init] = host["status"]["initContainerStatuses"]
    terminated = host_init["state"]["terminated"]
    assert (host_init["name"], terminated["exitCode"], terminated["reason"]) == (hami_caps.INIT_CONTAINER, 1, "Error")
    assert terminated["message"].strip() == f"HAMi-core library {MISSING_PATH} is not in this image"
    problem = (f"HamiCoreLibraryNotDelivered: the HAMi-core library {MISSING_PATH} in image {LIBRARY_IMAGE} does not reach "
               f"1 share(s), which do not start (tenant-{MISSING_TENANT}/{host['metadata']['name']}: exit 1: "
               f"HAMi-core library {MISSING_PATH} is not in this image)")
    wait_for(lambda: problem in operator.log_path.read_text(errors="replace"), timeout=60, interval=2,
             what=f"the pool report's problem in the operator log: {problem}")
    # ...and the tenant is told why by the operator, in its words: an Event on the pod (synced into the
    # virtual cluster) and the pod's entry in its view
    why = f"could not be delivered, so the pod does not start: exit 1: HAMi-core library {MISSING_PATH} is not in this image"
    wait_for(lambda: any(why in line for line in event_lines(tenant, "no-library")), timeout=90, interval=2,
             what="the tenant's Event saying why its pod does not start")
    view = tenant.view()
    [entry] = [p for p in view["queue"]["pods"] if p["name"] == "no-library"]
    assert entry["state"] == "NotStarted" and why in entry["reason"]


def host_pod(plane: ControlPlane, tenant: str, virtual_name: str) -> dict:
    """The host pod vCluster synced from the tenant's virtual pod, as the platform reads it."""
    [pod] = synced_host_pods(plane, f"tenant-{tenant}", virtual_name)
    return pod


def event_lines(tenant: VirtualCluster, pod: str) -> list[str]:
    return [f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in tenant.events(pod)]
