"""The guard's endpoint keeps no memory per reviewed pod: kopf's own admission path, as kopf binds it."""

from __future__ import annotations

import asyncio
import functools

import kopf
from kopf._cogs.structs.references import Insights, Resource
from kopf._core.engines.admission import serve_admission_request
from kopf._core.reactor.inventory import ResourceMemories

from gputenant.guard.server import without_object_memory

PODS = Resource("", "v1", "pods", namespaced=True)


def update_review(index: int) -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{index}", "namespace": "tenant-a",
                                                           "uid": f"uid-{index}"}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"review-{index}", "operation": "UPDATE", "userInfo": {"username": "system:serviceaccount:tenant-a:vc"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": pod, "oldObject": pod}}


def reviewed_pods_remembered(wrap) -> int:
    insights = Insights()
    insights.webhook_resources.add(PODS)
    memories = ResourceMemories()
    fn = functools.partial(serve_admission_request, settings=kopf.OperatorSettings(), memories=memories,
                           memobase=kopf.Memo(), registry=kopf.OperatorRegistry(), insights=insights, indices={})

    async def review_all() -> None:
        served = wrap(fn)
        for index in range(200):
            response = await served(update_review(index))
            assert response["response"]["allowed"] is True
    asyncio.run(review_all())
    return len(memories._items)


def test_kopf_alone_remembers_every_updated_pod_and_the_guard_none():
    assert reviewed_pods_remembered(lambda fn: fn) == 200
    assert reviewed_pods_remembered(without_object_memory) == 0


def test_platform_controllers_are_told_from_the_tenants_side():
    from gputenant.config.models import OperatorConfig
    from gputenant.guard.webhook import Guard

    guard = Guard(OperatorConfig(), client=None)
    sides = {user: guard.by_tenant({"username": user}, "tenant-a") for user in (
        "system:serviceaccount:tenant-a:vc-a", "system:serviceaccount:tenant-b:default", "alice@example.com",
        "system:serviceaccount:kai-scheduler:podgrouper", "system:kube-scheduler", "system:node:gpu-1")}
    assert sides == {"system:serviceaccount:tenant-a:vc-a": True, "system:serviceaccount:tenant-b:default": True,
                     "alice@example.com": True, "system:serviceaccount:kai-scheduler:podgrouper": False,
                     "system:kube-scheduler": False, "system:node:gpu-1": False}


def test_members_of_system_masters_are_the_platforms_side():
    """A controller authenticated by a client certificate in system:masters (KAI's pod-grouper
    annotating a synced pod with its PodGroup) is not the tenant, whatever its user name."""
    from gputenant.config.models import OperatorConfig
    from gputenant.guard.webhook import Guard

    guard = Guard(OperatorConfig(), client=None)
    assert guard.by_tenant({"username": "kai-podgrouper", "groups": ["system:masters", "system:authenticated"]},
                           "tenant-a") is False
    assert guard.by_tenant({"username": "kai-podgrouper", "groups": ["system:authenticated"]}, "tenant-a") is True
    assert guard.by_tenant({"username": "system:serviceaccount:tenant-a:vc-a",
                            "groups": ["system:serviceaccounts", "system:serviceaccounts:tenant-a"]}, "tenant-a")


def test_decisions_are_cached_per_uid_and_dropped_with_their_tenant():
    from gputenant.config.models import OperatorConfig
    from gputenant.guard.webhook import Guard, TenantView

    spec = {"trust": "Trusted", "owners": [{"kind": "User", "name": "o"}], "gpu": {"quota": 0, "limit": 0}}
    guard = Guard(OperatorConfig(), client=None)
    old = TenantView("team", "uid-1", 1, spec, "tenant-team")
    lowered = TenantView("team", "uid-2", 1, {**spec, "trust": "Untrusted"}, "tenant-team")
    assert guard.decision(old, lambda: {"uid-1"})[0].trust.value == "Trusted"
    assert guard.decision(lowered, lambda: {"uid-2"})[0].trust.value == "Untrusted"
    assert set(guard.decisions) == {"uid-2"}
