"""Pure rules of the vCluster release: the one-minor-at-a-time upgrade path and the values hash."""

from __future__ import annotations

import pytest

from gputenant.helm import InvalidValuesError, PermanentHelmError, UpgradePathError, check_upgrade_path, values_hash
from gputenant.helm.versions import parse_version


@pytest.mark.parametrize("installed, wanted", [
    (None, "0.36.1"),          # fresh install
    ("0.36.1", "0.36.1"),      # nothing to do
    ("0.36.0", "0.36.1"),      # patch
    ("0.35.3", "0.36.1"),      # next minor
    ("0.35.3", "0.36.0"),
    ("v0.35.3", "0.36.1"),     # a leading v is the same version
    ("0.36.1", "0.37.0-rc.1"),  # next minor's pre-release
    ("0.37.0-rc.1", "0.37.0"),  # release after its pre-release
    ("0.36.1-local", "0.36.1"),
])
def test_allowed_paths(installed, wanted):
    check_upgrade_path(installed, wanted)


@pytest.mark.parametrize("installed, wanted, words", [
    ("0.34.7", "0.36.1", "upgrade to 0.35.x first"),
    ("0.30.0", "0.36.1", "upgrade to 0.31.x first"),
    ("0.36.1", "0.35.3", "downgrade"),
    ("0.36.1", "0.36.0", "downgrade"),
    ("0.37.0", "0.37.0-rc.1", "downgrade"),
    ("0.36.1", "1.0.0", "major"),
])
def test_refused_paths_name_versions_and_fix(installed, wanted, words):
    with pytest.raises(UpgradePathError) as raised:
        check_upgrade_path(installed, wanted)
    error = raised.value
    assert isinstance(error, PermanentHelmError)
    assert error.reason == "UpgradeRefused"
    assert (error.installed, error.wanted) == (installed, wanted)
    assert words in error.message
    assert installed in error.message and wanted in error.message
    assert "spec.vcluster.chartVersion" in error.message


def test_not_a_version_names_the_field():
    with pytest.raises(ValueError, match="spec.vcluster.chartVersion"):
        check_upgrade_path("0.36.1", "latest")


def test_prerelease_ordering_follows_semver():
    ordered = ["0.36.0", "0.37.0-alpha", "0.37.0-alpha.1", "0.37.0-alpha.beta", "0.37.0-rc.1",
               "0.37.0-rc.2", "0.37.0-rc.10", "0.37.0"]
    assert sorted(ordered, key=parse_version) == ordered


def test_values_hash_ignores_key_order_and_changes_with_values_or_version():
    values = {"controlPlane": {"statefulSet": {"resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}},
              "sync": {"toHost": {"ingresses": {"enabled": False}}}}
    reordered = {"sync": {"toHost": {"ingresses": {"enabled": False}}},
                 "controlPlane": {"statefulSet": {"resources": {"limits": {"memory": "2Gi", "cpu": "2"}}}}}
    assert values_hash(values, "0.36.1") == values_hash(reordered, "0.36.1")
    assert values_hash(values, "0.36.1").startswith("sha256:")
    assert values_hash(values, "0.36.1") != values_hash(values, "0.36.0")
    changed = {**values, "sync": {"toHost": {"ingresses": {"enabled": True}}}}
    assert values_hash(values, "0.36.1") != values_hash(changed, "0.36.1")


def test_values_hash_tells_types_apart():
    assert values_hash({"replicas": 1}, "0.36.1") != values_hash({"replicas": "1"}, "0.36.1")


def test_values_that_helm_cannot_receive_are_invalid():
    with pytest.raises(InvalidValuesError, match="JSON"):
        values_hash({"when": object()}, "0.36.1")
    with pytest.raises(InvalidValuesError):
        values_hash({"ratio": float("nan")}, "0.36.1")
