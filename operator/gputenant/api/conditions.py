"""Condition types and reasons of a GpuTenant's status: the one list.

The reconcile steps, the handlers, the policy's decisions and offboarding all name their
conditions and reasons from here, so a reason seen in ``kubectl get gputenant`` can be searched
for in exactly one place, as Capsule keeps its ``pkg/api/meta/conditions.go``.
"""

from __future__ import annotations

from typing import Final

# -- condition types, in pipeline order ---------------------------------------------------------

READY: Final = "Ready"
NAMESPACE_READY: Final = "NamespaceReady"
QUOTA_READY: Final = "QuotaReady"
RBAC_READY: Final = "RBACReady"
NETWORK_READY: Final = "NetworkReady"
QUEUE_READY: Final = "QueueReady"
SHARING_READY: Final = "SharingReady"
VCLUSTER_READY: Final = "VClusterReady"
KUBECONFIG_READY: Final = "KubeconfigReady"
ARGOCD_READY: Final = "ArgoCDReady"
DELETION_PREVENTED: Final = "DeletionPrevented"
ISOLATION_VERIFIED: Final = "IsolationVerified"
"""Whether the pool's isolation canary measured what the tenant's tier promises (docs/attestation.md).
Not a part of Ready: an unattested pool (no GPU node ran the canary yet) still serves tenants."""
ASLEEP: Final = "Asleep"
"""Not a part of Ready: True while the tenant sleeps (spec.sleep), False once woken; absent on a
tenant that never slept. A sleeping tenant's VClusterReady, hence Ready, is False with reason Asleep."""

PART_CONDITIONS: Final = (
    NAMESPACE_READY, QUOTA_READY, RBAC_READY, NETWORK_READY, QUEUE_READY, SHARING_READY,
    VCLUSTER_READY, KUBECONFIG_READY, ARGOCD_READY,
)
"""Every part Ready summarises, in the order the pipeline sets them."""

# -- reasons of Ready ---------------------------------------------------------------------------

TENANT_READY: Final = "TenantReady"
PROGRESSING: Final = "Progressing"

# -- reasons of the parts -----------------------------------------------------------------------

APPLIED: Final = "Applied"
NOT_APPLIED: Final = "NotApplied"
INVALID_SPEC: Final = "InvalidSpec"
"""The spec fails the operator's own validation (a field the CRD cannot check)."""
RENDER_FAILED: Final = "RenderFailed"
"""The spec was admitted but cannot be turned into objects; nothing was applied."""
API_UNAVAILABLE: Final = "ApiUnavailable"
APPLY_REJECTED: Final = "ApplyRejected"
OBJECT_NOT_OWNED: Final = "ObjectNotOwned"
"""An object of the tenant's name exists but was not made by the operator for this tenant."""
CONTROL_PLANE_UP: Final = "ControlPlaneUp"
"""The vCluster StatefulSet is rolled out at its current revision with every replica ready, and the
virtual cluster's API answers through the tenant's endpoint."""
WAITING_FOR_CONTROL_PLANE: Final = "WaitingForControlPlane"
"""The control plane has yet to write its admin kubeconfig Secret, or its Service its node port."""
LOAD_BALANCER_PENDING: Final = "LoadBalancerPending"
"""Config vcluster.exposure is LoadBalancer and the vCluster Service has no load-balancer address yet:
the implementation has not assigned one (none runs for its class, or its pool is exhausted)."""
CONTROL_PLANE_STARTING: Final = "ControlPlaneStarting"
"""No control-plane pod is ready at the StatefulSet's current revision: first start, a restart after
the pod died or was deleted, a failing readiness probe, or waking from sleep. Not a failure."""
CONTROL_PLANE_ROLLING_OUT: Final = "ControlPlaneRollingOut"
"""A new revision of the vCluster StatefulSet (a values or chart change) is still rolling out."""
CONTROL_PLANE_NOT_ANSWERING: Final = "ControlPlaneNotAnswering"
"""The control-plane pod is ready, but the virtual cluster's API does not answer through the
tenant's endpoint (the address its kubeconfigs name)."""
WAITING_FOR_ACCESS: Final = "WaitingForAccess"
"""The operator's RoleBinding in the host namespace is written but the API server does not apply it yet."""
CONTROL_PLANE_POD_REFUSED: Final = "ControlPlanePodRefused"
"""The API server refused the vCluster StatefulSet's pod (quota, LimitRange, admission)."""
ISSUED: Final = "Issued"
NOT_REQUESTED: Final = "NotRequested"
REGISTERED: Final = "Registered"
ARGOCD_NAMESPACE_MISSING: Final = "ArgoCDNamespaceMissing"
TOKEN_REQUEST_FAILED: Final = "TokenRequestFailed"
INVALID_KUBECONFIG_INPUT: Final = "InvalidKubeconfigInput"
NAMESPACE_TERMINATING: Final = "NamespaceTerminating"
PREVENT_DELETION_SET: Final = "PreventDeletionSet"

