"""The tenant's NetworkPolicies: egress by allow-list per trust level (config tenantEgress), the
vCluster pod's own egress, and the vCluster API's ingress (exposure: test_render_exposure.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from test_render import CONFIG, by_kind, decision, tenant

from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.render import render_tenant

MODE_OF_TRUST = {Trust.TRUSTED: SharingMode.TIME_SLICING, Trust.INTERNAL: SharingMode.HAMI,
                 Trust.UNTRUSTED: SharingMode.MIG}
NETWORKS = {"clusterNetworks": ["10.244.0.0/16", "10.96.0.0/12", "192.168.0.0/24"],
            "apiServerNetworks": ["192.168.0.10/32"], "apiServerPort": 6443}
DNS_RULE = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
            "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
OWN_NAMESPACE_RULE = {"to": [{"podSelector": {}}]}
OUTSIDE_THE_CLUSTER = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": NETWORKS["clusterNetworks"]}}]}
REGISTRY = {"name": "model-registry", "namespace": "ml-platform", "podLabels": {"app": "registry"},
            "ports": [{"port": 5000}]}


def config(**document) -> OperatorConfig:
    return OperatorConfig.model_validate({"operatorNamespace": "gpu-ops", **NETWORKS, **document})


def policies(trust: Trust, operator_config: OperatorConfig, **spec) -> tuple[dict, dict, dict]:
    """(isolation, vCluster egress, vCluster API) of a tenant of `trust`."""
    objects = render_tenant(tenant(trust=trust, **spec), decision(MODE_OF_TRUST[trust]), operator_config).objects
    isolation, vcluster_egress, api = by_kind(objects, "NetworkPolicy")
    return isolation, vcluster_egress, api


@pytest.mark.parametrize("trust", list(Trust))
def test_every_pod_reaches_its_namespace_and_the_hosts_dns_on_port_53_and_no_other_namespace(trust):
    isolation, _, _ = policies(trust, config())
    assert isolation["spec"]["podSelector"] == {}
    assert isolation["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert isolation["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    egress = isolation["spec"]["egress"]
    assert egress[:2] == [OWN_NAMESPACE_RULE, DNS_RULE]
    namespace_peers = [peer for rule in egress for peer in rule["to"] if "namespaceSelector" in peer]
    assert namespace_peers == DNS_RULE["to"], "no namespace but the DNS pods of kube-system, and those on port 53"


def test_trusted_and_internal_reach_the_outside_but_no_address_of_the_cluster_untrusted_nothing_outside():
    for trust in (Trust.TRUSTED, Trust.INTERNAL):
        isolation, _, _ = policies(trust, config())
        assert isolation["spec"]["egress"] == [OWN_NAMESPACE_RULE, DNS_RULE, OUTSIDE_THE_CLUSTER], trust
    isolation, _, _ = policies(Trust.UNTRUSTED, config())
    assert isolation["spec"]["egress"] == [OWN_NAMESPACE_RULE, DNS_RULE]


def test_the_configuration_opens_endpoints_per_trust_level_with_their_ports_only():
    operator_config = config(tenantEgress={"Internal": {"platformEndpoints": [REGISTRY]},
                                           "Untrusted": {"internet": True},
                                           "Trusted": {"internet": False}})
    registry_rule = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml-platform"}},
                             "podSelector": {"matchLabels": {"app": "registry"}}}],
                     "ports": [{"protocol": "TCP", "port": 5000}]}
    internal, _, _ = policies(Trust.INTERNAL, operator_config)
    assert internal["spec"]["egress"] == [OWN_NAMESPACE_RULE, DNS_RULE, registry_rule, OUTSIDE_THE_CLUSTER]
    trusted, _, _ = policies(Trust.TRUSTED, operator_config)
    assert trusted["spec"]["egress"] == [OWN_NAMESPACE_RULE, DNS_RULE], "an opening of one level is not another's"
    untrusted, _, _ = policies(Trust.UNTRUSTED, operator_config)
    assert untrusted["spec"]["egress"] == [OWN_NAMESPACE_RULE, DNS_RULE, OUTSIDE_THE_CLUSTER]


def test_an_address_block_endpoint_opens_its_ports_on_that_block():
    operator_config = config(tenantEgress={"Trusted": {"platformEndpoints": [
        {"name": "datasets", "cidr": "192.168.0.20/32", "ports": [{"protocol": "TCP", "port": 443}]}]}})
    isolation, _, _ = policies(Trust.TRUSTED, operator_config)
    assert {"to": [{"ipBlock": {"cidr": "192.168.0.20/32"}}], "ports": [{"protocol": "TCP", "port": 443}]} \
        in isolation["spec"]["egress"]


@pytest.mark.parametrize(("endpoint", "message"), [
    ({"name": "x", "ports": [{"port": 1}]}, "set exactly one of namespace and cidr"),
    ({"name": "x", "namespace": "a", "cidr": "10.0.0.0/8", "ports": [{"port": 1}]}, "set exactly one"),
    ({"name": "x", "cidr": "10.0.0.0/8", "podLabels": {"a": "b"}, "ports": [{"port": 1}]}, "set namespace"),
    ({"name": "x", "namespace": "monitoring", "ports": []}, "ports"),
    ({"name": "x", "namespace": "gpu-ops", "ports": [{"port": 9443}]}, "the operator's namespace"),
    ({"name": "x", "namespace": "tenant-other", "ports": [{"port": 80}]}, "the namespaces of tenants"),
])
def test_an_opening_to_the_operator_or_a_tenant_or_without_ports_is_refused_naming_the_field(endpoint, message):
    with pytest.raises(ValidationError, match=message):
        config(tenantEgress={"Internal": {"platformEndpoints": [endpoint]}})


@pytest.mark.parametrize("trust", list(Trust))
def test_only_the_vcluster_pod_reaches_the_api_server_addresses_on_its_port_and_the_outside(trust):
    isolation, vcluster_egress, _ = policies(trust, config())
    api_server_rule = {"to": [{"ipBlock": {"cidr": "192.168.0.10/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}
    assert api_server_rule not in isolation["spec"]["egress"], "tenant code does not reach the host API server"
    assert vcluster_egress["spec"]["podSelector"] == {"matchLabels": {"app": "vcluster", "release": "team-a"}}
    assert vcluster_egress["spec"]["policyTypes"] == ["Egress"]
    assert vcluster_egress["spec"]["egress"] == [api_server_rule, OUTSIDE_THE_CLUSTER]


def test_without_api_server_networks_the_vcluster_pod_reaches_it_outside_the_cluster():
    _, vcluster_egress, _ = policies(Trust.UNTRUSTED, config(apiServerNetworks=[]))
    assert vcluster_egress["spec"]["egress"] == [OUTSIDE_THE_CLUSTER]


def test_the_vcluster_api_admits_the_operator_and_the_tenants_own_pods():
    _, _, api = policies(Trust.UNTRUSTED, CONFIG)
    assert api["spec"]["podSelector"] == {"matchLabels": {"app": "vcluster", "release": "team-a"}}
    assert api["spec"]["ingress"] == [{
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpu-ops"}}},
                 {"podSelector": {}}],
        "ports": [{"protocol": "TCP", "port": 8443}]}]
