"""Rules on who a pod is: its queue, scheduler, priority, gang, and the label and annotation keys
KAI, HAMi and the operator read to charge, group or place it."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard import kai_sharing, keys
from gputenant.guard.gangs import POD_GROUP_ANNOTATION, GangError, asks_for_gang, gang_name, gang_size, guard_gang
from gputenant.guard.mutation import DEFAULT_SCHEDULER
from gputenant.guard.pods import asks_for_fraction
from gputenant.guard.registry import Review, rule
from gputenant.guard.rules.common import granted_name


@rule("queue-label", "a `kai.scheduler/queue` label naming another queue than the tenant's")
def _queue_label(review: Review) -> Iterator[str]:
    pod_queue = review.labels.get(keys.QUEUE_LABEL)
    if pod_queue is not None and pod_queue != review.queue:
        yield (f"label {keys.QUEUE_LABEL}={pod_queue} names another queue; pods of this tenant use queue "
               f"{review.queue} (remove the label)")


@rule("scheduler-key", "KAI's, HAMi's and the operator's own label/annotation keys (every key of KAI's "
      "vocabulary in docs/threat-model.md: `project`, `priorityClassName`, `kai.scheduler/*`, `pod-group-name`, "
      "`runai-gpu-group/*`, `spark-app-selector`, `app=kai-resource-reservation`, `runai/*`, `hami.io/*`, "
      "`nvidia.com/*`, `gputenant.io/*`, ...) set by the tenant (not the gang `pod-group-name` the guard sets); on UPDATE only "
      "changes from the tenant's side")
def _scheduler_keys(review: Review) -> Iterator[str]:
    if review.operation != "CREATE" and not review.by_tenant:
        return
    for kind, present, exact, allowed in (
            ("label", review.labels, keys.KAI_LABELS, (keys.QUEUE_LABEL,)),
            ("annotation", review.annotations, keys.KAI_ANNOTATIONS,
             (*keys.FRACTION_ANNOTATIONS, *keys.TENANT_ALLOWED_ANNOTATIONS, kai_sharing.CONFIGMAP_ANNOTATION))):
        for key in sorted(present):
            if kind == "annotation" and key == POD_GROUP_ANNOTATION and review.gpu_pod \
                    and guard_gang(review.pod, review.tenant):
                continue
            if key not in allowed and keys.is_reserved(key, exact):
                yield (f"{kind} {key} is read by the GPU scheduler or vGPU stack to choose a queue, group, "
                       f"priority or device; tenants may not set it (remove the {kind})")
            elif kind == "label" and keys.reserved_label_value(key, present[key]):
                yield (f"label {key}={present[key]} marks KAI's own reservation or scaling pods, whose GPUs KAI "
                       f"does not count; tenants may not use that value (remove the label or change its value)")


@rule("gang", f"a `{keys.GANG_SIZE_ANNOTATION}` that is not 2..1024, on a pod without GPUs or without an owner "
      "in the virtual cluster")
def _gang(review: Review) -> Iterator[str]:
    if review.operation != "CREATE" or not asks_for_gang(review.pod):
        return
    if not review.gpu_pod:
        yield (f"annotation {keys.GANG_SIZE_ANNOTATION} is set on a pod without GPUs; only GPU pods are "
               "gang-scheduled (remove the annotation)")
        return
    for check in (gang_size, lambda pod: gang_name(pod, review.tenant)):
        try:
            check(review.pod)
        except GangError as error:
            yield str(error)



@rule("kai-sharing", f"a `{kai_sharing.CONFIGMAP_ANNOTATION}` annotation on a pod that asks for no KAI fraction, "
      "or other than the prefix the guard's mutation writes (`<15 characters of the pod or owner name>-<SHA-256 "
      "of namespace/name>-shared-gpu`, replacing the tenant's), or changed after creation; a fraction pod without "
      "a `metadata.name`; KAI's env, `envFrom` and volume are admitted only for the guard's prefix")
def _kai_sharing(review: Review) -> Iterator[str]:
    key = kai_sharing.CONFIGMAP_ANNOTATION
    prefix = review.annotations.get(key)
    if review.operation != "CREATE" and review.old is not None:
        before = ((review.old.get("metadata") or {}).get("annotations") or {}).get(key)
        if prefix != before:
            yield (f"annotation {key} changed on a created pod; KAI's binder writes the pod's GPU into the "
                   "ConfigMaps it names (create a new pod instead)")
    fraction = asks_for_fraction(review.pod)
    expected = kai_sharing.guard_prefix(review.pod)
    if fraction and expected is None:
        yield ("a pod asking for a GPU fraction needs metadata.name: the guard's mutation derives its KAI ConfigMap "
               "prefix from it (set metadata.name)")
        return
    if prefix is None:
        return
    if not fraction:
        yield f"annotation {key} names KAI GPU-sharing ConfigMaps, but the pod asks for no GPU fraction (remove it)"
        return
    if prefix != expected:
        unnamed = (" (a generateName is resolved after mutation: set metadata.name)"
                   if (review.pod.get("metadata") or {}).get("generateName") else "")
        yield (f"annotation {key}={prefix!r} is not the prefix the guard's mutation gives this pod ({expected!r})"
               f"{unnamed}; the guard sets it, tenants may not (remove the annotation)")


@rule("scheduler-name", "a pod on a scheduler other than the pool's (GPU pods) or `default-scheduler` "
      "and the pool's (other pods)")
def _scheduler_name(review: Review) -> Iterator[str]:
    pool = review.decision.pool
    allowed = {pool.scheduler_name} if pool else set()
    if not review.gpu_pod:
        allowed.add(DEFAULT_SCHEDULER)
    scheduler = review.spec.get("schedulerName", DEFAULT_SCHEDULER)
    if allowed and scheduler not in allowed:
        yield (f"schedulerName {scheduler} is not allowed; pods of this tenant are placed by "
               f"{' or '.join(sorted(allowed))} (remove schedulerName)")


@rule("priority-class", "a `priorityClassName` not in the configuration's `guard.priorityClassNames` "
      "(KAI derives priority and preemptibility from it)")
def _priority_class(review: Review) -> Iterator[str]:
    yield from granted_name(review, "priorityClassName", review.settings.priority_class_names)


