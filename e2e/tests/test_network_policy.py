"""The network boundaries of a tenant, attacked from a tenant pod on the REAL node, where kube-router's
network-policy controller enforces every NetworkPolicy (e2e/kubeplane/kube_router.py).

Three tenants with REAL vClusters (v0.36.1, installed by the operator), one per trust level: each
creates its pods in its own virtual cluster with the admin kubeconfig the operator issued, as a
tenant would, and probes from inside them with busybox `nc` (a TCP connect), `httpsget` and
`spoofudp` (a datagram with a forged source address). Each test first shows that the target
answers a client that may reach it (so a refused probe means the policy, not a dead target), then
that the tenant's pod gets nothing. The shared namespaces a platform runs (monitoring, the GPU
operator's exporter, the scheduler, the load balancer's controller, kube-system ports other than
DNS) are played by listeners on their usual ports; the one opening examples/config.yaml grants
(tenantEgress: Internal teams reach the model registry) is reached by that trust level only.

The operator runs on the host here (its guard on loopback, out of every pod's reach): its pod is
played by a STAND-IN, a busybox pod with the chart's selector labels listening on the chart's
guard, liveness and metrics ports, behind the chart's own NetworkPolicy rendered by `helm template`
with the plane's networks. What is proven is that the chart's and the tenant's policies keep a
tenant's pods off every port of the operator's pods, not anything about the operator's process.

Run with KUBEPLANE_NETWORK_POLICIES=0 (no enforcer on the node), every refusal asserted here fails.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from gputenant.config.models import OperatorConfig
from kubeplane import ControlPlane, wait_for
from kubeplane.builders import RESTRICTED
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.images import TEST_IMAGE
from kubeplane.kubelet import KUBELET_PORT
from kubeplane.node import API_FORWARD_PORT
from kubeplane.operator_image import CHART
from kubeplane.virtual_cluster import HOST_NAME_ANNOTATION, VIRTUAL_NAMESPACE

pytestmark = [pytest.mark.on_vcluster_node,
              pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(),
                                 reason=f"{REAL_VCLUSTER_CHART} is missing")]

ATTACKER, VICTIM, CUSTOMER = "np-attacker", "np-victim", "np-customer"
TRUST = {ATTACKER: "Trusted", VICTIM: "Internal", CUSTOMER: "Untrusted"}
READY_TIMEOUT_SECONDS = 480
"""Three real virtual control planes on a 2-core machine shared with other work."""
POD_TIMEOUT_SECONDS = 180
WEB_PORT = 8080
VCLUSTER_API_PORT = 8443
OPERATOR_RELEASE = "gpu-tenant-operator"
CHART_VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
OPERATOR_PORTS = {"webhook": CHART_VALUES["webhook"]["port"], "liveness": CHART_VALUES["liveness"]["port"],
                  "metrics": CHART_VALUES["metrics"]["port"]}
"""The operator pod's ports, as the chart opens them."""
MONITORING_NAMESPACE = "monitoring"
"""The chart's default metrics.scrapeNamespaceSelector names it."""


@dataclass
class HostPod:
    namespace: str
    name: str
    ip: str