# -- isolation attestation (IsolationVerified) ---------------------------------------------------

ATTESTED: Final = "Attested"
"""The canary ran on the tenant's pool and measured the promised isolation (the numbers in the message)."""
ATTESTATION_FAILED: Final = "AttestationFailed"
"""The canary ran and measured something the promise rules out; the tier's promise is withheld."""
UNATTESTED: Final = "Unattested"
"""No measurement: the canary was not scheduled, ran on a simulated node, or left no report."""

# -- sleep and wake (Asleep, and VClusterReady while asleep) ----------------------------------

SLEEP_REQUESTED: Final = "SleepRequested"
"""Asleep=True: spec.sleep.asleep is true and nothing of the tenant runs on the host."""
FALLING_ASLEEP: Final = "FallingAsleep"
"""Asleep=Unknown: the control plane or synced pods are still stopping."""
WAKING: Final = "Waking"
"""Asleep=Unknown: spec.sleep.asleep is false again; the control plane is starting."""
AWAKE: Final = "Awake"
"""Asleep=False: woken; the control plane serves again."""
ASLEEP_REASON: Final = "Asleep"
"""VClusterReady (and so Ready) False: the tenant sleeps on request; not a failure."""
WOKEN_ON_REQUEST: Final = "WokenOnRequest"
"""Asleep=False although spec.sleep.asleep is true: an owner asked to wake it (ConfigMap
gputenant-wake); it sleeps again when the wake ends (status.wake.until, docs/operations.md)."""
GPU_POD_PENDING: Final = "GpuPodPending"
"""The Event on a tenant's Pending GPU pod (synced into its virtual cluster) saying why, in its words."""
IDLE_GPUS: Final = "IdleGpus"
"""Asleep=True, and the Event the idle policy posts: the operator put the tenant to sleep because
every GPU it held stayed idle for spec.sleep.idle.after."""

WAITS: Final = frozenset((
    PROGRESSING, WAITING_FOR_CONTROL_PLANE, LOAD_BALANCER_PENDING, CONTROL_PLANE_STARTING,
    CONTROL_PLANE_ROLLING_OUT, CONTROL_PLANE_NOT_ANSWERING, WAITING_FOR_ACCESS, NAMESPACE_TERMINATING, ASLEEP_REASON,
))
"""Reasons of a part (or Ready) that is not True because something normal is under way: a tenant
starting, rolling out, being given access, sleeping. Not failures: they get no Warning Event."""

# -- the idle policy's verdicts when it does not sleep a tenant (usage.idle) ----------------------

NO_IDLE_POLICY: Final = "NoIdlePolicy"
GPUS_WORKING: Final = "GpusWorking"
IDLE_NOT_LONG_ENOUGH: Final = "IdleNotLongEnough"
NON_PREEMPTIBLE_WORKLOAD: Final = "NonPreemptibleWorkload"

# -- Helm ---------------------------------------------------------------------------------------

HELM_FAILED: Final = "HelmFailed"
HELM_UNAVAILABLE: Final = "HelmUnavailable"
HELM_FORBIDDEN: Final = "HelmForbidden"
"""RBAC refused an object of the chart (the operator must hold every permission the chart grants)."""
HELM_ADMISSION_DENIED: Final = "HelmAdmissionDenied"
"""Admission (a webhook, a policy, Pod Security, quota) refused an object of the chart."""
INVALID_VALUES: Final = "InvalidValues"
UPGRADE_REFUSED: Final = "UpgradeRefused"
CHART_NOT_FOUND: Final = "ChartNotFound"
CHART_VERSION_MISMATCH: Final = "ChartVersionMismatch"

# -- policy decisions (SharingReady, and the parts a refused decision withholds) ---------------

