"""Rules on HAMi-core's caps (``guard.hami_caps``): a HAMi-mode fraction pod carries exactly the caps the
guard's mutation writes, and no pod uses the guard's names to fake, widen or reach them."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard import hami_caps
from gputenant.guard.pods import containers
from gputenant.guard.registry import Review, rule
from gputenant.guard.rules.common import decimal, kai_container

DEFAULTED_CONTAINER_FIELDS = frozenset({"terminationMessagePath", "terminationMessagePolicy"})
"""Fields the API server defaults on a container after the guard's mutation; nothing else may be added."""


def _same_as_guards(container: dict, expected: dict) -> bool:
    """The guard's init container as the API server stores it: the guard's fields, plus only defaults and the
    pod's own ServiceAccount token mount."""
    extra = set(container) - set(expected)
    if not extra <= DEFAULTED_CONTAINER_FIELDS:
        return False
    if any(container.get(k) != v for k, v in expected.items() if k != "volumeMounts"):
        return False
    mounts = container.get("volumeMounts") or []
    added = [m for m in mounts if m not in expected["volumeMounts"]]
    return (all(m in mounts for m in expected["volumeMounts"])
            and all(m.get("mountPath") == hami_caps.SERVICE_ACCOUNT_TOKEN_PATH and m.get("readOnly") for m in added))


def _capped_container_violations(review: Review, caps: hami_caps.Caps) -> Iterator[str]:
    container = (review.spec.get("containers") or [{}])[0]
    name = container.get("name")
    why = f"the pod's {decimal(caps.fraction)} share of a GPU"
    env = container.get("env") or []
    for wanted in caps.env():
        found = [variable for variable in env if variable.get("name") == wanted["name"]]
        if found != [wanted]:
            yield (f"container {name}: {wanted['name']} must be exactly {wanted['value']!r} ({why}; the guard sets "
                   "it, remove the tenant's variable)")
    if any(variable.get("name") == "CUDA_VISIBLE_DEVICES" for variable in env):
        yield (f"container {name} sets CUDA_VISIBLE_DEVICES, with which HAMi-core does not enforce its memory cap "
               "(Project-HAMi/HAMi-core#319); the container sees only its share's GPU (remove the variable)")
    mounts = container.get("volumeMounts") or []
    for wanted in hami_caps.capped_mounts():
        if wanted not in mounts:
            yield (f"container {name} lacks the guard's mount of {wanted['name']} at {wanted['mountPath']} that "
                   "loads HAMi-core; the guard adds it to every fraction pod (recreate the pod through the guard)")
    volumes = review.spec.get("volumes") or []
    for wanted in hami_caps.volumes():
        if wanted not in volumes:
            yield f"the pod lacks the guard's volume {wanted['name']} ({wanted}); recreate the pod through the guard"
    if not any(c.get("name") == hami_caps.INIT_CONTAINER for c in review.spec.get("initContainers") or []):
        yield (f"the pod lacks the guard's init container {hami_caps.INIT_CONTAINER} that delivers HAMi-core; "
               "recreate the pod through the guard")


@rule("hami-caps", "a HAMi-mode fraction pod without exactly the guard's HAMi-core caps (`CUDA_DEVICE_MEMORY_LIMIT` "
      "= its share of the pool's GPU memory, `CUDA_DEVICE_SM_LIMIT` = its share in percent, the shared-region "
      "path, the read-only preload, library and override-file mounts, the library init container and volumes), "
      "or with `CUDA_VISIBLE_DEVICES` in its fraction container; any pod's volume, container or mount under the "
      "guard's `gputenant-hami*` names other than the guard's own")
def _hami_caps(review: Review) -> Iterator[str]:
    caps = hami_caps.pod_caps(review.pod, review.decision)
    pool = hami_caps.capped_pool(review.decision)
    guard_init = hami_caps.init_container(hami_caps.library_settings(pool)) if caps and pool else None
    for volume in review.spec.get("volumes") or []:
        if hami_caps.is_reserved_name(volume.get("name")) and (caps is None or volume not in hami_caps.volumes()):
            yield (f"volume {volume.get('name')}: names starting with {hami_caps.RESERVED_PREFIX} are the guard's "
                   "(rename the volume)")
    for key, kind, index, container in containers(review.pod):
        name = container.get("name")
        is_guard_init = (key == "initContainers" and name == hami_caps.INIT_CONTAINER and guard_init is not None
                         and _same_as_guards(container, guard_init))
        if hami_caps.is_reserved_name(name) and not is_guard_init:
            yield (f"{kind} {name}: names starting with {hami_caps.RESERVED_PREFIX} are the guard's, and only the "
                   "guard's own init container may use one (rename the container)")
            continue
        capped = caps is not None and kai_container(key, index)
        for mount in container.get("volumeMounts") or []:
            if not hami_caps.is_reserved_name(mount.get("name")) or is_guard_init:
                continue
            if not (capped and mount in hami_caps.capped_mounts()):
                yield (f"{kind} {name} mounts the guard's volume {mount.get('name')} at {mount.get('mountPath')}; "
                       "only the guard's mounts may (remove the mount)")
    if caps is not None:
        yield from _capped_container_violations(review, caps)
