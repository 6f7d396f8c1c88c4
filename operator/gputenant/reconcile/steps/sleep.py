"""Sleep and wake, inside the vCluster step: what follows the Helm release once its values say how
many control-plane replicas run (``render.vcluster.ASLEEP_REPLICAS`` while ``spec.sleep.asleep``).

Falling asleep: the control plane's pod stops first, so no syncer is left to re-create what is
deleted next; then every pod of the host namespace goes, which is what releases the GPUs (KAI and
the quota count pods). The Queue, the quota and the data volume stay: the virtual cluster's objects
are kept in it, and on waking its controllers re-create their pods through the syncer.
"""

from __future__ import annotations

from gputenant import KIND
from gputenant.api import conditions as reasons
from gputenant.reconcile.context import Pass
from gputenant.reconcile.controlplane import ControlPlaneState
from gputenant.reconcile.events import API_VERSION
from gputenant.tenant_status import conditions as cond
from gputenant.usage.idle import IDLE_SLEPT_ANNOTATION

CONDITION = reasons.ASLEEP
SETTLE_SECONDS = 5.0
"""How soon to look again while pods are stopping or the control plane is starting."""


async def settle_asleep(run: Pass, release: str) -> None:
    """Drive a sleeping tenant to nothing running on the host, one look per pass."""
    namespace = run.host_namespace
    if await run.client.get("v1", "Pod", f"{release}-0", namespace) is not None:
        falling_asleep(run, f"waiting for the control-plane pod {namespace}/{release}-0 to stop")
        return
    pods = await run.client.list("v1", "Pod", namespace=namespace)
    if pods:
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                await run.client.delete("v1", "Pod", pod["metadata"]["name"], namespace)
        falling_asleep(run, f"deleting the {len(pods)} pod(s) left in {namespace} (synced by the stopped control plane)")
        return
    idle_at = run.annotations.get(IDLE_SLEPT_ANNOTATION)
    why = (f"the idle policy set spec.sleep.asleep at {idle_at} (every GPU idle for spec.sleep.idle.after)"
           if idle_at else "spec.sleep.asleep is true")
    run.set(CONDITION, True, reasons.IDLE_GPUS if idle_at else reasons.SLEEP_REQUESTED,
            f"{why}: release {release} runs no control plane and no pod is left in {namespace}; the Queue, quota "
            "and data volume are kept. Set spec.sleep.asleep to false to wake the tenant")
    run.set(reasons.VCLUSTER_READY, False, reasons.ASLEEP_REASON,
            f"asleep on request (spec.sleep.asleep); release {release} is scaled to zero")


async def control_plane_awake(run: Pass, control_plane: ControlPlaneState) -> bool:
    """True when the tenant never slept or its control plane serves again (judged by the vCluster
    step). The admin kubeconfig Secret outlives sleep, so without this check a waking tenant would
    look served before its API server answers."""
    asleep = cond.find(run.conditions, CONDITION)
    if asleep is None or asleep.reason in (reasons.AWAKE, reasons.WOKEN_ON_REQUEST):
        if asleep is not None and run.plan.woken_on_request != (asleep.reason == reasons.WOKEN_ON_REQUEST):
            set_awake(run)
        return True
    if not control_plane.ready:
        run.set(CONDITION, None, reasons.WAKING, "spec.sleep.asleep is false: the control plane is starting")
        run.set(reasons.VCLUSTER_READY, False, control_plane.reason, f"waking: {control_plane.message}")
        run.wait(SETTLE_SECONDS)
        return False
    set_awake(run)
    if IDLE_SLEPT_ANNOTATION in run.annotations and not run.plan.woken_on_request:
        await run.client.patch(API_VERSION, KIND, run.name, {"metadata": {"annotations": {IDLE_SLEPT_ANNOTATION: None}}})
    return True


def set_awake(run: Pass) -> None:
    if run.plan.woken_on_request:
        wake = run.status.wake
        run.set(CONDITION, False, reasons.WOKEN_ON_REQUEST,
                f"woken by an owner's request ({wake.request if wake else ''}) although spec.sleep.asleep is true; "
                f"it sleeps again once its GPUs are idle, not before {wake.until if wake else ''} (status.wake)")
        return
    run.set(CONDITION, False, reasons.AWAKE, "woken: the control plane serves and re-creates the workloads "
            "its controllers own")


def falling_asleep(run: Pass, message: str) -> None:
    run.set(CONDITION, None, reasons.FALLING_ASLEEP, message)
    run.set(reasons.VCLUSTER_READY, False, reasons.ASLEEP_REASON, f"falling asleep (spec.sleep.asleep): {message}")
    run.wait(SETTLE_SECONDS)
