"""The Pod Security Standard per trust level: enforced on the host namespace by the API server
and inside the virtual cluster by vCluster's syncer (docs/rendering.md explains the choice)."""

from gputenant.api.v1alpha1 import Trust

POD_SECURITY_VERSION = "v1.35"
"""Pinned so a host-cluster upgrade cannot tighten the standard under running tenants."""

POD_SECURITY_LEVEL = {
    Trust.UNTRUSTED: "restricted",
    Trust.INTERNAL: "baseline",
    Trust.TRUSTED: "baseline",
}
