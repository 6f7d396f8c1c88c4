"""Which change of an object the operator owns is drift: the kinds it watches for the tenants, and
whose hand a change was. Pure: `owned_watch` feeds it what its reflectors saw (`kube.watch.Seen`)."""

from __future__ import annotations

from gputenant import naming
from gputenant.kube.watch import Seen

OWNED_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Namespace"),
    ("v1", "ResourceQuota"),
    ("v1", "LimitRange"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("scheduling.run.ai/v2", "Queue"),
)
"""Every kind the pipeline writes for a tenant, labelled with the tenant's name (naming.TENANT_LABEL):
the object steps' rendered kinds, the view and wake ConfigMaps, the kubeconfig and Argo CD Secrets.
The vCluster's own objects are Helm's and its controllers'; the control-plane pods have their own
watch (`control_plane_watch`)."""

SELECTOR = naming.TENANT_LABEL
"""The label selector of every owned-kind watch: the label exists (any tenant)."""


def ours(manager: str, field_manager: str) -> bool:
    """The operator's applier (`field_manager`) or one of its status writers (``<field manager>-<writer>``)."""
    return manager == field_manager or manager.startswith(f"{field_manager}-")


def by_own_hand(seen: Seen, field_manager: str) -> bool:
    """Whether the newest write of `seen` (outside its status) is the operator's. A tie between the
    operator and another manager in the same second counts as another hand's."""
    writers = seen.last_writer.split(",") if seen.last_writer else []
    return bool(writers) and all(ours(w, field_manager) for w in writers)


def taken_without_trace(before: Seen, after: Seen, field_manager: str) -> bool:
    """Whether fields the operator owned went while its write stayed as it was: another hand that
    only removes (a label, a rule) owns nothing afterwards, so managedFields keep no entry of it;
    only the operator's own entry shrinks, its time unchanged. (The operator's own apply in the same
    second as its last one looks alike: one more pass, which finds nothing to write.)"""
    own_before = {manager: (time, fields) for manager, time, fields in before.writes if ours(manager, field_manager)}
    own_after = {manager: (time, fields) for manager, time, fields in after.writes if ours(manager, field_manager)}
    for manager, (time, fields) in own_before.items():
        now = own_after.get(manager)
        if now is None or (now[0] == time and now[1] != fields):
            return True
    return False


def drifted_tenant(before: Seen | None, after: Seen | None, field_manager: str) -> str | None:
    """The tenant to look at again after an owned object changed from `before` to `after` (None:
    absent), or None when nothing drifted: a deletion always drifts (the pass puts back what it
    renders, and finds nothing to do for what it removed itself); a creation or an update only when
    another hand than the operator's wrote it last, or took fields of the operator's without a trace
    (`taken_without_trace`), and only when its resourceVersion moved."""
    current = after or before
    if current is None:
        return None
    tenant = current.owner
    if not tenant:
        return None
    if after is None:
        return tenant
    if before is not None and before.resource_version == after.resource_version:
        return None
    if not by_own_hand(after, field_manager):
        return tenant
    return tenant if before is not None and taken_without_trace(before, after, field_manager) else None
