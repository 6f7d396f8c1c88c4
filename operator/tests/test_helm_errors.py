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
from gputenant.helm.errors import (
    ChartNotFoundError,
    HelmAdmissionDeniedError,
    HelmForbiddenError,
    from_pyhelm3,
)

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
    ('Error: INSTALLATION FAILED: namespaces "tenant-t1" is forbidden: unable to create new content in '
     "namespace tenant-t1 because it is being terminated", TransientHelmError),
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


ROLE_ESCALATION = (
    'Error: INSTALLATION FAILED: failed to create resource: roles.rbac.authorization.k8s.io "vc-recsys" is '
    'forbidden: user "system:serviceaccount:gpu-tenant-operator:gpu-tenant-operator" (groups=["system:serviceaccounts" '
    '"system:serviceaccounts:gpu-tenant-operator" "system:authenticated"]) is attempting to grant RBAC permissions not '
    'currently held:\n{APIGroups:[""], Resources:["pods/resize"], Verbs:["patch" "update"]}')
NO_RIGHT = ('Error: INSTALLATION FAILED: secrets "vc-config-t1" is forbidden: User "system:serviceaccount:ops:op" '
            'cannot create resource "secrets" in API group "" in the namespace "tenant-t1"')
QUOTA = ('Error: INSTALLATION FAILED: failed to create resource: persistentvolumeclaims "data-t1-0" is forbidden: '
         "exceeded quota: tenant-quota, requested: requests.storage=5Gi, used: requests.storage=0, "
         "limited: requests.storage=1Gi")
POLICY = ('Error: INSTALLATION FAILED: services "t1" is forbidden: ValidatingAdmissionPolicy "no-nodeports" with '
          'binding "no-nodeports" denied request: NodePort Services are not allowed')
WEBHOOK = ('Error: INSTALLATION FAILED: 1 error occurred:\n\t* admission webhook "pods.validate.gputenant.io" '
           "denied the request: container syncer: privileged is not allowed")


@pytest.mark.parametrize("stderr, expected, refused_object, words_start", [
    (ROLE_ESCALATION, HelmForbiddenError, 'roles.rbac.authorization.k8s.io "vc-recsys"', 'user "system:serviceaccount'),
    (NO_RIGHT, HelmForbiddenError, 'secrets "vc-config-t1"', 'User "system:serviceaccount:ops:op" cannot create'),
    (QUOTA, HelmAdmissionDeniedError, 'persistentvolumeclaims "data-t1-0"', "exceeded quota: tenant-quota"),
    (POLICY, HelmAdmissionDeniedError, 'services "t1"', 'ValidatingAdmissionPolicy "no-nodeports"'),
    (WEBHOOK, HelmAdmissionDeniedError, None, 'admission webhook "pods.validate.gputenant.io" denied'),
])
def test_refusals_by_rbac_or_admission_are_permanent_and_name_the_object(stderr, expected, refused_object, words_start):
    """Helm retried these as HelmUnavailable forever, piling up failed revisions (issue 10)."""
    for error in (classify_helm_failure(stderr, values_hash="sha256:abc"),
                  from_pyhelm3(pyhelm3_errors.Error(1, b"", stderr.encode()), values_hash="sha256:abc")):
        assert type(error) is expected and isinstance(error, PermanentHelmError)
        assert error.reason == {HelmForbiddenError: "HelmForbidden", HelmAdmissionDeniedError: "HelmAdmissionDenied"}[expected]
        assert error.refused_object == refused_object and error.server_message.startswith(words_start)
        assert error.values_hash == "sha256:abc"
        assert (refused_object or "an object of the vCluster chart") in error.message
        assert error.server_message in error.message


def test_pyhelm3_invalid_resource_class_does_not_hide_a_refusal():
    """pyhelm3 calls any stderr with "is invalid" an InvalidResourceError; a refusal quoting such
    words is still a refusal."""
    stderr = QUOTA + " (the request is invalid for this namespace)"
    assert type(from_pyhelm3(pyhelm3_errors.InvalidResourceError(1, b"", stderr.encode()))) is HelmAdmissionDeniedError


def test_every_permanent_error_has_a_condition_reason():
    for error_type in (InvalidValuesError, ChartNotFoundError, PermanentHelmError, TransientHelmError,
                       HelmForbiddenError, HelmAdmissionDeniedError):
        assert error_type("x").reason.isalpha() and error_type("x").reason[0].isupper()


def test_pyhelm3_classes_are_typed():
    def make(cls, stderr: str):
        return cls(1, b"", stderr.encode())
    assert type(from_pyhelm3(make(pyhelm3_errors.ConnectionError, "etcdserver: leader changed"))) is TransientHelmError
    assert type(from_pyhelm3(make(pyhelm3_errors.FailedToRenderChartError, "execution error at x"))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, SCHEMA_FAILURE))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, "i/o timeout"))) is TransientHelmError
