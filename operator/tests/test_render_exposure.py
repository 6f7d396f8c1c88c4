"""Unit tests of config vcluster.exposure: what it renders into the chart's values and the tenant's
NetworkPolicies, and the URL the operator and the kubeconfigs name for it."""

from __future__ import annotations

import base64

import jsonschema
import pytest
from pydantic import ValidationError
from test_render import CONFIG, by_kind, decision, tenant, upstream_schema  # noqa: F401 (fixture)

from gputenant.api.v1alpha1 import SharingMode
from gputenant.config.models import OperatorConfig, VClusterExposure
from gputenant.kubeconfigs import https_server, server_of, with_server
from gputenant.reconcile.steps.vcluster import service_server
from gputenant.render import render_tenant

NODE_PORT = OperatorConfig.model_validate({
    "operatorNamespace": "gpu-ops", "clusterNetworks": ["10.244.0.0/16", "10.96.0.0/12"],
    "vcluster": {"exposure": {"type": "NodePort", "address": "192.0.2.10"}}})


def test_cluster_ip_is_the_default_and_renders_no_service_block():
    assert CONFIG.vcluster.exposure.type.value == "ClusterIP"
    values = render_tenant(tenant(), decision(SharingMode.MIG), CONFIG).vcluster_values
    assert "service" not in values["controlPlane"]


def test_node_port_sets_the_service_type_and_signs_the_address(upstream_schema):  # noqa: F811
    spec = {"vcluster": {"serverURL": "https://team-a.gpu.example.com", "extraSANs": ["10.1.2.3"]}}
    values = render_tenant(tenant(**spec), decision(SharingMode.MIG), NODE_PORT).vcluster_values
    jsonschema.validate(values, upstream_schema)
    assert values["controlPlane"]["service"] == {"spec": {"type": "NodePort"}}
    assert values["controlPlane"]["proxy"]["extraSANs"] == [
        "team-a.tenant-team-a.svc", "192.0.2.10", "team-a.gpu.example.com", "10.1.2.3"]
    assert values["exportKubeConfig"]["server"] == "https://team-a.tenant-team-a.svc:443"


@pytest.mark.parametrize(("exposure", "message"), [
    ({"type": "NodePort"}, "type NodePort needs address"),
    ({"type": "ClusterIP", "address": "192.0.2.10"}, "address is set but type is ClusterIP"),
    ({"type": "NodePort", "address": "https://192.0.2.10:443"}, "is not a host name or IP address"),
    ({"type": "LoadBalancer", "address": "lb.example.com"}, r"type LoadBalancer requests an IP address"),
    ({"type": "NodePort", "address": "192.0.2.10", "loadBalancerClass": "metallb"},
     "apply to type LoadBalancer only, not NodePort"),
    ({"type": "ClusterIP", "annotations": {"metallb.io/address-pool": "tenants"}},
     "apply to type LoadBalancer only, not ClusterIP"),
    ({"type": "Ingress"}, "type"),
])
def test_bad_exposure_is_refused_naming_the_field_and_the_fix(exposure, message):
    with pytest.raises(ValidationError, match=message):
        OperatorConfig.model_validate({"vcluster": {"exposure": exposure}})


def _load_balancer(**exposure) -> OperatorConfig:
    return NODE_PORT.model_copy(update={"vcluster": NODE_PORT.vcluster.model_copy(
        update={"exposure": VClusterExposure.model_validate({"type": "LoadBalancer", **exposure})})})


def test_load_balancer_without_address_leaves_the_ip_to_the_implementation(upstream_schema):  # noqa: F811
    values = render_tenant(tenant(), decision(SharingMode.MIG), _load_balancer()).vcluster_values
    jsonschema.validate(values, upstream_schema)
    assert values["controlPlane"]["service"] == {"spec": {"type": "LoadBalancer"}}
    # vCluster signs its Service's load-balancer address itself once assigned (pkg/server/cert)
    assert values["controlPlane"]["proxy"]["extraSANs"] == ["team-a.tenant-team-a.svc"]


def test_load_balancer_requests_its_address_class_and_annotations_and_signs_the_address(upstream_schema):  # noqa: F811
    config = _load_balancer(address="192.0.2.40", loadBalancerClass="metallb.io/metallb",
                            annotations={"metallb.io/address-pool": "tenants"})
    values = render_tenant(tenant(), decision(SharingMode.MIG), config).vcluster_values
    jsonschema.validate(values, upstream_schema)
    assert values["controlPlane"]["service"] == {
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "metallb.io/metallb", "loadBalancerIP": "192.0.2.40"},
        "annotations": {"metallb.io/address-pool": "tenants"}}
    assert "192.0.2.40" in values["controlPlane"]["proxy"]["extraSANs"]


