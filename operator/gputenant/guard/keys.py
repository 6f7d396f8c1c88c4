"""The pod label and annotation keys that carry a pod's identity, queue, grouping and GPU share.

A tenant controls every key of the pods it syncs in; the scheduler (KAI), the vGPU stack (HAMi)
and this operator read some of them to decide whose queue a pod is charged to, which PodGroup it
joins, how preemptible it is and which GPU it may see. Those keys are the guard's business alone:
the admission guard refuses or sets them on CREATE and UPDATE, and the ValidatingAdmissionPolicy on
``pods/status`` (written from this module) refuses changes to them through the status subresource.

KAI's keys are ``kai_vocabulary.VOCABULARY``: every label and annotation key KAI-Scheduler reads or
writes, derived from its source at the pinned version (the table in docs/threat-model.md). The queue is
the top owner's queue label, else the pod's, else the ``project`` label, else ``default-queue``;
v0.12 has no binding of a namespace to a queue, so the queue label the guard sets is the binding.
"""

from __future__ import annotations

from gputenant import naming
from gputenant.guard import kai_vocabulary

QUEUE_LABEL = naming.QUEUE_LABEL
"""KAI's queue label: set by the guard to the tenant's queue; any other value is refused."""

FRACTION_ANNOTATIONS = naming.KAI_FRACTION_ANNOTATIONS
"""KAI GPU-sharing requests; allowed only where the policy allows fractions (Trusted)."""
LEGACY_LABELS = ("runai/queue",)
"""Run:ai's queue label, which KAI no longer reads; reserved with its prefix all the same."""
KAI_LABELS = tuple(key for key in (*kai_vocabulary.reserved("label", "exact"), *LEGACY_LABELS) if key != QUEUE_LABEL)
"""Exact KAI label keys (beside the queue label): queue, priority, grouping, GPU group, node keys."""
KAI_ANNOTATIONS = tuple(key for key in kai_vocabulary.reserved("annotation", "exact")
                        if key not in FRACTION_ANNOTATIONS)
"""Exact KAI annotation keys: PodGroup membership, the GPU a fraction was given, MPS, gang sizes."""
KAI_LABEL_VALUES = kai_vocabulary.reserved_values("label")
"""Label keys common enough that only the values KAI gives a meaning are reserved (``app``)."""
RESERVED_PREFIXES = tuple(dict.fromkeys((
    "kai.scheduler/", "scheduling.run.ai/", "run.ai/", "runai/", "hami.io/", "nvidia.com/",
    "kai-resource-isolator.io/", "gputenant.io/",
    *kai_vocabulary.reserved("label", "prefix"), *kai_vocabulary.reserved("annotation", "prefix"))))
"""Key prefixes owned by KAI, HAMi, NVIDIA's stack and this operator."""
GANG_SIZE_ANNOTATION = "gputenant.io/gang-size"
"""How many pods of the pod's virtual owner must start together (``guard.gangs``)."""
TENANT_ALLOWED_ANNOTATIONS = ("nvidia.com/use-gputype", "nvidia.com/nouse-gputype", GANG_SIZE_ANNOTATION)
"""Annotations a tenant may set: HAMi's narrow the GPU models a HAMi pod accepts; the gang size
asks the guard for a PodGroup."""

PROTECTED_LABELS = (QUEUE_LABEL, *KAI_LABELS)
PROTECTED_ANNOTATIONS = (*KAI_ANNOTATIONS, *FRACTION_ANNOTATIONS)
"""Exact keys (beside RESERVED_PREFIXES and the values of KAI_LABEL_VALUES) whose changes through
``pods/status`` must be refused."""


def is_reserved(key: str, exact: tuple[str, ...]) -> bool:
    """Whether a label/annotation key belongs to the scheduler, the vGPU stack or the operator."""
    return key in exact or key.startswith(RESERVED_PREFIXES)


def reserved_label_value(key: str, value: str) -> bool:
    """Whether a label's value is one KAI gives a meaning to under a key tenants otherwise use freely."""
    return value in KAI_LABEL_VALUES.get(key, ())
