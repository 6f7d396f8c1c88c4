"""The idle policy (spec.sleep.idle): whether to put a tenant to sleep because its GPUs do no work.
Pure: the caller reads the usage summary, the tenant's pods and their KAI PodGroups.

Never while a non-preemptible workload runs. KAI-Scheduler decides preemptibility per PodGroup
(``spec.preemptibility``: preemptible, non-preemptible or semi-preemptible), or from the pod label
``kai.scheduler/preemptibility``, else from the priority: below 100 is preemptible, so KAI's
``build`` (100) and ``inference`` (125) classes are not (KAI design "priority-preemptibility-
separation"; docs/operations.md#idle-policy). Semi-preemptible counts as non-preemptible here: its
core members are.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gputenant.api import conditions as reasons
from gputenant.api.hub import SleepSpec
from gputenant.api.status import UsageStatus
from gputenant.timefmt import parse_duration, parse_rfc3339, rfc3339

PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
POD_GROUP_ANNOTATION = "pod-group-name"
"""The annotation KAI's podgrouper names a pod's PodGroup in."""
NON_PREEMPTIBLE_PRIORITY = 100
"""KAI's default: a workload whose priority is at least this is non-preemptible."""
PREEMPTIBLE = "preemptible"
KNOWN_PREEMPTIBILITY = (PREEMPTIBLE, "non-preemptible", "semi-preemptible")
IDLE_SLEPT_ANNOTATION = "gputenant.io/slept-idle-at"
"""Set with spec.sleep.asleep when the idle policy put the tenant to sleep: the Asleep condition's
reason says so; removed when the tenant wakes."""
NAMED_PODS = 3


@dataclass(frozen=True)
class IdleVerdict:
    sleep: bool
    reason: str
    message: str


def non_preemptible(pod: dict, pod_groups: dict[str, str]) -> bool:
    """KAI's rule for one pod; `pod_groups`: PodGroup name -> its spec.preemptibility (may be "")."""
    declared = pod_groups.get(((pod.get("metadata") or {}).get("annotations") or {}).get(POD_GROUP_ANNOTATION, ""), "")
    if declared not in KNOWN_PREEMPTIBILITY:
        declared = ((pod.get("metadata") or {}).get("labels") or {}).get(PREEMPTIBILITY_LABEL, "")
    if declared in KNOWN_PREEMPTIBILITY:
        return declared != PREEMPTIBLE
    return ((pod.get("spec") or {}).get("priority") or 0) >= NON_PREEMPTIBLE_PRIORITY


def running(pod: dict) -> bool:
    """Neither finished nor on its way out."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") \
        and not (pod.get("metadata") or {}).get("deletionTimestamp")


def non_preemptible_pods(pods: list[dict], pod_groups: dict[str, str]) -> list[str]:
    return sorted(pod["metadata"]["name"] for pod in pods if running(pod) and non_preemptible(pod, pod_groups))


def idle_sleep_verdict(sleep: SleepSpec, usage: UsageStatus | None, now: datetime,
                       holding_back: list[str]) -> IdleVerdict:
    """Sleep when the tenant has an idle policy, is awake, every GPU it holds has been idle for at
    least ``idle.after`` (counted from ``usage.allIdleSince``, so a whole usage window of idleness
    comes first) and no pod in `holding_back` (the non-preemptible ones) runs."""
    if sleep.idle is None:
        return IdleVerdict(False, reasons.NO_IDLE_POLICY, "spec.sleep.idle is not set")
    if sleep.asleep:
        return IdleVerdict(False, reasons.SLEEP_REQUESTED, "already asleep")
    since = parse_rfc3339(usage.all_idle_since) if usage else None
    if usage is None or since is None:
        return IdleVerdict(False, reasons.GPUS_WORKING, "not every GPU the tenant holds is idle, or it holds none")
    after = parse_duration(sleep.idle.after)
    if after is None or now - since < after:
        return IdleVerdict(False, reasons.IDLE_NOT_LONG_ENOUGH,
                           f"every GPU idle since {usage.all_idle_since}, not yet for {sleep.idle.after}")
    if holding_back:
        named = ", ".join(holding_back[:NAMED_PODS]) + (", ..." if len(holding_back) > NAMED_PODS else "")
        return IdleVerdict(False, reasons.NON_PREEMPTIBLE_WORKLOAD,
                           f"idle for {sleep.idle.after}, but {len(holding_back)} non-preemptible pod(s) run: {named}")
    return IdleVerdict(True, reasons.IDLE_GPUS,
                       f"all {usage.gpus_held} GPU(s) the tenant holds idle since {usage.all_idle_since} "
                       f"(spec.sleep.idle.after {sleep.idle.after}; checked {rfc3339(now)}); set spec.sleep.asleep "
                       "to false to wake it")