def test_load_balancer_admits_outside_clients_to_the_api_port_like_node_port():
    assert _api_policy(_load_balancer()) == _api_policy(NODE_PORT)


def _load_balancer_quota(config: OperatorConfig, entry: str = "services.loadbalancers") -> str:
    [quota] = [obj for obj in render_tenant(tenant(), decision(SharingMode.MIG), config).objects
               if obj["kind"] == "ResourceQuota"]
    return quota["spec"]["hard"][entry]


def test_only_the_vclusters_own_service_may_be_a_load_balancer():
    assert _load_balancer_quota(_load_balancer()) == "1"
    assert _load_balancer_quota(NODE_PORT) == "0"
    assert _load_balancer_quota(CONFIG) == "0"


def test_only_the_vclusters_own_service_may_open_a_node_port():
    """The chart's NodePort Service has two ports (https, kubelet), its LoadBalancer one (https), each
    with a node port; ClusterIP exposure needs none."""
    assert _load_balancer_quota(_load_balancer(), "services.nodeports") == "1"
    assert _load_balancer_quota(NODE_PORT, "services.nodeports") == "2"
    assert _load_balancer_quota(CONFIG, "services.nodeports") == "0"


def _service(ingress: list[dict] | None = None, node_port: int | None = 31443) -> dict:
    return {"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443, "nodePort": node_port}]},
            "status": {"loadBalancer": {"ingress": ingress} if ingress is not None else {}}}


@pytest.mark.parametrize(("ingress", "server"), [
    (None, None),
    ([], None),
    ([{"ip": "172.31.0.5"}], "https://172.31.0.5:443"),
    ([{"hostname": "a1.elb.example.com"}], "https://a1.elb.example.com:443"),
    ([{"ip": "2001:db8::5"}], "https://[2001:db8::5]:443"),
])
def test_load_balancer_server_is_the_first_ingress_at_the_https_port(ingress, server):
    assert service_server(_load_balancer().vcluster.exposure, _service(ingress)) == server


def test_node_port_server_waits_for_the_node_port_and_ignores_ingress():
    exposure = NODE_PORT.vcluster.exposure
    assert service_server(exposure, _service([{"ip": "172.31.0.5"}])) == "https://192.0.2.10:31443"
    assert service_server(exposure, _service(node_port=None)) is None
    assert service_server(exposure, {}) is None


def _api_policy(config: OperatorConfig, **spec) -> dict:
    _, _, api = by_kind(render_tenant(tenant(**spec), decision(SharingMode.MIG), config).objects, "NetworkPolicy")
    return api


def test_node_port_admits_forwarded_clients_to_the_api_port_only():
    [rule] = _api_policy(NODE_PORT)["spec"]["ingress"]
    assert {"ipBlock": {"cidr": "0.0.0.0/0"}} in rule["from"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]


def test_cluster_ip_admits_no_address_block():
    [rule] = _api_policy(CONFIG)["spec"]["ingress"]
    assert not [peer for peer in rule["from"] if "ipBlock" in peer]


def test_argocd_namespace_is_admitted_only_when_the_tenant_registers_there():
    argocd_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gitops"}}}
    [registered] = _api_policy(CONFIG, argocd={"enabled": True, "namespace": "gitops"})["spec"]["ingress"]
    [unregistered] = _api_policy(CONFIG, argocd={"enabled": False, "namespace": "gitops"})["spec"]["ingress"]
    assert argocd_peer in registered["from"]
    assert argocd_peer not in unregistered["from"]


def test_tenant_egress_is_unchanged_by_exposure():
    def egress(config: OperatorConfig) -> list:
        isolation, _, _ = by_kind(render_tenant(tenant(), decision(SharingMode.MIG), config).objects, "NetworkPolicy")
        return isolation["spec"]["egress"]
    assert egress(NODE_PORT) == egress(NODE_PORT.model_copy(update={"vcluster": CONFIG.vcluster}))


def test_the_admin_kubeconfig_is_redirected_to_the_node_port_with_its_ca():
    ca = base64.b64encode(b"CA").decode()
    admin = {"clusters": [{"name": "c", "cluster": {"server": "https://team-a.tenant-team-a.svc:443",
                                                    "certificate-authority-data": ca}}], "users": []}
    redirected = with_server(admin, https_server("192.0.2.10", 31443))
    assert server_of(redirected) == "https://192.0.2.10:31443"
    assert redirected["clusters"][0]["cluster"]["certificate-authority-data"] == ca
    assert server_of(admin) == "https://team-a.tenant-team-a.svc:443"
    assert https_server("2001:db8::1", 31443) == "https://[2001:db8::1]:31443"
