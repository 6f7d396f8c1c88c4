"""gpu-tenant-operator: one GpuTenant in, a GPU-enabled virtual cluster with trust-based GPU sharing out.

The data flows through one package per step:
``api`` (the GpuTenant model) -> ``policy`` (which sharing mechanism, how much) -> ``render``
(the objects to apply) -> ``reconcile`` (apply them, Helm, kubeconfigs) -> status.
"""

GROUP = "gputenant.io"
VERSION = "v1alpha1"
KIND = "GpuTenant"
PLURAL = "gputenants"
