"""The Pod Security Standard per trust level: enforced on the host namespace by the API server
and inside the virtual cluster by vCluster's syncer (docs/rendering.md explains the choice)."""

from gputenant.api.trust import Trust, profile

POD_SECURITY_VERSION = "v1.34"
"""Pinned so a host-cluster upgrade cannot tighten the standard under running tenants. The oldest
supported Kubernetes minor (docs/install.md, Supported versions; `make test-compat` runs it), so the
version names a standard every supported API server knows rather than one newer than the server."""


def pod_security_level(trust: Trust) -> str:
    """The level the trust profile names (api/trust.py)."""
    return profile(trust).pod_security
