"""Gangs through vCluster: the PodGroup a multi-pod job of a virtual cluster is scheduled as.

vCluster syncs pods to the host without owners (``setOwner: false``, which KAI needs), so KAI
v0.12's pod-grouper makes each one its own PodGroup of ``minMember: 1`` (``podjob`` plugin, ownerless
pod -> ``defaultgrouper``; no pod annotation or label sets ``minMember`` in v0.12). A pod that
carries ``pod-group-name`` and no owner is left alone by the pod-grouper
(``pod_controller.go: isOrphanPodWithPodGroup``) and scheduled as a member of the PodGroup of that
name. So the guard groups the pods itself: a GPU pod whose tenant asks for a gang of N with
``gputenant.io/gang-size`` gets ``pod-group-name`` naming a PodGroup of ``minMember: N`` on the
tenant's queue. Admission has no side effects: the operator writes that PodGroup once the pod exists
(``guard.gang_groups``), owned by its member pods, so a refused pod leaves nothing behind and the
garbage collector deletes the PodGroup with its last member.

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
    """The PodGroup the pod's gang is scheduled as: all ``minMember`` pods or none, on the tenant's queue,
    owned by the pod (``member_reference``)."""
    return {
        "apiVersion": POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": gang_name(pod, tenant_name), "namespace": namespace,
                     "labels": {naming.TENANT_LABEL: tenant_name, naming.QUEUE_LABEL: queue},
                     "ownerReferences": [member_reference(pod)]},
        "spec": {"minMember": gang_size(pod), "queue": queue},
    }


def member_reference(pod: dict) -> dict:
    """A non-controller ownerReference to a member pod: the PodGroup lives while any member does."""
    metadata = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}


def admitted_gang(pod: dict, namespace_tenant: str | None) -> tuple[str, str] | None:
    """(tenant, queue) of a stored pod whose ``pod-group-name`` is the gang the guard names for it as a pod of
    `namespace_tenant` (the tenant label the operator put on the pod's namespace); None for any other pod.
    The guard admits no other gang name in a tenant namespace and sets the pod's queue label."""
    if namespace_tenant is None or guard_gang(pod, namespace_tenant) is None:
        return None
    queue = ((pod.get("metadata") or {}).get("labels") or {}).get(naming.QUEUE_LABEL)
    return (namespace_tenant, queue) if queue else None


def membership_patch(group: dict, pod: dict) -> dict | None:
    """A merge patch adding the pod to an existing PodGroup's owners, guarded by the resourceVersion it was
    read at (a concurrent member's write makes it fail with 409); None when the pod is an owner already."""
    reference = member_reference(pod)
    owners = list((group.get("metadata") or {}).get("ownerReferences") or [])
    if any(owner.get("uid") == reference["uid"] for owner in owners):
        return None
    return {"metadata": {"resourceVersion": group["metadata"]["resourceVersion"],
                         "ownerReferences": [*owners, reference]}}
