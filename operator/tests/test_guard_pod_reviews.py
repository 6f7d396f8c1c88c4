"""Pod reviews answered without kopf's handler machinery (guard/pod_reviews.py): the AdmissionReview
answers a tenant's pods get, and that nothing the guard cannot judge is let through. The tenants
index is kopf's shape, a mapping of host namespace to the tenants recorded there; the API server's
side of these answers is tested in e2e/tests/test_guard_admission.py and test_attack_pods.py."""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
from pathlib import Path

import jsonpatch
import pytest

from gputenant.config.models import OperatorConfig
from gputenant.guard.configuration import MUTATE_POD, VALIDATE_POD
from gputenant.guard.pod_reviews import PodReviews, route
from gputenant.guard.webhook import TENANTS_INDEX, Guard, TenantView

CONFIG = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")
SPEC = {"trust": "Internal", "owners": [{"kind": "User", "name": "dana"}], "gpu": {"quota": 2},
        "sharing": {"mode": "HAMi", "hami": {"corePercent": 25}}}
TENANTS = {"tenant-shares": [TenantView("shares", "uid-1", 1, SPEC, "tenant-shares")]}
TENANT_USER = {"username": "system:serviceaccount:tenant-shares:vc-shares"}


def share_pod(namespace: str = "tenant-shares", **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": namespace, "annotations": {"gpu-fraction": "0.25"}},
            "spec": {"containers": [{"name": "infer", "image": "busybox"}], **spec}}


def review(pod: dict | None, operation: str = "CREATE", resource: dict | None = None, user: dict | None = None) -> dict:
    payload = {"uid": "review-7", "operation": operation, "userInfo": user or TENANT_USER,
               "resource": resource or {"group": "", "version": "v1", "resource": "pods"}}
    if pod is not None:
        payload["object"] = pod
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": payload}


def reviews(observed: list | None = None) -> PodReviews:
    return PodReviews(Guard(CONFIG, client=None),
                      observe=(lambda *decision: observed.append(decision)) if observed is not None else None)


def patched(answer: dict, pod: dict) -> dict:
    assert answer["response"]["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["response"]["patch"])))


def test_a_share_pod_is_patched_with_its_queue_placement_and_hami_caps_then_allowed():
    pod = share_pod()
    mutated = reviews().answer(review(pod), MUTATE_POD, TENANTS)
    assert mutated["response"]["uid"] == "review-7" and mutated["response"]["allowed"] is True
    admitted = patched(mutated, pod)
    assert admitted["metadata"]["labels"]["kai.scheduler/queue"]
    assert admitted["spec"]["initContainers"][0]["name"].startswith("gputenant-hami")
    assert reviews().answer(review(admitted), MUTATE_POD, TENANTS)["response"].get("patch") is None, \
        "a reinvocation on the mutated pod changes nothing"
    observed: list = []
    validated = reviews(observed).answer(review(admitted), VALIDATE_POD, TENANTS)
    assert validated == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": "review-7", "allowed": True}}
    assert [decision[:2] for decision in observed] == [("none", "allowed")]


def test_a_pod_the_rules_refuse_is_refused_with_the_rule_named_and_observed():
    pod = share_pod(hostPID=True)
    observed: list = []
    answer = reviews(observed).answer(review(patched(reviews().answer(review(pod), MUTATE_POD, TENANTS), pod)),
                                      VALIDATE_POD, TENANTS)
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 403
    assert "hostPID" in answer["response"]["status"]["message"]
    assert observed and observed[0][1] == "refused"


@pytest.mark.parametrize("webhook", [MUTATE_POD, VALIDATE_POD])
def test_a_namespace_no_tenant_records_is_refused_by_both_webhooks(webhook):
    answer = reviews().answer(review(share_pod(namespace="tenant-forged")), webhook, TENANTS)
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 503
    assert "tenant-forged" in answer["response"]["status"]["message"]


@pytest.mark.parametrize("webhook", [MUTATE_POD, VALIDATE_POD])
def test_a_tenant_with_an_invalid_spec_gets_its_pods_refused_not_patched(webhook):
    invalid = {"tenant-shares": [TenantView("shares", "uid-2", 1, {**SPEC, "trust": "Root"}, "tenant-shares")]}
    answer = reviews().answer(review(share_pod()), webhook, invalid)
    if webhook == MUTATE_POD:
        assert answer["response"] == {"uid": "review-7", "allowed": True}, "validation names the reason"
    else:
        assert answer["response"]["allowed"] is False and "invalid spec" in answer["response"]["status"]["message"]


@pytest.mark.parametrize("request_, why", [
    (review(share_pod(), resource={"group": "", "version": "v1", "resource": "services"}), "pods only"),
    (review(share_pod(), operation="DELETE"), "CREATE and UPDATE only"),
    (review(None), "no object"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request"),
])
@pytest.mark.parametrize("webhook", [MUTATE_POD, VALIDATE_POD])
def test_a_review_the_guard_cannot_judge_is_refused_with_400(request_, why, webhook):
    answer = reviews().answer(copy.deepcopy(request_), webhook, TENANTS)
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 400
    assert why in answer["response"]["status"]["message"]


@pytest.mark.parametrize("webhook", [MUTATE_POD, VALIDATE_POD])
def test_an_error_inside_the_guard_refuses_the_pod(webhook):
    """A pod without a namespace cannot reach the webhook from the API server; here it stands for
    any bug in the guard, which must fail closed."""
    pod = share_pod()
    del pod["metadata"]["namespace"]
    answer = reviews().answer(review(pod), webhook, TENANTS)
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 500


async def kopf_webhook_fn(request, *, webhook=None, indices, **_):
    return {"served by": "kopf", "webhook": webhook}


def test_the_route_answers_pod_webhooks_itself_and_passes_the_rest_to_kopf():
    fn = functools.partial(kopf_webhook_fn, indices={TENANTS_INDEX: TENANTS})
    serve = route(fn, reviews())
    assert asyncio.run(serve(review(share_pod()), webhook=VALIDATE_POD))["response"]["uid"] == "review-7"
    assert asyncio.run(serve({"request": {}}, webhook="validate-tenant", headers={})) == \
        {"served by": "kopf", "webhook": "validate-tenant"}


def test_the_route_refuses_to_start_without_kopfs_tenants_index():
    with pytest.raises(RuntimeError, match="tenants index"):
        route(functools.partial(kopf_webhook_fn, indices={}), reviews())
