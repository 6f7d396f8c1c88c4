"""The Kubernetes API edge: an async client, server-side apply that skips no-op writes, counters."""

from gputenant.kube.applier import Applier, LiveSnapshot
from gputenant.kube.client import KubeClient, RequestCounters, Resource
from gputenant.kube.compare import holds, is_subset
from gputenant.kube.errors import ApiError, NoCluster

__all__ = ["ApiError", "Applier", "KubeClient", "LiveSnapshot", "NoCluster", "RequestCounters", "Resource",
           "holds", "is_subset"]
