"""GpuTenant ``gputenant.io/v1alpha1``: the served version's pydantic models (``models``), from which
``crds/tenant.yaml`` is generated. Code outside ``api/`` uses ``api.hub``, never a version."""

from gputenant.api.v1alpha1 import models
from gputenant.api.v1alpha1.models import *  # noqa: F403 (the version's public models, listed in models.__all__)

__all__ = models.__all__
