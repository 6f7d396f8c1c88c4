"""gpu-tenant-operator: one GpuTenant in, a GPU-enabled virtual cluster with trust-based GPU sharing out.

The data flows through one package per step:
``api`` (the GpuTenant model) -> ``policy`` (which sharing mechanism, how much) -> ``render``
(the objects to apply) -> ``reconcile`` (apply them, Helm, kubeconfigs) -> status.
"""

from gputenant.api.group import API_VERSION, GROUP, KIND, PLURAL
from gputenant.api.group import STORAGE_VERSION as VERSION

__all__ = ["API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION"]
