"""The plane's real node: pods run in containerd, the API server serves their logs and exec through
the kubelet, Services work through kube-proxy, and stopping the plane leaves nothing behind."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from kubeplane import ControlPlane, wait_for
from kubeplane.containerd import POD_CIDR
from kubeplane.images import TEST_IMAGE
from kubeplane.node import RECORDS_DIR, Node, mounts_under, remove_stale_nodes
from kubeplane.tools import kube_version

KUBERNETES_SERVICE_IP = "10.0.0.1"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(node_plane):
    name = node_plane.create_namespace(unique("node")).metadata.name
    yield name
    node_plane.kubectl("delete", "namespace", name, "--wait=false")


def run_pod(plane: ControlPlane, namespace: str, name: str, script: str, *,
            restart: str = "Never", labels: dict | None = None) -> client.V1Pod:
    """Create a pod running `script` in the test image (no registry: the image was imported at
    plane start, and its non-`latest` tag means IfNotPresent)."""
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(restart_policy=restart, termination_grace_period_seconds=0,
                              containers=[client.V1Container(name="main", image=TEST_IMAGE,
                                                             command=["sh", "-c", script])]))
    with plane.api_client() as admin:
        return client.CoreV1Api(admin).create_namespaced_pod(namespace, pod)


def wait_phase(plane: ControlPlane, namespace: str, name: str, phases: set[str],
               timeout: float = 60) -> client.V1Pod:
    with plane.api_client() as admin:
        core = client.CoreV1Api(admin)
        try:
            return wait_for(lambda: (pod := core.read_namespaced_pod(name, namespace)).status.phase
                            in phases and pod, timeout=timeout, interval=0.2,
                            what=f"pod {namespace}/{name} in {phases}")
        except TimeoutError:
            described = plane.kubectl("describe", "pod", "-n", namespace, name, check=False).stdout
            raise AssertionError(f"pod {name} not in {phases}:\n{described}") from None


def test_a_pod_runs_on_the_node_and_kubectl_logs_returns_its_output(node_plane, namespace):
    run_pod(node_plane, namespace, "hello", "echo hello from $(hostname)")

    pod = wait_phase(node_plane, namespace, "hello", {"Succeeded", "Failed"})

    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == node_plane.node.name
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_CIDR)
    logs = node_plane.kubectl("logs", "-n", namespace, "hello").stdout
    assert logs == "hello from hello\n"


def test_kubectl_exec_runs_a_command_in_the_pod(node_plane, namespace):
    run_pod(node_plane, namespace, "sleeper", "sleep 3600", restart="Always")
    wait_phase(node_plane, namespace, "sleeper", {"Running"})

    result = node_plane.kubectl("exec", "-n", namespace, "sleeper", "--", "sh", "-c",
                                "cat /etc/hostname; echo $((6 * 7))")

    assert result.stdout == "sleeper\n42\n"


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(node_plane, namespace):
    """httpsget verifies the API server's certificate with the pod's service-account CA and sends
    the pod's token: the 403 names the pod's own service account, so the request went through the
    Service's ClusterIP to this plane's API server and was authenticated there."""
    with node_plane.api_client() as admin:
        service = client.CoreV1Api(admin).read_namespaced_service("kubernetes", "default")
    assert service.spec.cluster_ip == KUBERNETES_SERVICE_IP
    run_pod(node_plane, namespace, "caller",
            f"httpsget https://{KUBERNETES_SERVICE_IP}/version && "
            f"httpsget https://{KUBERNETES_SERVICE_IP}/api/v1/namespaces/{namespace}/secrets")

    pod = wait_phase(node_plane, namespace, "caller", {"Succeeded", "Failed"})

    logs = node_plane.kubectl("logs", "-n", namespace, "caller").stdout
    assert pod.status.phase == "Succeeded", logs
    assert "HTTP/1.1 200 OK" in logs
    assert f'"gitVersion": "{kube_version()}"' in logs
    assert "HTTP/1.1 403 Forbidden" in logs
    assert f'User \\"system:serviceaccount:{namespace}:default\\" cannot list resource \\"secrets\\"' in logs


def test_an_ordinary_service_reaches_its_pod_from_a_pod_and_from_the_node(node_plane, namespace):
    run_pod(node_plane, namespace, "web", "mkdir /www && echo served by web > /www/index.html && "
            "httpd -f -p 8080 -h /www", restart="Always", labels={"app": "web"})
    wait_phase(node_plane, namespace, "web", {"Running"})
    with node_plane.api_client() as admin:
        service = client.CoreV1Api(admin).create_namespaced_service(namespace, client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[
                client.V1ServicePort(port=80, target_port=8080)])))
    url = f"http://{service.spec.cluster_ip}/index.html"

    # kube-proxy writes the Service's rules asynchronously: wait for them from the node, then
    # expect a pod to get through at its first attempt.
    from_node = wait_for(lambda: (result := subprocess.run(node_plane.node.network.enter(
        [*node_httpsget(node_plane), url]), capture_output=True, text=True)).returncode == 0 and result,
        timeout=30, what=f"{url} to answer in the node's network namespace")
    run_pod(node_plane, namespace, "client", f"httpsget {url}")
    client_pod = wait_phase(node_plane, namespace, "client", {"Succeeded", "Failed"})

    assert client_pod.status.phase == "Succeeded"
    assert node_plane.kubectl("logs", "-n", namespace, "client").stdout == "HTTP/1.1 200 OK\nserved by web\n\n"
    assert from_node.stdout == "HTTP/1.1 200 OK\nserved by web\n\n"


def node_httpsget(plane: ControlPlane) -> list[str]:
    """The test image's HTTPS client, run as a process of the node (trusting the plane's CA)."""
    return [str(plane.bin_dir / "httpsget"), "-ca", str(plane.directory / "pki" / "ca.crt"),
            "-token", "/nonexistent"]


def test_the_kubernetes_service_works_from_the_node_itself(node_plane):
    result = subprocess.run(node_plane.node.network.enter([
        str(node_plane.bin_dir / "httpsget"), "-ca", str(node_plane.directory / "pki" / "ca.crt"),
        "-token", "/nonexistent", f"https://{KUBERNETES_SERVICE_IP}/version"]),
        capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("HTTP/1.1 200 OK")


def _iptables_chains() -> set[str]:
    """Chains in the host's own iptables tables (the node's live in its namespace)."""
    dump = subprocess.run(["iptables-save"], check=True, capture_output=True, text=True).stdout
    return {line.split()[0] for line in dump.splitlines() if line.startswith(":")}


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a killed shim stays one until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_stopping_a_plane_with_a_node_leaves_nothing_behind(node_plane):
    """A second plane with a node beside the session's one (they must not meet), running a pod;
    after stop no process, container, mount, interface, cgroup or iptables rule of it is left.
    The plane is kept, as a failed test's is: its logs stay, the node's image store does not."""
    chains_before = _iptables_chains()
    plane = ControlPlane(node=True).start()
    plane.keep = True
    node = plane.node
    try:
        plane.create_namespace("work")
        run_pod(plane, "work", "busy", "sleep 3600", restart="Always")
        wait_phase(plane, "work", "busy", {"Running"})
        containers = node.containerd.containers()
        pids = set(plane.pids.values()) | node.cgroup.pids()
        mounts = mounts_under(plane.directory)
        socket = str(node.containerd.socket)
        assert len(containers) == 2  # the pod's sandbox (pause) and its container
        assert any("/rootfs" in mount for mount in mounts)
        assert _processes_naming(socket), "containerd's shims name its socket"
    finally:
        directory = plane.directory
        plane.stop()

    assert [pid for pid in pids if _running(pid)] == []
    assert _processes_naming(socket) == []
    assert mounts_under(directory) == []
    assert (plane.log_dir / "kubelet.log").stat().st_size > 0
    assert not node.containerd.root.exists()
    shutil.rmtree(directory)
    assert not node.network.exists()
    assert node.network.name not in os.listdir("/run/netns")
    assert subprocess.run(["ip", "link", "show", node.network.host_link],
                          capture_output=True).returncode != 0
    assert not node.cgroup.exists()
    assert _iptables_chains() == chains_before
    cni_cache = Path("/var/lib/cni/results")  # libcni's, not configurable in containerd 1.6
    assert [f.name for f in cni_cache.glob("*") if any(c in f.name for c in containers)] == []
    assert node.leftovers() == []


KILLED_PLANE = f"""
import os, signal
from kubeplane import ControlPlane, wait_for
plane = ControlPlane(node=True).start()
plane.kubectl("run", "busy", "--image={TEST_IMAGE}", "--restart=Never", "--", "sleep", "3600")
wait_for(lambda: plane.kubectl("get", "pod", "busy", "-o", "jsonpath={{.status.phase}}").stdout
         == "Running", timeout=60, what="pod busy Running")
print(plane.directory, plane.node.node_id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_node_of_a_killed_plane_is_removed_at_the_next_node_start():
    """SIGKILL gives the plane no chance to clean up: its pod's shim and container, namespace,
    cgroup and mounts stay until the next node start on the machine removes them."""
    killed = subprocess.run([sys.executable, "-c", KILLED_PLANE], capture_output=True, text=True,
                            timeout=180)
    assert killed.returncode == -9, killed.stderr
    directory, node_id = killed.stdout.split()
    orphan = Node(Path(directory), node_id=node_id)
    try:
        assert orphan.cgroup.pids(), "the pod's shim and container outlive the killed plane"
        assert orphan.network.exists()
        assert mounts_under(Path(directory))

        assert node_id in remove_stale_nodes()

        assert orphan.leftovers() == []
        assert not (RECORDS_DIR / f"{node_id}.json").exists()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
