"""A hostile tenant takes another's address through a Service, on the real API server (issue 38).

The tenant's Services reach its host namespace written by the vCluster syncer's ServiceAccount
(here a client certificate of that user, bound to every verb on services and services/status, as
the syncer's Role is), and the node routes whatever address a Service claims. Each attack claims
the victim tenant's load-balancer address through a field or annotation a load balancer or
kube-proxy honours, on CREATE, on UPDATE or through the status subresource, and the admission
guard (its Service webhook, failing closed) refuses it naming the field. A Service that claims
nothing is stored, and the platform's own writer (the admin, as the operator's Helm release and
the load balancer are) may set an address.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from cases.pod_attacks import CONFIG, TENANT_CRD, namespace
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.guard.standalone import GuardThread
from gputenant.policy.choose import decide
from gputenant.render.tenant import render_tenant
from kubeplane import wait_for
from kubeplane.fixtures import guard_serves, install_crds, remove_tenants
from kubeplane.operator_process import remove_guard_configurations

ATTACKER, VICTIM = "svc-attacker", "svc-victim"
TRUST = {ATTACKER: "Trusted", VICTIM: "Internal"}
VICTIM_ADDRESS = "192.168.0.240"


def syncer(tenant: str) -> str:
    return f"system:serviceaccount:{namespace(tenant)}:vc-{tenant}"


def service(name: str | None = None, annotations: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name or f"svc-{uuid.uuid4().hex[:8]}", "annotations": annotations or {}},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}], **spec}}


@pytest.fixture(scope="module")
def guarded(plane, tmp_path_factory):
    if not TENANT_CRD.is_file():
        pytest.skip("crds/tenant.yaml is missing: generate it with `gputenant crd`")
    install_crds(plane, TENANT_CRD)
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for name, trust in TRUST.items():
            body = {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name},
                    "spec": {"trust": trust, "owners": [{"kind": "User", "name": f"{name}-owner"}], "gpu": {"quota": 1}}}
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", body)
            tenant = GpuTenant.model_validate(body)
            rendered = render_tenant(tenant, decide(name, tenant.spec, CONFIG), CONFIG)
            labels = next(o for o in rendered.objects if o["kind"] == "Namespace")["metadata"]["labels"]
            plane.create_namespace(namespace(name), labels=labels)
            rbac.create_namespaced_role(namespace(name), {"metadata": {"name": "syncer"}, "rules": [
                {"apiGroups": [""], "resources": ["services", "services/status"], "verbs": ["*"]}]})
            rbac.create_namespaced_role_binding(namespace(name), {
                "metadata": {"name": "syncer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
                "subjects": [{"kind": "ServiceAccount", "name": f"vc-{name}", "namespace": namespace(name)}]})
    identity = plane.user(syncer(ATTACKER), ["system:serviceaccounts", f"system:serviceaccounts:{namespace(ATTACKER)}"])
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path_factory.mktemp("service-guard-certs"),
                        client_ca_file=plane.webhook_client_ca_path).start()
    try:
        for name in TRUST:
            wait_for(lambda name=name: guard_serves(plane, namespace(name)), timeout=60,
                     what=f"the guard to serve {namespace(name)}")
        yield plane, identity
    finally:
        guard.stop()
        remove_guard_configurations(plane)
        remove_tenants(plane, {name: namespace(name) for name in TRUST})


def refusal(error: ApiException) -> str:
    return json.loads(error.body)["message"] if error.body else str(error)


@contextmanager
def as_attacker(guarded) -> Iterator[kubernetes.client.CoreV1Api]:
    plane, identity = guarded
    with plane.api_client(identity) as client:
        yield kubernetes.client.CoreV1Api(client)


def test_the_victims_load_balancer_address_is_the_platforms_to_give(guarded):
    """The platform's writer (the admin, as the operator's Helm release) may name an address and
    write the load balancer's status in a tenant namespace."""
    plane, _ = guarded
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        core.create_namespaced_service(namespace(VICTIM), service("vcluster", type="LoadBalancer",
                                                                    loadBalancerIP=VICTIM_ADDRESS))
        core.patch_namespaced_service_status("vcluster", namespace(VICTIM),
                                             {"status": {"loadBalancer": {"ingress": [{"ip": VICTIM_ADDRESS}]}}})
        stored = core.read_namespaced_service("vcluster", namespace(VICTIM))
    assert stored.status.load_balancer.ingress[0].ip == VICTIM_ADDRESS


ON_CREATE = [
    ("external-ip", service(externalIPs=[VICTIM_ADDRESS]), "spec.externalIPs"),
    ("load-balancer-ip", service(type="LoadBalancer", loadBalancerIP=VICTIM_ADDRESS), "spec.loadBalancerIP"),
    ("metallb-ips", service(type="LoadBalancer", annotations={"metallb.universe.tf/loadBalancerIPs": VICTIM_ADDRESS}),
     "metallb.universe.tf/loadBalancerIPs"),
    ("metallb-shared-ip", service(type="LoadBalancer", annotations={"metallb.universe.tf/allow-shared-ip": "vcluster"}),
     "metallb.universe.tf/allow-shared-ip"),
    ("metallb-pool", service(type="LoadBalancer", annotations={"metallb.io/address-pool": "platform"}),
     "metallb.io/address-pool"),
    ("load-balancer-class", service(type="LoadBalancer", loadBalancerClass="example.com/lb"), "spec.loadBalancerClass"),
]


@pytest.mark.parametrize(("attack", "manifest", "field"), ON_CREATE, ids=[a[0] for a in ON_CREATE])
def test_a_service_that_claims_an_address_is_refused_on_create(guarded, attack, manifest, field):
    with as_attacker(guarded) as core, pytest.raises(ApiException) as refused:
        core.create_namespaced_service(namespace(ATTACKER), manifest)
    assert refused.value.status == 403
    assert "[service-address]" in refusal(refused.value) and field in refusal(refused.value)


def test_a_stored_service_may_not_gain_an_external_ip_by_update(guarded):
    with as_attacker(guarded) as core:
        created = core.create_namespaced_service(namespace(ATTACKER), service())
        with pytest.raises(ApiException) as refused:
            core.patch_namespaced_service(created.metadata.name, namespace(ATTACKER),
                                          {"spec": {"externalIPs": [VICTIM_ADDRESS]}})
        assert "spec.externalIPs" in refusal(refused.value)
        core.patch_namespaced_service(created.metadata.name, namespace(ATTACKER), {"metadata": {"labels": {"a": "b"}}})


def test_a_tenant_may_not_write_a_load_balancer_address_into_status(guarded):
    with as_attacker(guarded) as core:
        created = core.create_namespaced_service(namespace(ATTACKER), service())
        with pytest.raises(ApiException) as refused:
            core.patch_namespaced_service_status(created.metadata.name, namespace(ATTACKER),
                                                 {"status": {"loadBalancer": {"ingress": [{"ip": VICTIM_ADDRESS}]}}})
        assert "status.loadBalancer.ingress" in refusal(refused.value)
        stored = core.read_namespaced_service(created.metadata.name, namespace(ATTACKER))
    assert not (stored.status.load_balancer and stored.status.load_balancer.ingress)
