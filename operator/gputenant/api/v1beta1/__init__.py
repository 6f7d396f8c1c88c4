"""GpuTenant ``gputenant.io/v1beta1``: the served version users write (``models``), converted to and
from v1alpha1 by ``api.conversion``. Code outside ``api/`` uses ``api.hub``, never a version."""

from gputenant.api.v1beta1 import models
from gputenant.api.v1beta1.models import *  # noqa: F403 (the version's public models, listed in models.__all__)

__all__ = models.__all__
