"""No address taking (guard/services.py, guard/service_reviews.py): a tenant's Service, as its
syncer writes it on the host, may claim no address, on CREATE, UPDATE and status alike; the
platform's writers are not judged. The API server's side: e2e/tests/test_attack_services.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gputenant.config.models import OperatorConfig
from gputenant.guard.configuration import VALIDATE_SERVICE, webhook_configurations
from gputenant.guard.service_reviews import ServiceReviews
from gputenant.guard.services import refusal, service_problems
from gputenant.guard.webhook import Guard, TenantView

CONFIG = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")
SPEC = {"trust": "Trusted", "owners": [{"kind": "User", "name": "dana"}], "gpu": {"quota": 1}}
TENANTS = {"tenant-web": [TenantView("web", "uid-1", 1, SPEC, "tenant-web")]}
SYNCER = {"username": "system:serviceaccount:tenant-web:vc-web"}
OPERATOR = {"username": "system:serviceaccount:gpu-tenant-operator:gpu-tenant-operator"}
LOAD_BALANCER = {"username": "system:serviceaccount:metallb-system:controller"}
VICTIM_ADDRESS = "192.168.0.240"


def service(namespace: str = "tenant-web", annotations: dict | None = None, status: dict | None = None,
            **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web-x-default-x-web", "namespace": namespace, "annotations": annotations or {}},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}], **spec},
            **({"status": status} if status else {})}


def review(obj: dict, old: dict | None = None, user: dict | None = None, subresource: str | None = None) -> dict:
    payload = {"uid": "r-1", "operation": "UPDATE" if old else "CREATE", "userInfo": user or SYNCER,
               "resource": {"group": "", "version": "v1", "resource": "services"}, "object": obj,
               "namespace": obj["metadata"]["namespace"]}
    if old is not None:
        payload["oldObject"] = old
    if subresource:
        payload["subResource"] = subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": payload}


def answer(request: dict) -> dict:
    return ServiceReviews(Guard(CONFIG, client=None)).answer(request, VALIDATE_SERVICE, TENANTS)["response"]


ADDRESS_TAKING = [
    ("external-ip", service(externalIPs=[VICTIM_ADDRESS]), "spec.externalIPs"),
    ("load-balancer-ip", service(type="LoadBalancer", loadBalancerIP=VICTIM_ADDRESS), "spec.loadBalancerIP"),
    ("load-balancer-class", service(type="LoadBalancer", loadBalancerClass="example.com/other"),
     "spec.loadBalancerClass"),
    ("metallb-ips", service(type="LoadBalancer", annotations={"metallb.universe.tf/loadBalancerIPs": VICTIM_ADDRESS}),
     "metallb.universe.tf/loadBalancerIPs"),
    ("metallb-new-domain", service(type="LoadBalancer", annotations={"metallb.io/loadBalancerIPs": VICTIM_ADDRESS}),
     "metallb.io/loadBalancerIPs"),
    ("metallb-shared-ip", service(type="LoadBalancer", annotations={"metallb.universe.tf/allow-shared-ip": "key"}),
     "metallb.universe.tf/allow-shared-ip"),
    ("metallb-pool", service(type="LoadBalancer", annotations={"metallb.universe.tf/address-pool": "platform"}),
     "metallb.universe.tf/address-pool"),
    ("cilium-ips", service(annotations={"lbipam.cilium.io/ips": VICTIM_ADDRESS}), "lbipam.cilium.io/ips"),
    ("kube-vip", service(annotations={"kube-vip.io/loadbalancerIPs": VICTIM_ADDRESS}), "kube-vip.io/loadbalancerIPs"),
    ("cloud-eip", service(annotations={"service.beta.kubernetes.io/aws-load-balancer-eip-allocations": "eipalloc-1"}),
     "service.beta.kubernetes.io/aws-load-balancer-eip-allocations"),
    ("subdomain", service(annotations={"x.metallb.io/loadBalancerIPs": VICTIM_ADDRESS}), "x.metallb.io"),
    ("unknown-field", service(futureAddressField=VICTIM_ADDRESS), "spec.futureAddressField"),
]


@pytest.mark.parametrize(("attack", "manifest", "field"), ADDRESS_TAKING, ids=[a[0] for a in ADDRESS_TAKING])
def test_a_tenant_service_claiming_an_address_is_refused_naming_the_field(attack, manifest, field):
    refused = answer(review(manifest))
    assert refused["allowed"] is False and refused["status"]["code"] == 403
    assert "[service-address]" in refused["status"]["message"] and field in refused["status"]["message"]


@pytest.mark.parametrize(("attack", "manifest", "field"), ADDRESS_TAKING, ids=[a[0] for a in ADDRESS_TAKING])
def test_an_update_that_adds_the_claim_is_refused(attack, manifest, field):
    assert answer(review(manifest, old=service()))["allowed"] is False


def test_plain_services_and_ordinary_annotations_are_admitted():
    for manifest in (service(), service(type="ClusterIP", clusterIP="10.96.0.50"),
                     service(annotations={"vcluster.loft.sh/object-name": "web", "example.com/team": "a",
                                          "service.kubernetes.io/topology-mode": "Auto"}),
                     service(type="ExternalName", externalName="db.example.com", selector=None)):
        assert answer(review(manifest))["allowed"] is True, manifest


def test_a_tenant_may_not_write_load_balancer_ingress_into_status():
    old = service(type="LoadBalancer")
    forged = service(type="LoadBalancer", status={"loadBalancer": {"ingress": [{"ip": VICTIM_ADDRESS}]}})
    refused = answer(review(forged, old=old, subresource="status"))
    assert refused["allowed"] is False and "status.loadBalancer.ingress" in refused["status"]["message"]
    assert answer(review(copy.deepcopy(old), old=old, subresource="status"))["allowed"] is True


def test_the_platforms_writers_are_not_judged():
    assigned = service(type="LoadBalancer", status={"loadBalancer": {"ingress": [{"ip": VICTIM_ADDRESS}]}})
    assert answer(review(assigned, old=service(type="LoadBalancer"), user=LOAD_BALANCER,
                         subresource="status"))["allowed"] is True
    assert answer(review(service(type="LoadBalancer", loadBalancerIP=VICTIM_ADDRESS), user=OPERATOR))["allowed"]


def test_a_service_stored_before_the_rules_can_still_be_updated_but_not_claim_more():
    stored = service(externalIPs=[VICTIM_ADDRESS])
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"x": "y"}
    assert refusal(relabelled, stored, None) == []
    assert refusal(service(externalIPs=[VICTIM_ADDRESS, "192.168.0.241"]), stored, None)


def test_a_namespace_no_tenant_records_is_refused():
    refused = answer(review(service(namespace="tenant-ghost")))
    assert refused["allowed"] is False and "not the host namespace of any GpuTenant" in refused["status"]["message"]


def test_a_malformed_review_is_refused():
    request = review(service())
    request["request"]["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    assert answer(request)["allowed"] is False


def test_every_address_field_of_the_allow_list_is_judged():
    assert service_problems(service()) == []


def test_the_services_webhook_fails_closed_on_tenant_namespaces_for_spec_and_status():
    [_, validating] = webhook_configurations(CONFIG, {"url": "https://guard.example:9443"})
    [webhook] = [w for w in validating["webhooks"] if w["name"].startswith("services.")]
    assert webhook["failurePolicy"] == "Fail"
    assert webhook["rules"][0]["resources"] == ["services", "services/status"]
    assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert webhook["namespaceSelector"]["matchExpressions"][0]["key"] == "gputenant.io/tenant"
