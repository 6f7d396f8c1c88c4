"""Typed Helm failures: the pipeline retries a transient one later and turns a permanent one into
a condition that stays until the tenant's spec (and so the values hash) changes. A failure has one
name, its class's ``reason`` (a constant of api/conditions.py): the condition's reason and the
``outcome`` of the Helm metric alike."""

from __future__ import annotations

import re

from pyhelm3 import errors as pyhelm3_errors

from gputenant.api import conditions as reasons


class HelmError(Exception):
    """A Helm operation on a tenant's vCluster release failed.

    ``reason`` is one CamelCase word for the condition; ``values_hash`` identifies the values and
    chart version that failed, so the pipeline can hold off until they change.
    """

    reason = reasons.HELM_FAILED
    transient = False
    """Worth retrying unchanged; anything else waits for the spec, configuration or chart to change."""

    def __init__(self, message: str, *, values_hash: str | None = None):
        super().__init__(message)
        self.message = message
        self.values_hash = values_hash


class TransientHelmError(HelmError):
    """Worth retrying unchanged: the API server was unreachable, another Helm operation held the
    release, a timeout."""

    reason = reasons.HELM_UNAVAILABLE
    transient = True


class PermanentHelmError(HelmError):
    """Retrying the same values and chart version fails the same way; the spec must change."""


class RefusedByApiServerError(PermanentHelmError):
    """The API server refused an object of the chart: the same install is refused the same way
    until the operator's rights, the namespace's admission or the values change. Keeps the object
    and the API server's own words for the condition."""

    verdict = "the API server refused"
    fix = "change what the API server refused"

    def __init__(self, message: str, *, refused_object: str | None = None, server_message: str = "",
                 values_hash: str | None = None):
        super().__init__(message, values_hash=values_hash)
        self.refused_object = refused_object
        self.server_message = server_message

    @classmethod
    def of(cls, refused_object: str | None, server_message: str, *,
           values_hash: str | None = None) -> RefusedByApiServerError:
        what = refused_object or "an object of the vCluster chart"
        return cls(f"{cls.verdict} {what}: {server_message}; {cls.fix}", refused_object=refused_object,
                   server_message=server_message, values_hash=values_hash)


class HelmForbiddenError(RefusedByApiServerError):
    """RBAC refused the operator: it may not create the object, or the object (a Role) grants a
    permission the operator does not hold itself (escalation prevention)."""

    reason = reasons.HELM_FORBIDDEN
    verdict = "RBAC forbids the operator to install"
    fix = ("the operator's tenant-namespace ClusterRole (charts/gpu-tenant-operator, templates/rbac.yaml) "
           "must hold every permission the vCluster chart grants; upgrade the operator's chart to one that "
           "matches this vCluster chart version")


class HelmAdmissionDeniedError(RefusedByApiServerError):
    """Admission refused an object: a webhook, a ValidatingAdmissionPolicy, Pod Security, the
    namespace's ResourceQuota or LimitRange."""

    reason = reasons.HELM_ADMISSION_DENIED
    verdict = "admission denied"
    fix = ("change the tenant's spec (vcluster resources, quota) or the policy that denied it so that the "
           "vCluster chart's objects are admitted in the tenant namespace")


class InvalidValuesError(PermanentHelmError):
    """The chart refused the values: schema validation, a template error, an invalid object."""

    reason = reasons.INVALID_VALUES


class ChartNotFoundError(PermanentHelmError):
    reason = reasons.CHART_NOT_FOUND


class ChartVersionMismatchError(PermanentHelmError):
    """A local chart directory holds another version than the one asked for."""

    reason = reasons.CHART_VERSION_MISMATCH


class UpgradePathError(PermanentHelmError):
    """vCluster supports upgrading one minor version at a time and never downgrading."""

    reason = reasons.UPGRADE_REFUSED

    def __init__(self, message: str, *, installed: str, wanted: str, values_hash: str | None = None):
        super().__init__(message, values_hash=values_hash)
        self.installed = installed
        self.wanted = wanted


