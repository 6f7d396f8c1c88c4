"""The owners' and members' Roles and RoleBindings in the host namespace, and the owners' wake request."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.steps.objects import apply_rendered

CONDITION = reasons.RBAC_READY
KINDS = frozenset({"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ConfigMap"})


async def ensure(run: Pass) -> bool:
    return await apply_rendered(run, CONDITION)
