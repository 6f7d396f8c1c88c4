"""HAMi-core's caps on the KAI fraction pods of a HAMi-mode tenant: what the guard writes, and the
paths and names only it may use.

KAI v0.12.0 places a ``gpu-fraction`` pod on a shared GPU and caps nothing. HAMi-core (``libvgpu.so``,
Project-HAMi/HAMi-core) caps a process's GPU memory and compute from inside it, once the dynamic
loader preloads it. So for every fraction pod of a HAMi-mode tenant the guard's mutation writes, into
the fraction container (``containers[0]``, the one KAI gives the share):

- ``CUDA_DEVICE_MEMORY_LIMIT=<MiB>m``: the pod's fraction of the pool's GPU memory (pools are
  homogeneous), as KAI's own ``hamicore`` binder plugin (v0.16+) writes it;
- ``CUDA_DEVICE_SM_LIMIT=<percent>``: the fraction in percent of the GPU's SMs (the tenant's
  ``corePercent`` per share), HAMi-core's token-bucket compute throttle;
- ``CUDA_DEVICE_MEMORY_SHARED_CACHE``: HAMi-core's shared region, in a volume of its own that only this
  container mounts and that starts empty, so no image content or other container can prepare it;
- read-only mounts of the pod's library volume at ``/usr/local/vgpu`` (HAMi-core dlopens exactly
  ``/usr/local/vgpu/libvgpu.so``), at ``/etc/ld.so.preload`` (so the loader preloads it into every
  dynamically linked process) and at ``/overrideEnv`` (an empty file: HAMi-core ``setenv``s every line
  of that file at NVML init, which an image could otherwise use to lift the caps).

The library reaches the pod through an init container of the pool's library image that copies it
into an ``emptyDir``: no hostPath (Pod Security ``baseline`` refuses it), no host directory shared by
tenants, and a pod whose copy fails never starts its containers (fail closed). The values are plain
decimals: HAMi-core parses them with ``strtoul(..., 0)``, where ``010`` is octal and ``0`` means no limit.

Facts and file references: ``../shared/research/hami-caps-and-gpu-memory.md`` and docs/trust-levels.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from gputenant.config.pools import HamiLibrary, Pool
from gputenant.guard.kai_sharing import FRACTION_CONTAINER
from gputenant.guard.keys import FRACTION_ANNOTATIONS
from gputenant.policy.decision import Decision
from gputenant.sharing.hami import share_caps

LIBRARY_DIR = "/usr/local/vgpu"
LIBRARY = f"{LIBRARY_DIR}/libvgpu.so"
"""HAMi-core dlopens exactly this path (``src/libvgpu.c``) unless ``CUDA_REDIRECT`` says otherwise."""
PRELOAD = "/etc/ld.so.preload"
OVERRIDE_ENV_FILE = "/overrideEnv"
"""HAMi-core's ``ENV_OVERRIDE_FILE`` (``src/multiprocess/multiprocess_memory_limit.h``): every
``KEY=VALUE`` line is ``setenv``-ed over the environment at NVML init (``src/nvml/hook.c``)."""
CACHE_DIR = "/run/gputenant-hami"
CACHE_FILE = f"{CACHE_DIR}/cudevshr.cache"
GUARDED_PATHS = (PRELOAD, LIBRARY_DIR, OVERRIDE_ENV_FILE, CACHE_DIR)
"""Paths where a tenant's volume would hide or replace what loads or configures HAMi-core. (Its default
shared region ``/tmp/cudevshr.cache`` and lock directory ``/tmp/vgpulock`` are not among them: a capped
container's region is ``CACHE_FILE``, and ``/tmp`` stays the tenant's.)"""

RESERVED_PREFIX = "gputenant-hami"
"""Volume and container names the guard's own start with; tenants may use none."""
LIBRARY_VOLUME = f"{RESERVED_PREFIX}-library"
CACHE_VOLUME = f"{RESERVED_PREFIX}-cache"
INIT_CONTAINER = f"{RESERVED_PREFIX}-library"
SERVICE_ACCOUNT_TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the API server's ServiceAccount admission plugin mounts the pod's token into every container."""
TOKEN_VOLUME_PREFIX = "kube-api-access-"
"""The name the plugin gives the projected token volume (and a random suffix)."""
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
CAP_VARIABLES = (MEMORY_LIMIT, SM_LIMIT, SHARED_CACHE)
STAGING = "/gputenant-hami"
"""Where the init container sees the library volume."""
COPY_SCRIPT = (
    'set -eu; test -s "$1" || { echo "HAMi-core library $1 is not in this image" >&2; exit 1; }; '
    f'cp "$1" {STAGING}/libvgpu.so; chmod 0555 {STAGING}/libvgpu.so; '
    f'echo {LIBRARY} > {STAGING}/ld.so.preload; : > {STAGING}/override-env; '
    f'chmod 0444 {STAGING}/ld.so.preload {STAGING}/override-env'
)
"""Copy the library, write the preload list and the empty override file; any failure stops the pod."""
NOBODY = 65534


@dataclass(frozen=True)
class Caps:
    """What one capped pod gets: its share of the GPU's memory and SMs."""

    fraction: Fraction
    memory_mib: int
    sm_percent: int

    def env(self) -> list[dict]:
        return [{"name": MEMORY_LIMIT, "value": f"{self.memory_mib}m"},
                {"name": SM_LIMIT, "value": str(self.sm_percent)},
                {"name": SHARED_CACHE, "value": CACHE_FILE}]


