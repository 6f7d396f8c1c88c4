"""Helm failures sorted into transient (retry) and permanent (wait for a spec change)."""

from __future__ import annotations

import pytest
from pyhelm3 import errors as pyhelm3_errors

from gputenant.api import conditions
from gputenant.helm import (
    HelmError,
    InvalidValuesError,
    PermanentHelmError,
    TransientHelmError,
    UpgradePathError,
    classify_helm_failure,
    helm_needed,
)
from gputenant.helm.errors import (
    ChartNotFoundError,
    HelmAdmissionDeniedError,
    HelmForbiddenError,
    from_pyhelm3,
)
from gputenant.reconcile.adapters import helm_step_error

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


def all_subclasses(cls: type) -> list[type]:
    return [cls] + [sub for direct in cls.__subclasses__() for sub in all_subclasses(direct)]


def test_every_helm_failure_has_one_name_from_the_conditions_module():
    """The class's reason is the condition's reason and the metric's outcome: one name each."""
    names = {value for value in vars(conditions).values() if isinstance(value, str)}
    for error_type in all_subclasses(HelmError):
        assert error_type.reason in names, f"{error_type.__name__}.reason {error_type.reason!r} not in api/conditions.py"
    assert UpgradePathError.reason == conditions.UPGRADE_REFUSED


@pytest.mark.parametrize("error", [
    TransientHelmError("helm busy"), InvalidValuesError("bad values"), PermanentHelmError("exists"),
    ChartNotFoundError("no chart"), HelmForbiddenError.of("role \"x\"", "user cannot"),
    UpgradePathError("too far", installed="0.34.0", wanted="0.36.0"),
], ids=lambda error: type(error).__name__)
def test_one_translation_into_a_step_error(error):
    step_error = helm_step_error(error)
    assert (step_error.reason, step_error.message, step_error.transient) == (
        error.reason, str(error), isinstance(error, TransientHelmError))
    assert helm_step_error(error, "told otherwise").message == "told otherwise"


def deployed(status: str) -> dict:
    return {"metadata": {"labels": {"owner": "helm", "status": status}}}


@pytest.mark.parametrize("recorded, revisions, needed", [
    ("sha256:a", [deployed("deployed")], False),
    ("sha256:a", [deployed("superseded"), deployed("failed")], True),
    ("sha256:a", [], True),
    ("sha256:old", [deployed("deployed")], True),
    (None, [deployed("deployed")], True),
])
def test_the_one_skip_rule(recorded, revisions, needed):
    assert helm_needed(recorded, "sha256:a", revisions) is needed


def test_pyhelm3_classes_are_typed():
    def make(cls, stderr: str):
        return cls(1, b"", stderr.encode())
    assert type(from_pyhelm3(make(pyhelm3_errors.ConnectionError, "etcdserver: leader changed"))) is TransientHelmError
    assert type(from_pyhelm3(make(pyhelm3_errors.FailedToRenderChartError, "execution error at x"))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, SCHEMA_FAILURE))) is InvalidValuesError
    assert type(from_pyhelm3(make(pyhelm3_errors.Error, "i/o timeout"))) is TransientHelmError