EXPLICIT_MODE: Final = "ExplicitMode"
CHOSEN_FROM_TRUST: Final = "ChosenFromTrust"
FALLBACK_TO_STRONGER_MODE: Final = "FallbackToStrongerMode"
NO_GPU_REQUESTED: Final = "NoGpuRequested"
LIMIT_BELOW_QUOTA: Final = "LimitBelowQuota"
QUOTA_ABOVE_POOL_CAPACITY: Final = "QuotaAbovePoolCapacity"
QUOTA_BELOW_CONTROL_PLANE: Final = "QuotaBelowControlPlane"
MODE_NOT_ALLOWED_FOR_TRUST: Final = "ModeNotAllowedForTrust"
POOL_NOT_FOUND: Final = "PoolNotFound"
POOL_MODE_MISMATCH: Final = "PoolModeMismatch"
POOL_TRUST_MISMATCH: Final = "PoolTrustMismatch"
"""The pool does not serve the tenant's trust level (operator config pools[].trustLevels)."""
PARENT_QUEUE_NOT_ALLOWED: Final = "ParentQueueNotAllowed"
QUEUE_NAME_IS_PARENT_QUEUE: Final = "QueueNameIsParentQueue"
"""The tenant is named like one of the platform's parent queues and would overwrite it."""
POOL_MODEL_MISMATCH: Final = "PoolModelMismatch"
NO_POOL_FOR_MODE: Final = "NoPoolForMode"
PROFILE_NOT_ON_GPU: Final = "ProfileNotOnGPU"
PROFILE_NOT_IN_POOL: Final = "ProfileNotInPool"
HAMI_SHARE_TOO_SMALL: Final = "HamiShareTooSmall"
MEMORY_ABOVE_GPU: Final = "MemoryAboveGpu"
FRACTION_NOT_GRANTABLE: Final = "FractionNotGrantable"

# -- Events only (no condition carries them) ----------------------------------------------------

KUBECONFIG_ISSUED: Final = "KubeconfigIssued"
ARGOCD_TOKEN_ISSUED: Final = "ArgoCDTokenIssued"
DRIFT_REPAIRED: Final = "DriftRepaired"
MIG_RECONFIGURATION_BLOCKED: Final = "MigReconfigurationBlocked"
GANG_GROUP_REFUSED: Final = "GangGroupRefused"
"""On a gang member pod whose PodGroup the API server refused (the tenant's PodGroup quota, usually)."""

# -- the GPU-memory sentinel's Events on Nodes (usage.sentinel) -----------------------------------

GPU_MEMORY_HELD_BY_NO_ONE: Final = "GpuMemoryHeldByNoOne"
"""Warning on a Node: memory on one of its GPUs has been used by no live pod for longer than
memorySentinel.grace; drain the node and reset that GPU (the operator never resets one)."""
GPU_MEMORY_RELEASED: Final = "GpuMemoryReleased"
"""Normal on a Node: memory reported as held by no one is free again (or a live pod holds it)."""

# -- a fleet's hub: status.fleet.reason and the GpuTenantPlacement's reasons (gputenant.fleet) ---

PLACED: Final = "Placed"
NO_MEMBER_FITS: Final = "NoMemberFits"
"""No member can take a new tenant; the message gives every member's reason."""
MEMBER_NOT_REGISTERED: Final = "MemberNotRegistered"
"""The tenant's member has no Argo CD cluster Secret any more; it stays placed there."""
NOT_SELECTED: Final = "NotSelected"
"""spec.placement does not admit the member."""
CORDONED: Final = "Cordoned"
NAME_TAKEN: Final = "NameTaken"
"""The member already has a GpuTenant of the new tenant's name (its own, or one left behind)."""
MOVING: Final = "Moving"
"""The tenant's decision was withdrawn: it is placed again once its old member no longer has it."""
MEMBER_UNREACHABLE: Final = "MemberUnreachable"
"""The hub could not read the member (its report, or its tenants): Ready=Unknown on its tenants."""
REPORT_STALE: Final = "ReportStale"
REPORT_UNREADABLE: Final = "ReportUnreadable"
"""The member answered, but its capacity report is missing or malformed."""
POOL_NOT_REPORTED: Final = "PoolNotReported"
POOL_HAS_PROBLEMS: Final = "PoolHasProblems"
NO_CAPACITY: Final = "NoCapacity"
DELIVERING: Final = "Delivering"
"""Ready=Unknown on the hub: placed, the member has not reported the tenant yet."""
MEMBER_STATUS: Final = "MemberStatus"
"""Ready on the hub mirrors the member tenant's; the message starts with the member's name."""
