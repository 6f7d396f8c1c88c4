"""Helm failures sorted into transient (retry) and permanent (wait for a spec change)."""

from __future__ import annotations

import pytest
from pyhelm3 import errors as pyhelm3_errors

from gputenant.helm import (
    InvalidValuesError,
    PermanentHelmError,
    TransientHelmError,
    classify_helm_failure,
)
from gputenant.helm.errors import ChartNotFoundError, from_pyhelm3

SCHEMA_FAILURE = """Error: UPGRADE FAILED: values don't meet the specifications of the schema(s) in the following chart(s):
vcluster:
- at '/controlPlane/statefulSet/highAvailability/replicas': got string, want integer"""


@pytest.mark.parametrize("stderr, expected", [
    (SCHEMA_FAILURE, InvalidValuesError),
    ("Error: INSTALLATION FAILED: YAML parse error on vcluster/templates/statefulset.yaml: error converting YAML to JSON",
     InvalidValuesError),
    ("Error: UPGRADE FAILED: unable to build kubernetes objects from release manifest: error validating data",
     InvalidValuesError),
    ('Error: INSTALLATION FAILED: StatefulSet.apps "t1" is invalid: spec.replicas: Invalid value: -1', InvalidValuesError),
    ('Error: chart "vcluster" version "0.99.0" not found in https://charts.loft.sh repository', ChartNotFoundError),
    ("Error: INSTALLATION FAILED: rendered manifests contain a resource that already exists. Unable to continue",
     PermanentHelmError),
    ('Error: admission webhook "guard.gputenant.io" denied the request: no', PermanentHelmError),
    ("Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress", TransientHelmError),
    ('Error: Kubernetes cluster unreachable: Get "https://127.0.0.1:6443/version": dial tcp 127.0.0.1:6443: '
     "connect: connection refused", TransientHelmError),
    ("Error: UPGRADE FAILED: context deadline exceeded", TransientHelmError),
    ('Error: looks like "https://charts.invalid" is not a valid chart repository or cannot be reached: '
     'Get "https://charts.invalid/index.yaml": dial tcp: lookup charts.invalid: no such host', TransientHelmError),
    ("", TransientHelmError),
])
def test_classification(stderr, expected):
    error = classify_helm_failure(stderr, values_hash="sha256:abc")
    assert type(error) is expected
    assert error.values_hash == "sha256:abc"
    assert error.message == (stderr.strip() or "helm failed without a message")


def test_every_permanent_error_has_a_condition_reason():
    for error_type in (InvalidValuesError, ChartNotFoundError, PermanentHelmError, TransientHelmError):
        assert error_type("x").reason.isalpha() and error_type("x").reason[0].isupper()


def test_pyhelm3_classes_are_typed():
    def make(cls, stderr: str):
        return cls(1, b"", stderr.encode())
    assert type(from_pyhelm3(make(pyhelm3_errors.ConnectionError, "etcdserver: leader changed"))) is TransientHelmError
    assert type(from_pyhelm3(make(pyhelm3_errors.FailedToRenderChartError, "execution error at x"))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, SCHEMA_FAILURE))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, "i/o timeout"))) is TransientHelmError
