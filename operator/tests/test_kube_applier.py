"""LiveSnapshot.selects: when an object absent from the label-selected LIST is known absent."""

from __future__ import annotations

import asyncio

import pytest

from gputenant.kube.applier import LiveSnapshot


def labelled(labels: dict) -> dict:
    return {"metadata": {"name": "x", "labels": labels}}


@pytest.mark.parametrize("selector, labels, expected", [
    ("gputenant.io/tenant=a", {"gputenant.io/tenant": "a", "other": "1"}, True),
    ("gputenant.io/tenant=a", {"gputenant.io/tenant": "b"}, False),
    ("gputenant.io/tenant=a", {}, False),
    ("owner=helm,name=r", {"owner": "helm", "name": "r"}, True),
    ("owner=helm,name=r", {"owner": "helm"}, False),
    ("gputenant.io/tenant!=a", {"gputenant.io/tenant": "b"}, False),
    ("gputenant.io/tenant==a", {"gputenant.io/tenant": "a"}, False),
    ("gputenant.io/tenant", {"gputenant.io/tenant": "a"}, False),
])
def test_only_objects_carrying_every_equality_term_are_selected(selector, labels, expected):
    assert LiveSnapshot(client=None, label_selector=selector).selects(labelled(labels)) is expected


def test_an_object_without_labels_is_not_selected():
    assert not LiveSnapshot(client=None, label_selector="a=b").selects({"metadata": {"name": "x"}})


class RecordingLists:
    """TEST DOUBLE of KubeClient.list, recording what would be listed (the API server's side is in
    e2e/tests/test_reconciler_inprocess.py)."""

    def __init__(self):
        self.listed: list[tuple[str, str | None]] = []

    async def list(self, api_version: str, kind: str, *, namespace: str | None = None,
                   label_selector: str | None = None) -> list[dict]:
        self.listed.append((kind, namespace))
        return []


def test_a_namespace_the_pass_created_is_not_listed_but_what_the_pass_wrote_there_is_seen():
    client = RecordingLists()
    snapshot = LiveSnapshot(client=client, label_selector="gputenant.io/tenant=a")
    snapshot.namespace_created("tenant-a")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu", "namespace": "tenant-a"}}

    async def scenario() -> tuple[dict | None, dict | None]:
        before = await snapshot.lookup("v1", "ResourceQuota", "gpu", "tenant-a")
        snapshot.remember(quota)
        await snapshot.items("v1", "ResourceQuota", "tenant-b")
        return before, await snapshot.lookup("v1", "ResourceQuota", "gpu", "tenant-a")

    assert asyncio.run(scenario()) == (None, quota)
    assert client.listed == [("ResourceQuota", "tenant-b")]
