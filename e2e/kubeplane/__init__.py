"""A real local Kubernetes control plane for the operator's tests, local demo and CI.

See docs/control-plane.md. Typical use::

    with ControlPlane(audit=True) as plane:
        core = kubernetes.client.CoreV1Api(plane.api_client())
"""

from .access import CommandError
from .audit import WRITE_VERBS
from .plane import ControlPlane
from .process import PlaneError, wait_for
from .tools import require_tools, tools_bin_dir
from .virtual_apiserver import VirtualAPIServer

__all__ = [
    "WRITE_VERBS", "CommandError", "ControlPlane", "PlaneError", "VirtualAPIServer",
    "require_tools", "tools_bin_dir", "wait_for",
]
