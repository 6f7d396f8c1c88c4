"""The pod label and annotation keys that carry a pod's identity, queue, grouping and GPU share.

A tenant controls every key of the pods it syncs in; the scheduler (KAI), the vGPU stack (HAMi)
and this operator read some of them to decide whose queue a pod is charged to, which PodGroup it
joins, how preemptible it is and which GPU it may see. Those keys are the guard's business alone:
the admission guard refuses or sets them on CREATE and UPDATE, and the ValidatingAdmissionPolicy on
``pods/status`` (written from this module) refuses changes to them through the status subresource.

KAI keys are read from KAI-Scheduler v0.12.0 (``pkg/podgrouper/podgrouper/plugins/constants``,
``pkg/common/constants``, ``defaultgrouper/default_grouper.go``): the queue is the top owner's queue
label, else the pod's, else the ``project`` label (suffixed with the ``kai.scheduler/node-pool``
label), else ``default-queue``; ``priorityClassName`` and ``kai.scheduler/preemptibility`` labels
set the PodGroup's priority and preemptibility, ``user`` its user; ``pod-group-name`` joins an
existing PodGroup. v0.12 has no binding of a namespace to a queue, so the queue label the guard
sets is the binding.
"""

from __future__ import annotations

from gputenant import naming

QUEUE_LABEL = naming.QUEUE_LABEL
"""KAI's queue label: set by the guard to the tenant's queue; any other value is refused."""

KAI_LABELS = ("project", "user", "priorityClassName", "kai.scheduler/preemptibility", "runai/queue",
              "runai-gpu-group")
"""Bare KAI (and legacy run:ai) label keys that pick a queue, a priority or a GPU group."""
KAI_ANNOTATIONS = ("pod-group-name", "runai/shared-gpu-configmap", "received-resource-type",
                   "gpu-fraction-num-devices", "gpu-fraction-container-name", "mps")
"""Bare KAI annotation keys: PodGroup membership, the GPU a fraction was given, MPS."""
FRACTION_ANNOTATIONS = ("gpu-fraction", "gpu-memory")
"""KAI GPU-sharing requests; allowed only where the policy allows fractions (Trusted)."""
RESERVED_PREFIXES = ("kai.scheduler/", "scheduling.run.ai/", "run.ai/", "runai/", "hami.io/",
                     "nvidia.com/", "kai-resource-isolator.io/", "gputenant.io/")
"""Key prefixes owned by KAI, HAMi, NVIDIA's stack and this operator."""
GANG_SIZE_ANNOTATION = "gputenant.io/gang-size"
"""How many pods of the pod's virtual owner must start together (``guard.gangs``)."""
TENANT_ALLOWED_ANNOTATIONS = ("nvidia.com/use-gputype", "nvidia.com/nouse-gputype", GANG_SIZE_ANNOTATION)
"""Annotations a tenant may set: HAMi's narrow the GPU models a HAMi pod accepts; the gang size
asks the guard for a PodGroup."""

PROTECTED_LABELS = (QUEUE_LABEL, *KAI_LABELS)
PROTECTED_ANNOTATIONS = (*KAI_ANNOTATIONS, *FRACTION_ANNOTATIONS)
"""Exact keys (beside RESERVED_PREFIXES) whose changes through ``pods/status`` must be refused."""


def is_reserved(key: str, exact: tuple[str, ...]) -> bool:
    """Whether a label/annotation key belongs to the scheduler, the vGPU stack or the operator."""
    return key in exact or key.startswith(RESERVED_PREFIXES)
