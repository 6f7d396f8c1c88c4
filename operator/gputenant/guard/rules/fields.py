"""The allow-list of pod spec fields: a field a newer Kubernetes adds is refused until a rule has
looked at it."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard.registry import Review, rule

POD_SPEC_FIELDS = frozenset({
    "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "containers", "dnsConfig", "dnsPolicy",
    "enableServiceLinks", "ephemeralContainers", "hostAliases", "hostIPC", "hostNetwork", "hostPID", "hostUsers",
    "hostname", "imagePullSecrets", "initContainers", "nodeName", "nodeSelector", "os", "overhead",
    "preemptionPolicy", "priority", "priorityClassName", "readinessGates", "resourceClaims", "resources",
    "restartPolicy", "runtimeClassName", "schedulerName", "schedulingGates", "securityContext", "serviceAccount",
    "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace", "subdomain",
    "terminationGracePeriodSeconds", "tolerations", "topologySpreadConstraints", "volumes",
})
"""Pod spec fields the rules below account for; a field a newer Kubernetes adds is refused until
a rule has looked at it."""



@rule("pod-field", "a pod spec field no rule accounts for (fields added by newer Kubernetes versions)")
def _pod_fields(review: Review) -> Iterator[str]:
    for name in sorted(set(review.spec) - POD_SPEC_FIELDS):
        yield f"spec.{name} is not reviewed by the admission guard yet (remove it)"