def caps_for(fraction: Fraction, pool: Pool) -> Caps:
    """The caps of a pod holding `fraction` of one of `pool`'s GPUs (`sharing.hami.share_caps`)."""
    return Caps(fraction, *share_caps(fraction, pool))


def capped_pool(decision: Decision) -> Pool | None:
    """The HAMi pool whose fraction pods the guard caps: HAMi mode (whole shares of corePercent) only.
    Time-slicing tenants may ask KAI for fractions too, but their tier promises no cap."""
    rules = decision.pod_rules if decision.possible else None
    if rules is None or rules.fraction_share is None or decision.pool is None:
        return None
    return decision.pool


def requested_fraction(pod: dict) -> Fraction | None:
    """The pod's ``gpu-fraction`` when it is a number in (0, 1); None otherwise (validation refuses it)."""
    written = ((pod.get("metadata") or {}).get("annotations") or {}).get(FRACTION_ANNOTATIONS[0])
    try:
        fraction = Fraction(Decimal(str(written).strip()))
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return fraction if 0 < fraction < 1 else None


def pod_caps(pod: dict, decision: Decision) -> Caps | None:
    """The caps this pod must carry, or None when it is no capped fraction pod."""
    pool = capped_pool(decision)
    fraction = requested_fraction(pod) if pool else None
    return caps_for(fraction, pool) if pool and fraction else None


def caps_by_size(decision: Decision) -> list[Caps]:
    """The caps of each pod size a HAMi-mode tenant may ask for: every whole number of its shares up to
    the largest fraction one pod may hold (for ``gputenant explain``)."""
    pool = capped_pool(decision)
    rules = decision.pod_rules
    if pool is None or rules is None or rules.fraction_share is None or rules.max_fraction is None:
        return []
    share = rules.fraction_share
    return [caps_for(share * k, pool) for k in range(1, int(rules.max_fraction / share) + 1)]


def library_settings(pool: Pool) -> HamiLibrary:
    return pool.hami_settings().library