def container(script: str, security_context: dict | None = None) -> dict:
    return {"name": "main", "image": TEST_IMAGE, "command": ["sh", "-c", script],
            "securityContext": dict(RESTRICTED) if security_context is None else security_context,
            "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}}}


def wait_enforced(plane: ControlPlane, pod: HostPod, *, egress: bool) -> HostPod:
    """Wait until the node's enforcer filters the pod (no wait when the node runs none)."""
    if plane.node.kube_router.pid:
        wait_for(lambda: plane.node.kube_router.enforces(pod.ip, egress=egress), timeout=60, interval=0.5,
                 what=f"kube-router to filter {'egress' if egress else 'ingress'} of {pod.namespace}/{pod.name}")
    return pod


def running_host_pod(plane: ControlPlane, namespace: str, name: str, virtual_name: str | None = None) -> HostPod:
    """The host pod `name` (or the one vCluster synced from the virtual pod `virtual_name`), Running."""
    def running():
        for pod in json.loads(plane.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]:
            annotations = pod["metadata"].get("annotations") or {}
            found = annotations.get(HOST_NAME_ANNOTATION) == virtual_name if virtual_name else \
                pod["metadata"]["name"] == name
            if found and pod["status"].get("phase") == "Running" and pod["status"].get("podIP"):
                return HostPod(namespace, pod["metadata"]["name"], pod["status"]["podIP"])
        return None
    try:
        return wait_for(running, timeout=POD_TIMEOUT_SECONDS, interval=1, what=f"pod {virtual_name or name} Running")
    except TimeoutError:
        raise AssertionError(plane.kubectl("get", "pods,events", "-n", namespace, check=False).stdout) from None


def connects(plane: ControlPlane, client: HostPod, address: str, port: int) -> bool:
    """A TCP connect from inside `client` to address:port, as its own process would make it
    (Debian's busybox `nc` has no `-z`: `-e true` closes the connection once made)."""
    return plane.kubectl("exec", "-n", client.namespace, client.name, "--", "nc", "-w", "2", address,
                         str(port), "-e", "true", check=False).returncode == 0


@dataclass
class Tenant:
    """A tenant's virtual cluster as its owner uses it: kubectl with the issued admin kubeconfig."""

    plane: ControlPlane
    name: str
    kubeconfig: Path

    @property
    def namespace(self) -> str:
        return f"tenant-{self.name}"

    def run(self, name: str, script: str, security_context: dict | None = None) -> HostPod:
        """A pod created in the virtual cluster, as the tenant would; returns its host pod."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": VIRTUAL_NAMESPACE},
               "spec": {"terminationGracePeriodSeconds": 0, "containers": [container(script, security_context)]}}
        self.plane.kubectl("apply", "-f", "-", kubeconfig_path=self.kubeconfig, input=yaml.safe_dump(pod))
        host = running_host_pod(self.plane, self.namespace, name, virtual_name=name)
        wait_enforced(self.plane, host, egress=True)
        return wait_enforced(self.plane, host, egress=False)

    def reaches_its_vcluster_api(self, client: HostPod) -> bool:
        """The pod's `kubernetes` Service, which vCluster points at the tenant's own API server."""
        return self.plane.kubectl("exec", "-n", client.namespace, client.name, "--", "sh", "-c",
                                  "httpsget https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version",
                                  check=False).returncode == 0

    def vcluster_pod(self) -> HostPod:
        selector = ",".join(f"{key}={value}" for key, value in naming.vcluster_pod_labels(self.name).items())
        [pod] = json.loads(self.plane.kubectl("get", "pods", "-n", self.namespace, "-l", selector,
                                              "-o", "json").stdout)["items"]
        return HostPod(self.namespace, pod["metadata"]["name"], pod["status"]["podIP"])

    def vcluster_service(self) -> dict:
        return json.loads(self.plane.kubectl("get", "service", naming.release_name(self.name), "-n", self.namespace,
                                             "-o", "json").stdout)


@pytest.fixture(scope="module")
def tenants(vcluster_node: ControlPlane, real_tenants, tmp_path_factory) -> dict[str, Tenant]:
    """Three Ready tenants, one per trust level. Ready needs each vCluster's syncer to reach the host
    API server, through its own pod's NetworkPolicy (the apiServerNetworks rule) with the enforcer
    running."""
    for name, trust in TRUST.items():
        real_tenants.apply(real_tenants.manifest(name, trust, f"{name}-owner", kubeconfig={"roles": ["admin"]},
                                                 preventDeletion=False))
    directory = tmp_path_factory.mktemp("network-policy")
    found = {}
    for name in TRUST:
        real_tenants.wait_ready(name, timeout=READY_TIMEOUT_SECONDS)
        secret = json.loads(vcluster_node.kubectl("get", "secret", naming.kubeconfig_secret_name(name, "admin"),
                                                  "-n", f"tenant-{name}", "-o", "json").stdout)
        path = directory / f"{name}.kubeconfig"
        path.write_bytes(base64.b64decode(secret["data"]["config"]))
        found[name] = Tenant(vcluster_node, name, path)
    return found


@pytest.fixture(scope="module")
def attacker(tenants) -> HostPod:
    return tenants[ATTACKER].run("prober", "sleep 3600")


def test_a_tenant_pod_reaches_its_own_virtual_cluster(tenants, attacker):
    assert tenants[ATTACKER].reaches_its_vcluster_api(attacker)


def test_a_tenant_pod_cannot_reach_another_tenants_pods(plane, tenants, attacker):
    victim = tenants[VICTIM]
    web = victim.run("web", f"httpd -f -p {WEB_PORT} -h /tmp")
    neighbour = victim.run("neighbour", "sleep 3600")
    assert connects(plane, neighbour, web.ip, WEB_PORT), "the victim's own pods reach its web server"

    assert not connects(plane, attacker, web.ip, WEB_PORT)


def test_a_tenant_pod_cannot_reach_another_tenants_virtual_cluster_api(plane, tenants, attacker):
    victim = tenants[VICTIM]
    api_pod = wait_enforced(plane, victim.vcluster_pod(), egress=False)
    service = victim.vcluster_service()
    [https] = [port for port in service["spec"]["ports"] if port["name"] == "https"]
    neighbour = victim.run("api-client", "sleep 3600")
    assert connects(plane, neighbour, api_pod.ip, VCLUSTER_API_PORT), "the victim's pods reach their vCluster API"

    assert not connects(plane, attacker, api_pod.ip, VCLUSTER_API_PORT), "by pod address"
    assert not connects(plane, attacker, service["spec"]["clusterIP"], https["port"]), "by Service address"
    if https.get("nodePort"):
        assert not connects(plane, attacker, plane.node.node_ip, https["nodePort"]), "by the exposure's node port"


def test_a_tenant_pod_reaches_neither_the_nodes_kubelet_nor_the_host_api_server(plane, attacker, scraper):
    """The node's address is in clusterNetworks; only the API server's port of it is open, and only
    to the vCluster's own pod (apiServerNetworks), for its syncer: the tenants' Ready shows the
    syncer got through. `kubectl exec` itself went through that kubelet port, from the host."""
    assert connects(plane, scraper, plane.node.node_ip, API_FORWARD_PORT), "a platform pod reaches the API server"

    assert not connects(plane, attacker, plane.node.node_ip, API_FORWARD_PORT)
    assert not connects(plane, attacker, plane.node.node_ip, KUBELET_PORT)


@pytest.fixture(scope="module")
def operator_stand_in(plane: ControlPlane, operator) -> Iterator[HostPod]:
    """A STAND-IN for the operator's pod (see the module docstring) behind the chart's NetworkPolicy,
    rendered with the networks the plane's operator runs with."""
    config = OperatorConfig.load(operator.config_path)
    namespace = config.operator_namespace
    values = {"config": {"clusterNetworks": [str(n) for n in config.cluster_networks],
                         "apiServerNetworks": [str(n) for n in config.api_server_networks]}}
    policy = plane.helm("template", OPERATOR_RELEASE, str(CHART), "--namespace", namespace, "--values", "-",
                        "--show-only", "templates/networkpolicy.yaml", input=yaml.safe_dump(values)).stdout
    for name in (namespace, MONITORING_NAMESPACE):
        plane.kubectl("create", "namespace", name, check=False)
    plane.kubectl("apply", "-n", namespace, "-f", "-", input=policy)
    listeners = " & ".join(f"httpd -f -p {port} -h /tmp" for port in OPERATOR_PORTS.values())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "operator-stand-in", "namespace": namespace,
        "labels": {"app.kubernetes.io/name": "gpu-tenant-operator", "app.kubernetes.io/instance": OPERATOR_RELEASE}},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container(f"{listeners} & wait")]}}
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    yield wait_enforced(plane, running_host_pod(plane, namespace, "operator-stand-in"), egress=False)
    plane.kubectl("delete", "pod", "-n", namespace, "operator-stand-in", "--wait=false", check=False)
    plane.kubectl("delete", "-n", namespace, "-f", "-", input=policy, check=False)


