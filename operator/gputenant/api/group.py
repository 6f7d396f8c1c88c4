"""The API group, kind and versions of GpuTenant: written here once, read everywhere else.

Each served version is a package beside this module (``api/v1alpha1/``, ``api/v1beta1/``); the rest
of the operator uses the internal model of ``api/hub.py`` and never names a version. What changed
between versions, and why: docs/api-versions.md.
"""

GROUP = "gputenant.io"
KIND = "GpuTenant"
PLURAL = "gputenants"
V1ALPHA1 = "v1alpha1"
V1BETA1 = "v1beta1"
SERVED_VERSIONS = (V1ALPHA1, V1BETA1)
DEPRECATED_VERSIONS = (V1ALPHA1,)
STORAGE_VERSION = V1BETA1
"""The version the API server stores and the operator reads and writes: v1beta1 since 0.3.0, one
release after it was first served, so that a `helm rollback` to 0.2.0 (which serves both) is
possible, and one to 0.1.0 (v1alpha1 only) never was needed from a release storing v1beta1
(docs/api-versions.md, "Why storage moved a release later")."""
HUB_VERSION = V1ALPHA1
"""The shape of the internal model (``api/hub.py``): every version converts to and from it."""
PREFERRED_VERSION = V1BETA1
"""What users, examples and the CLI write; the version kubectl and Argo CD pick when none is named."""
API_VERSION = f"{GROUP}/{STORAGE_VERSION}"
"""``apiVersion`` of the objects the operator reads and writes."""

PLACEMENT_VERSION = V1ALPHA1
"""The one version of GpuTenantPlacement, the fleet hub's decisions (gputenant.fleet.decision): new,
so alpha; Argo CD and OCM read only its status.decisions, which is OCM's PlacementDecision shape."""
ARGOCD_APPLICATION_API_VERSION = "argoproj.io/v1alpha1"
"""Argo CD's Application (the hub approves the deletion of a tenant's): not ours, named here with the
other versions."""