# Network trouble first: "... is not a valid chart repository or cannot be reached: ... no such host"
# names the chart too, but a repository outage must not stop a tenant until its spec changes. A
# namespace being deleted and an admission plugin still starting refuse with "is forbidden" too,
# but pass by themselves.
_TRANSIENT_PATTERN = re.compile(
    r"(cannot be reached|no such host|connection refused|connection reset|i/o timeout|tls handshake timeout"
    r"|cluster unreachable|context deadline exceeded|another operation \(install/upgrade/rollback\) is in progress"
    r"|because it is being terminated|not yet ready to handle request)")

# The API server's refusals, as Helm quotes them: `<resource> "<name>" is forbidden: <why>`, and a
# webhook's `admission webhook "<name>" denied the request: <why>`.
_FORBIDDEN = re.compile(r'(?P<object>[\w.-]+ "[^"]*") is forbidden: (?P<words>.+)', re.DOTALL)
_WEBHOOK_DENIED = re.compile(r'(?P<words>admission webhook "[^"]+" denied the request: .+)', re.DOTALL)
_RBAC_REFUSAL = re.compile(r'^user "[^"]*" cannot |attempting to grant rbac permissions not currently held',
                           re.IGNORECASE)

# Helm's messages for failures that the same input will always reproduce.
_PERMANENT_PATTERNS = [
    (re.compile(r"values don't meet the specifications of the schema"), InvalidValuesError),
    (re.compile(r"(parse error|yaml: |json: cannot unmarshal|error converting yaml)"), InvalidValuesError),
    (re.compile(r"(unable to build kubernetes objects|is invalid|execution error|failed to render)"), InvalidValuesError),
    (re.compile(r"chart \"[^\"]+\" (version \"[^\"]+\" )?not found|no chart version found|not a valid chart"), ChartNotFoundError),
    (re.compile(r"(rendered manifests contain a resource that already exists|invalid ownership metadata)"), PermanentHelmError),
]


def classify_helm_failure(stderr: str, *, values_hash: str | None = None) -> HelmError:
    """Map Helm's stderr to a typed error. Anything not known to be permanent counts as transient:
    a bounded retry of an unknown failure costs little, while a wrong "permanent" would leave a
    tenant stuck until someone edits its spec."""
    text = stderr.strip()
    lowered = text.lower()
    if _TRANSIENT_PATTERN.search(lowered):
        return TransientHelmError(text, values_hash=values_hash)
    refusal = _refusal(text, values_hash)
    if refusal is not None:
        return refusal
    for pattern, error_type in _PERMANENT_PATTERNS:
        if pattern.search(lowered):
            return error_type(text, values_hash=values_hash)
    return TransientHelmError(text or "helm failed without a message", values_hash=values_hash)


def _refusal(text: str, values_hash: str | None) -> RefusedByApiServerError | None:
    """A refusal by RBAC or admission, with the object and the API server's words; None if the
    text is none."""
    forbidden = _FORBIDDEN.search(text)
    if forbidden:
        words = forbidden.group("words").strip()
        error_type = HelmForbiddenError if _RBAC_REFUSAL.search(words) else HelmAdmissionDeniedError
        return error_type.of(forbidden.group("object"), words, values_hash=values_hash)
    denied = _WEBHOOK_DENIED.search(text)
    if denied:
        return HelmAdmissionDeniedError.of(None, denied.group("words").strip(), values_hash=values_hash)
    return None


def from_pyhelm3(error: pyhelm3_errors.Error, *, values_hash: str | None = None) -> HelmError:
    """Type a pyhelm3 failure, trusting pyhelm3's own classes where they are unambiguous."""
    stderr = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else str(error)
    if isinstance(error, (pyhelm3_errors.ConnectionError, pyhelm3_errors.CommandCancelledError)):
        return TransientHelmError(stderr.strip(), values_hash=values_hash)
    if not _TRANSIENT_PATTERN.search(stderr.lower()):
        refusal = _refusal(stderr.strip(), values_hash)
        if refusal is not None:
            return refusal
    if isinstance(error, (pyhelm3_errors.FailedToRenderChartError, pyhelm3_errors.InvalidResourceError)):
        return InvalidValuesError(stderr.strip(), values_hash=values_hash)
    if isinstance(error, pyhelm3_errors.ChartNotFoundError):
        return ChartNotFoundError(stderr.strip(), values_hash=values_hash)
    return classify_helm_failure(stderr, values_hash=values_hash)