@pytest.fixture(scope="module")
def scraper(plane: ControlPlane) -> Iterator[HostPod]:
    """A pod in the namespace of the platform's Prometheus."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "scraper", "namespace": MONITORING_NAMESPACE},
           "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("sleep 3600")]}}
    plane.kubectl("create", "namespace", MONITORING_NAMESPACE, check=False)
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    yield running_host_pod(plane, MONITORING_NAMESPACE, "scraper")
    plane.kubectl("delete", "pod", "-n", MONITORING_NAMESPACE, "scraper", "--wait=false", check=False)


def test_only_prometheus_namespace_reaches_the_operators_metrics_and_no_pod_its_guard(plane, operator_stand_in, scraper):
    assert connects(plane, scraper, operator_stand_in.ip, OPERATOR_PORTS["metrics"])

    assert not connects(plane, scraper, operator_stand_in.ip, OPERATOR_PORTS["webhook"]), "a pod address is no API server"


def test_a_tenant_pod_cannot_reach_the_operators_pod_on_any_port(plane, attacker, operator_stand_in, scraper):
    assert connects(plane, scraper, operator_stand_in.ip, OPERATOR_PORTS["metrics"]), "the stand-in listens"

    for name, port in OPERATOR_PORTS.items():
        assert not connects(plane, attacker, operator_stand_in.ip, port), name


# -- shared namespaces, per trust level ------------------------------------------------------------

SHARED_LISTENERS = {
    "monitoring": ("prometheus", 9090, {"app": "prometheus"}),
    "gpu-operator": ("dcgm-exporter", 9400, {"app": "nvidia-dcgm-exporter"}),
    "kai-scheduler": ("kai-scheduler", 8080, {"app": "scheduler"}),
    "metallb-system": ("metallb-controller", 7472, {"app": "metallb", "component": "controller"}),
    "kube-system": ("metrics-server", 4443, {"k8s-app": "metrics-server"}),
    "ml-platform": ("model-registry", 5000, {"app": "model-registry"}),
}
"""A pod in each kind of shared namespace, listening on its usual port. ml-platform's registry is the
opening examples/config.yaml grants to Internal tenants (tenantEgress)."""
OPENINGS = {"Internal": {"ml-platform"}}


@pytest.fixture(scope="module")
def shared_listeners(plane: ControlPlane, scraper: HostPod) -> Iterator[dict[str, tuple[HostPod, int]]]:
    found = {}
    for namespace, (name, port, labels) in SHARED_LISTENERS.items():
        plane.kubectl("create", "namespace", namespace, check=False)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"terminationGracePeriodSeconds": 0, "containers": [container(f"httpd -f -p {port} -h /tmp")]}}
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    for namespace, (name, port, _) in SHARED_LISTENERS.items():
        listener = running_host_pod(plane, namespace, name)
        assert connects(plane, scraper, listener.ip, port), f"{namespace}/{name} answers a platform pod"
        found[namespace] = (listener, port)
    yield found
    for namespace, (name, _, _) in SHARED_LISTENERS.items():
        plane.kubectl("delete", "pod", "-n", namespace, name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def probers(tenants, attacker) -> dict[str, HostPod]:
    """A pod of each trust level's tenant."""
    return {"Trusted": attacker, "Internal": tenants[VICTIM].run("prober", "sleep 3600"),
            "Untrusted": tenants[CUSTOMER].run("prober", "sleep 3600")}


