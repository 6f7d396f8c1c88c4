"""The API group, kind and versions of GpuTenant: written here once, read everywhere else.

Each served version is a package beside this module (``api/v1alpha1/``); the rest of the operator
uses the internal model of ``api/hub.py`` and never names a version.
"""

GROUP = "gputenant.io"
KIND = "GpuTenant"
PLURAL = "gputenants"
V1ALPHA1 = "v1alpha1"
SERVED_VERSIONS = (V1ALPHA1,)
STORAGE_VERSION = V1ALPHA1
"""The version the API server stores and the operator reads and writes."""
API_VERSION = f"{GROUP}/{STORAGE_VERSION}"
"""``apiVersion`` of the objects the operator reads and writes."""
