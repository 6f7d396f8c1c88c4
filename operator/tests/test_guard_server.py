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