@pytest.mark.parametrize("trust", ["Trusted", "Internal", "Untrusted"])
def test_a_tenant_pod_reaches_no_shared_namespace_but_the_openings_of_its_trust_level(plane, probers,
                                                                                      shared_listeners, trust):
    reached = {namespace for namespace, (listener, port) in shared_listeners.items()
               if connects(plane, probers[trust], listener.ip, port)}
    assert reached == OPENINGS.get(trust, set())


# -- forged source addresses ---------------------------------------------------------------------

UDP_PORT = 9999
ROOT = {"runAsUser": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False}
"""A root container without any capability named: what Pod Security baseline (Trusted and Internal)
admits, and where a container runtime would grant NET_RAW."""


def received(plane: ControlPlane, pod: HostPod) -> str:
    return plane.kubectl("logs", "-n", pod.namespace, pod.name, check=False).stdout


def test_a_tenant_pod_cannot_forge_a_neighbours_source_address(plane, tenants, attacker, scraper):
    """The victim's NetworkPolicy admits its own pods' addresses; a datagram forged with one of them
    walks through it. A platform pod that keeps NET_RAW shows it arrives; the tenant's root pod,
    whose NET_RAW the guard dropped, cannot send it."""
    victim = tenants[VICTIM]
    sink = victim.run("udp-sink", f"spoofudp listen {UDP_PORT}")
    neighbour = victim.run("udp-neighbour", "sleep 3600")
    forger = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "forger", "namespace": MONITORING_NAMESPACE},
              "spec": {"terminationGracePeriodSeconds": 0, "containers": [container("sleep 3600", dict(ROOT))]}}
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(forger))
    platform = running_host_pod(plane, MONITORING_NAMESPACE, "forger")
    try:
        plane.kubectl("exec", "-n", platform.namespace, platform.name, "--", "spoofudp", "send", neighbour.ip,
                      sink.ip, str(UDP_PORT), "forged-by-platform")
        wait_for(lambda: "forged-by-platform" in received(plane, sink), timeout=30, interval=0.5,
                 what="the platform pod's forged datagram at the victim's sink")
        assert f"from {neighbour.ip}: forged-by-platform" in received(plane, sink)

        tenant_root = tenants[ATTACKER].run("forger", "sleep 3600", dict(ROOT))
        spec = json.loads(plane.kubectl("get", "pod", "-n", tenant_root.namespace, tenant_root.name,
                                        "-o", "json").stdout)["spec"]
        assert "NET_RAW" in spec["containers"][0]["securityContext"]["capabilities"]["drop"]
        sent = plane.kubectl("exec", "-n", tenant_root.namespace, tenant_root.name, "--", "spoofudp", "send",
                             neighbour.ip, sink.ip, str(UDP_PORT), "forged-by-tenant", check=False)
        assert sent.returncode == 1 and "operation not permitted" in sent.stderr, sent
        plane.kubectl("exec", "-n", platform.namespace, platform.name, "--", "spoofudp", "send", neighbour.ip,
                      sink.ip, str(UDP_PORT), "second-by-platform")
        wait_for(lambda: "second-by-platform" in received(plane, sink), timeout=30, interval=0.5,
                 what="a second platform datagram, sent after the tenant's try")
        assert "forged-by-tenant" not in received(plane, sink)
    finally:
        plane.kubectl("delete", "pod", "-n", MONITORING_NAMESPACE, "forger", "--wait=false", check=False)
