"""config vcluster.exposure LoadBalancer on the local cluster, with a REAL implementation: MetalLB in
L2 mode (kubeplane/metallb.py, controller on the host, speaker in the node's network namespace).
One real vCluster (v0.36.1) tenant, driven by the operator on the host:

- while no IPAddressPool exists the Service gets no address, and the tenant waits with
  VClusterReady False, LoadBalancerPending (not an error);
- once the pool exists MetalLB assigns an address of it, vCluster signs it into its certificate by
  itself, and the tenant turns Ready with its endpoint, and its issued kubeconfigs, at
  https://<that address>:443;
- the issued admin kubeconfig lists the virtual cluster's namespaces from this process on the
  host, outside the node's network namespace: the host found the address by ARP, which the speaker
  answered with the node's MAC, and kube-proxy on the node forwarded to the vCluster pod;
- a LoadBalancer Service the tenant creates inside its vCluster is refused (vCluster creates the
  host Service at once, and the namespace's quota admits only the vCluster's own), so it takes no
  address of the pool.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import subprocess
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant import naming
from gputenant.api import conditions as reasons
from kubeplane import ControlPlane, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.metallb import metallb  # noqa: F401 (fixture: MetalLB on the node plane, no pool yet)
from kubeplane.operator_process import (
    OperatorProcess,
    guard_flags,
    real_vcluster_config,
    remove_guard_configurations,
)
from kubeplane.virtual_cluster import kubeconfig_server, namespaces_through

READY_TIMEOUT_SECONDS = 480
"""A real virtual control plane on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""
TENANT = "lb-team"

pytestmark = [
    pytest.mark.on_vcluster_node,
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]


@pytest.fixture(scope="module")
def operator(vcluster_node: ControlPlane, metallb, tmp_path_factory):  # noqa: F811
    """The operator with the real-vCluster configuration, exposure LoadBalancer (no address: MetalLB
    assigns one); it starts after MetalLB and stops before it."""
    directory = tmp_path_factory.mktemp("operator")
    config_path = real_vcluster_config(vcluster_node, directory / "config.yaml")
    document = yaml.safe_load(config_path.read_text())
    document["vcluster"]["exposure"] = {"type": "LoadBalancer"}
    config_path.write_text(yaml.safe_dump(document))
    running = OperatorProcess(vcluster_node, config_path, vcluster_node.log_dir / "operator.log",
                              extra_args=guard_flags(directory / "guard-certs")).start()
    yield running
    running.stop()
    remove_guard_configurations(vcluster_node)


def _vcluster_condition(tenants, name: str) -> dict:
    return tenants.condition(tenants.get(name), reasons.VCLUSTER_READY)


def _host_neighbour_mac(link: str, address: str) -> str | None:
    """The MAC the host resolved `address` to on `link` by ARP."""
    entries = json.loads(subprocess.run(["ip", "-j", "neigh", "show", address, "dev", link], capture_output=True,
                                        text=True, check=True).stdout)
    return next((entry.get("lladdr") for entry in entries if entry.get("lladdr")), None)


def _node_mac(plane: ControlPlane) -> str:
    [link] = json.loads(subprocess.run(plane.node.network.enter(["ip", "-j", "link", "show", "eth0"]),
                                       capture_output=True, text=True, check=True).stdout)
    return link["address"]


def test_a_load_balancer_address_reaches_the_virtual_cluster_from_outside_the_node(
        plane, metallb, real_tenants, tmp_path: Path):  # noqa: F811
    real_tenants.apply(real_tenants.manifest(TENANT, "Trusted", owner="lb-owner", kubeconfig={"roles": ["admin"]}))
    namespace, release = f"tenant-{TENANT}", naming.release_name(TENANT)

    pending = wait_for(lambda: (lambda c: c if c.get("reason") == reasons.LOAD_BALANCER_PENDING else None)(
        _vcluster_condition(real_tenants, TENANT)), timeout=READY_TIMEOUT_SECONDS, interval=1,
        what=f"tenant {TENANT} waiting for its load-balancer address")
    assert pending["status"] == "False"
    assert f"Service {namespace}/{release}" in pending["message"]
    assert real_tenants.condition(real_tenants.get(TENANT), "Ready")["status"] == "False"

    metallb.add_pool()
    pooled = time.monotonic()
    ready = real_tenants.wait_ready(TENANT, timeout=READY_TIMEOUT_SECONDS)
    print(f"\ntenant {TENANT}: Ready {time.monotonic() - pooled:.1f}s after the address pool was written")

    with plane.api_client() as admin:
        service = kubernetes.client.CoreV1Api(admin).read_namespaced_service(release, namespace)
    assert service.spec.type == "LoadBalancer"
    [ingress] = service.status.load_balancer.ingress
    assert ipaddress.ip_address(ingress.ip) in metallb.pool
    reachable = f"https://{ingress.ip}:443"
    assert ready["status"]["vcluster"]["endpoint"] == reachable

    secret = yaml.safe_load(plane.kubectl("get", "secret", naming.kubeconfig_secret_name(TENANT, "admin"), "-n",
                                          namespace, "-o", "yaml").stdout)
    kubeconfig_path = tmp_path / "admin.kubeconfig"
    kubeconfig_path.write_bytes(base64.b64decode(secret["data"]["config"]))
    kubectl = [str(plane.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig_path}"]
    assert kubeconfig_server(kubectl) == reachable
    # from this process on the host, outside the node's namespace; TLS checked against the LB address
    assert {"namespace/default", "namespace/kube-system"} <= namespaces_through(kubectl)
    # the host learnt where the address is by ARP, answered by the speaker with the node's eth0
    assert _host_neighbour_mac(plane.node.network.host_link, ingress.ip) == _node_mac(plane)

    # a tenant (cluster-admin of its vCluster) asks for a load balancer of its own: vCluster creates
    # the host Service at once, which the namespace's quota refuses (only the vCluster's own is
    # admitted), and the tenant is told why
    created = subprocess.run([*kubectl, "create", "service", "loadbalancer", "tenant-lb", "--tcp=80:80"],
                             capture_output=True, text=True, timeout=60)
    assert created.returncode != 0
    assert "exceeded quota" in created.stderr and "services.loadbalancers" in created.stderr
    with plane.api_client() as admin:
        services = kubernetes.client.CoreV1Api(admin).list_namespaced_service(namespace).items
    assert [svc.metadata.name for svc in services if svc.spec.type == "LoadBalancer"] == [release]
