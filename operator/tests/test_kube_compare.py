"""The no-op check that keeps resyncs write-free: desired ⊆ live, quantities by value."""

from decimal import Decimal

import pytest

from gputenant.kube.compare import holds, is_subset, parse_quantity


@pytest.mark.parametrize("text, value", [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("1Gi", Decimal(2**30)), ("1k", Decimal(1000)),
    ("1e3", Decimal(1000)), (2, Decimal(2)), (0.5, Decimal("0.5")), ("64Gi", Decimal(64 * 2**30)),
])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["abc", "1Gib", "", True, None, "v1"])
def test_parse_quantity_rejects_non_quantities(text):
    assert parse_quantity(text) is None


def test_quantities_compare_by_value():
    assert is_subset({"hard": {"limits.memory": "1Gi", "cpu": 2}},
                     {"hard": {"limits.memory": "1024Mi", "cpu": "2000m"}})
    assert not is_subset({"hard": {"cpu": "3"}}, {"hard": {"cpu": "2"}})


def test_extra_live_fields_are_fine_missing_desired_fields_are_not():
    live = {"metadata": {"name": "a", "uid": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}}
    assert is_subset({"metadata": {"name": "a", "labels": {"a": "1"}}}, live)
    assert not is_subset({"metadata": {"labels": {"c": "3"}}}, live)
    assert not is_subset({"spec": {"y": 1}}, live)


def test_lists_compare_element_wise_and_by_length():
    assert is_subset({"rules": [{"verbs": ["get"]}]}, {"rules": [{"verbs": ["get"], "x": 1}]})
    assert not is_subset({"rules": [{"verbs": ["get"]}]}, {"rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]})
    assert not is_subset({"rules": [{"verbs": ["get"]}]}, {"rules": [{"verbs": ["list"]}]})


def test_empty_desired_values_match_absent_live_ones():
    assert is_subset({"spec": {"podSelector": {}, "ingress": []}}, {"spec": {"podSelector": {}}})
    assert is_subset({"metadata": {"annotations": None}}, {"metadata": {}})


def test_booleans_are_not_quantities():
    assert not is_subset({"enabled": True}, {"enabled": 1})
    assert not is_subset({"enabled": False}, {"enabled": "false"})


def test_secret_string_data_compares_as_data():
    desired = {"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"config": "abc"}}
    assert holds(desired, {"kind": "Secret", "metadata": {"name": "s"}, "data": {"config": "YWJj"}})
    assert not holds(desired, {"kind": "Secret", "metadata": {"name": "s"}, "data": {"config": "eHl6"}})


def test_missing_or_terminating_objects_never_hold():
    desired = {"kind": "Namespace", "metadata": {"name": "n"}}
    assert not holds(desired, None)
    assert not holds(desired, {"kind": "Namespace", "metadata": {"name": "n", "deletionTimestamp": "t"}})
