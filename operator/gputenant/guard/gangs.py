"""Gangs through vCluster: the PodGroup a multi-pod job of a virtual cluster is scheduled as.

vCluster syncs pods to the host without owners (``setOwner: false``, which KAI needs), so KAI
v0.12's pod-grouper makes each one its own PodGroup of ``minMember: 1`` (``podjob`` plugin, ownerless
pod -> ``defaultgrouper``; no pod annotation or label sets ``minMember`` in v0.12). A pod that
carries ``pod-group-name`` and no owner is left alone by the pod-grouper
(``pod_controller.go: isOrphanPodWithPodGroup``) and scheduled as a member of the PodGroup of that
name. So the guard groups the pods itself: a GPU pod whose tenant asks for a gang of N with
``gputenant.io/gang-size`` gets ``pod-group-name`` naming a PodGroup of ``minMember: N`` on the
tenant's queue, which the guard applies in the pod's namespace before the pod is created.

The members are the pods of one virtual owner: vCluster records the virtual pod's
ownerReferences on the host pod as JSON in ``vcluster.loft.sh/owner-references``
(pods/translate/translator.go, v0.36.1). The tenant writes that annotation as it likes, so it only
ever chooses among its own gangs: KAI v0.12 keys PodGroups by NAME alone across namespaces
(scheduler/cache/cluster_info/cluster_info.go: ``PodGroupID(podGroup.Name)``, pods indexed by the
annotation's value), and every gang name carries the tenant's name, which the tenant cannot change.
"""

from __future__ import annotations

import json
import re

from gputenant import naming
from gputenant.guard.keys import GANG_SIZE_ANNOTATION

POD_GROUP_ANNOTATION = "pod-group-name"
"""KAI's pod annotation naming the PodGroup a pod belongs to (pkg/common/constants)."""
VIRTUAL_OWNERS_ANNOTATION = "vcluster.loft.sh/owner-references"
"""The virtual pod's ownerReferences, as JSON, on the host pod vCluster syncs."""
POD_GROUP_API_VERSION = "scheduling.run.ai/v2alpha2"
GANG_PREFIX = "gang"
MAX_GANG_SIZE = 1024
"""More members than any job this platform runs as one; a larger value is a typo."""
_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class GangError(ValueError):
    """A gang request the guard cannot honour; the message names the annotation and the fix."""


def _annotations(pod: dict) -> dict:
    return (pod.get("metadata") or {}).get("annotations") or {}


def asks_for_gang(pod: dict) -> bool:
    return GANG_SIZE_ANNOTATION in _annotations(pod)


def gang_size(pod: dict) -> int:
    value = _annotations(pod).get(GANG_SIZE_ANNOTATION, "")
    if not value.isdigit() or not 2 <= int(value) <= MAX_GANG_SIZE:
        raise GangError(f"annotation {GANG_SIZE_ANNOTATION}={value!r} must be a whole number of pods from 2 to "
                        f"{MAX_GANG_SIZE} (set it to the job's parallelism)")
    return int(value)


def virtual_owner_uid(pod: dict) -> str:
    """The uid of the virtual pod's controller (else its first owner), as vCluster recorded it."""
    raw = _annotations(pod).get(VIRTUAL_OWNERS_ANNOTATION)
    try:
        owners = json.loads(raw) if raw else []
    except json.JSONDecodeError:
        owners = []
    if not isinstance(owners, list) or not all(isinstance(o, dict) for o in owners):
        owners = []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    uid = str((owner or {}).get("uid", ""))
    if not _UID.match(uid):
        raise GangError(f"annotation {GANG_SIZE_ANNOTATION} is set on a pod without an owner in the virtual "
                        "cluster; set it on the pod template of a Job (or another controller) whose pods form "
                        "the gang")
    return uid


def gang_name(pod: dict, tenant_name: str) -> str:
    """``gang.<tenant>.<virtual owner uid>``: a tenant name is a DNS label (no dots), so no other
    tenant's gang can have this name."""
    return f"{GANG_PREFIX}.{tenant_name}.{virtual_owner_uid(pod)}"


def guard_gang(pod: dict, tenant_name: str) -> str | None:
    """The gang the pod's ``pod-group-name`` names if it is the one the guard names for it (a valid
    gang request of this tenant); None for no gang, or for a name the tenant wrote."""
    name = _annotations(pod).get(POD_GROUP_ANNOTATION)
    if name is None or not asks_for_gang(pod):
        return None
    try:
        gang_size(pod)
        return name if name == gang_name(pod, tenant_name) else None
    except GangError:
        return None


def pod_group(pod: dict, tenant_name: str, namespace: str, queue: str) -> dict:
    """The PodGroup the pod's gang is scheduled as: all ``minMember`` pods or none, on the tenant's queue."""
    return {
        "apiVersion": POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": gang_name(pod, tenant_name), "namespace": namespace,
                     "labels": {naming.TENANT_LABEL: tenant_name, naming.QUEUE_LABEL: queue}},
        "spec": {"minMember": gang_size(pod), "queue": queue},
    }
