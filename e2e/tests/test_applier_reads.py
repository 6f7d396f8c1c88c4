"""What the Applier reads and writes on the real apiserver, counted by its client: a labelled
object missing from the kind's LIST costs no GET (docs/performance.md, hot spot 5), an object the
LIST cannot show (no selector labels) still does, and a pre-existing unlabelled object is taken
over by one write and found by the next LIST."""

from __future__ import annotations

import asyncio
import uuid

import kubernetes

from gputenant.kube import KubeClient
from gputenant.kube.applier import Applier, LiveSnapshot

SELECTOR = "gputenant.io/tenant=reads"


def config_map(name: str, namespace: str, labelled: bool = True) -> dict:
    labels = {"gputenant.io/tenant": "reads"} if labelled else {}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": {"k": "v"}}


def ensure_counted(plane, obj: dict) -> tuple[dict, dict]:
    """Ensure `obj` with a fresh snapshot; the requests sent by method (discovery excluded) and
    the Applier's result."""
    async def main():
        async with KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "applier-reads-test") as client:
            await client.resource("v1", "ConfigMap")
            client.counters.by_method.clear()
            applier = Applier(client, LiveSnapshot(client, SELECTOR))
            await applier.ensure(obj)
            return dict(client.counters.by_method), applier.result
    return asyncio.run(main())


def test_a_labelled_object_missing_from_the_list_is_applied_without_a_get(plane):
    namespace = plane.create_namespace(f"reads-{uuid.uuid4().hex[:6]}").metadata.name
    requests, result = ensure_counted(plane, config_map("new", namespace))
    assert requests == {"GET": 1, "PATCH": 1}
    assert len(result.applied) == 1

    requests, result = ensure_counted(plane, config_map("new", namespace))
    assert requests == {"GET": 1} and len(result.unchanged) == 1


def test_an_object_without_the_selector_labels_is_still_fetched(plane):
    namespace = plane.create_namespace(f"reads-{uuid.uuid4().hex[:6]}").metadata.name
    requests, _ = ensure_counted(plane, config_map("plain", namespace, labelled=False))
    assert requests == {"GET": 2, "PATCH": 1}
    requests, result = ensure_counted(plane, config_map("plain", namespace, labelled=False))
    assert requests == {"GET": 2} and len(result.unchanged) == 1


def test_a_pre_existing_unlabelled_object_is_taken_over_by_one_write(plane):
    namespace = plane.create_namespace(f"reads-{uuid.uuid4().hex[:6]}").metadata.name
    with plane.api_client() as api:
        kubernetes.client.CoreV1Api(api).create_namespaced_config_map(
            namespace, {"metadata": {"name": "old"}, "data": {"k": "other"}})

    requests, _ = ensure_counted(plane, config_map("old", namespace))
    assert requests == {"GET": 1, "PATCH": 1}
    with plane.api_client() as api:
        live = kubernetes.client.CoreV1Api(api).read_namespaced_config_map("old", namespace)
    assert live.metadata.labels == {"gputenant.io/tenant": "reads"} and live.data == {"k": "v"}

    requests, result = ensure_counted(plane, config_map("old", namespace))
    assert requests == {"GET": 1} and len(result.unchanged) == 1
