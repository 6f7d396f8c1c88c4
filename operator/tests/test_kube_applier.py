"""LiveSnapshot.selects: when an object absent from the label-selected LIST is known absent."""

from __future__ import annotations

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