def init_container(library: HamiLibrary) -> dict:
    """The guard's init container: copies HAMi-core into the pod's library volume; sees no GPU, runs as
    nobody with nothing but that volume writable, so Pod Security ``restricted`` would admit it too. Its
    stderr becomes its termination message, so a failed copy's reason reaches the pod's status (and the
    tenant, through vCluster's status sync)."""
    return {
        "name": INIT_CONTAINER,
        "image": library.image,
        "imagePullPolicy": library.image_pull_policy,
        "command": ["/bin/sh", "-c", COPY_SCRIPT, "copy-hami-core", library.path],
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "securityContext": {"runAsUser": NOBODY, "runAsGroup": NOBODY, "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": LIBRARY_VOLUME, "mountPath": STAGING}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def volumes() -> list[dict]:
    return [{"name": LIBRARY_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
            {"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}}]


def capped_mounts() -> list[dict]:
    """The fraction container's mounts: the library and its preload list read-only, the cache writable."""
    return [{"name": LIBRARY_VOLUME, "mountPath": LIBRARY_DIR, "readOnly": True},
            {"name": LIBRARY_VOLUME, "mountPath": PRELOAD, "subPath": "ld.so.preload", "readOnly": True},
            {"name": LIBRARY_VOLUME, "mountPath": OVERRIDE_ENV_FILE, "subPath": "override-env", "readOnly": True},
            {"name": CACHE_VOLUME, "mountPath": CACHE_DIR}]


def is_reserved_name(name: str | None) -> bool:
    return bool(name) and str(name).startswith(RESERVED_PREFIX)


def mutation(pod: dict, decision: Decision) -> Iterator[dict]:
    """JSON-patch operations that cap a fraction pod; none for other pods. What the tenant already put
    under the guard's names (variables, volumes, the init container) is left for validation to refuse;
    on reinvocation the pod already carries everything and nothing is added."""
    caps = pod_caps(pod, decision)
    pool = capped_pool(decision)
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    if caps is None or pool is None or len(containers) <= FRACTION_CONTAINER:
        return
    capped = containers[FRACTION_CONTAINER]
    base = f"/spec/containers/{FRACTION_CONTAINER}"
    yield from _append(capped, "env", base, [v for v in caps.env()
                                             if not any(e.get("name") == v["name"] for e in capped.get("env") or [])])
    yield from _append(capped, "volumeMounts", base, [m for m in capped_mounts()
                                                      if m not in (capped.get("volumeMounts") or [])])
    yield from _append(spec, "volumes", "/spec", [v for v in volumes()
                                                  if not any(o.get("name") == v["name"] for o in spec.get("volumes") or [])])
    if not any(c.get("name") == INIT_CONTAINER for c in spec.get("initContainers") or []):
        container = init_container(library_settings(pool))
        container["volumeMounts"].extend(service_account_token_mounts(spec))
        if spec.get("initContainers") is None:
            yield {"op": "add", "path": "/spec/initContainers", "value": [container]}
        else:
            yield {"op": "add", "path": "/spec/initContainers/0", "value": container}


def service_account_token_mounts(spec: dict) -> list[dict]:
    """The mount of the pod's ServiceAccount token that the API server's ServiceAccount plugin gave every
    container before the webhooks ran (read-only, of its projected ``kube-api-access-*`` volume), for the
    guard's init container. The plugin would add the same mount there on its second pass, and that change
    would make the API server call the guard's mutating webhook again (``reinvocationPolicy: IfNeeded``):
    the stored pod is the same either way, with one webhook call fewer. None when the plugin mounted no
    token (``automountServiceAccountToken: false``, or no such mount)."""
    if spec.get("automountServiceAccountToken") is False:
        return []
    projected = {volume.get("name") for volume in spec.get("volumes") or []
                 if "projected" in volume and str(volume.get("name", "")).startswith(TOKEN_VOLUME_PREFIX)}
    for container in spec.get("containers") or []:
        for mount in container.get("volumeMounts") or []:
            if mount == {"name": mount.get("name"), "mountPath": SERVICE_ACCOUNT_TOKEN_PATH, "readOnly": True} \
                    and mount["name"] in projected:
                return [dict(mount)]
    return []


def _append(owner: dict, key: str, base: str, items: list[dict]) -> Iterator[dict]:
    if not items:
        return
    if owner.get(key) is None:
        yield {"op": "add", "path": f"{base}/{key}", "value": items}
    else:
        yield from ({"op": "add", "path": f"{base}/{key}/-", "value": item} for item in items)
