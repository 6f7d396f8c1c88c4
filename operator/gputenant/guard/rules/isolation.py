"""Rules on what a pod could do to the node and to the GPU's software isolation: privileges, host
namespaces, the container runtime's and HAMi-core's variables and files."""

from __future__ import annotations

from collections.abc import Iterator

from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.mutation import NO_DEVICES, VISIBLE_DEVICES
from gputenant.guard.pods import container_gpu_amounts, containers
from gputenant.guard.registry import STRICT, Review, rule
from gputenant.guard.rules.common import guard_cap, kai_container, kai_env, kai_prefix

ISOLATION_ENV_FAMILIES = ("CUDA_", "GPU_", "LIBCUDA_", "HAMI_", "VGPU_", "ACTIVE_OOM_KILLER", "RECORD_KERNEL_INTERVAL",
                          "LD_PRELOAD", "LD_AUDIT")
"""Variable prefixes HAMi-core and the dynamic loader read (CUDA_DEVICE_MEMORY_LIMIT and its per-device
CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT*, CUDA_DEVICE_MEMORY_SHARED_CACHE, CUDA_REDIRECT, CUDA_DISABLE_CONTROL,
CUDA_TASK_PRIORITY, GPU_CORE_UTILIZATION_POLICY, ACTIVE_OOM_KILLER, RECORD_KERNEL_INTERVAL, LIBCUDA_LOG_LEVEL;
LD_PRELOAD libraries load before HAMi-core's /etc/ld.so.preload and can shadow it)."""
ISOLATION_ENV_ALLOWED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
                         "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_HOME", "CUDA_PATH",
                         "CUDA_VERSION")
"""Variables of those families that only narrow or describe what the container already has."""
DEVICE_ENV_FAMILIES = ("NVIDIA_",)
"""NVIDIA container-runtime variables (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_MIG_*):
they choose which GPUs and driver features a container sees, whatever its resources say."""



@rule("privileged", "a privileged container, init or ephemeral container")
def _privileged(review: Review) -> Iterator[str]:
    for _, kind, _, container in containers(review.pod):
        if (container.get("securityContext") or {}).get("privileged"):
            yield (f"{kind} {container.get('name')} is privileged; privileged containers see every GPU of the "
                   "node (remove securityContext.privileged)")


@rule("host-namespaces", "`hostPID`, `hostIPC`, `hostNetwork`")
def _host_namespaces(review: Review) -> Iterator[str]:
    for name in ("hostPID", "hostIPC", "hostNetwork"):
        if review.spec.get(name):
            yield f"spec.{name} shares the node's namespaces with the pod (remove spec.{name})"


@rule("device-env", "`NVIDIA_*` container-runtime variables (GPU visibility and driver features), except the "
      "guard's own `NVIDIA_VISIBLE_DEVICES=void` in containers without GPUs and KAI's reference to the "
      "pod's own GPU-sharing ConfigMap in a fraction pod's first container")
def _device_env(review: Review) -> Iterator[str]:
    prefix = kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for variable in container.get("env") or []:
            name = variable.get("name", "")
            if not name.startswith(DEVICE_ENV_FAMILIES) or kai_env(prefix, key, index, variable):
                continue
            if (name == VISIBLE_DEVICES and variable.get("value") == NO_DEVICES and "valueFrom" not in variable
                    and not container_gpu_amounts(container)):
                continue
            yield (f"{kind} {container.get('name')} sets {name}, which chooses the GPUs the container sees "
                   "(remove the variable)")



def _isolation_variable(name: str) -> bool:
    return name.startswith(ISOLATION_ENV_FAMILIES) and name not in ISOLATION_ENV_ALLOWED


@rule("isolation-env", "variables HAMi-core or the loader read (`CUDA_*`, `GPU_*`, `LIBCUDA_*`, `HAMI_*`, "
      "`ACTIVE_OOM_KILLER`, `LD_PRELOAD`, `LD_AUDIT`) except a few that only narrow (`CUDA_VISIBLE_DEVICES`, ...)",
      STRICT)
def _isolation_env(review: Review) -> Iterator[str]:
    prefix = kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for variable in container.get("env") or []:
            name = variable.get("name", "")
            if (_isolation_variable(name) and not kai_env(prefix, key, index, variable)
                    and not guard_cap(review, key, index, variable)):
                yield f"{kind} {container.get('name')} sets {name}, which overrides GPU isolation (remove the variable)"


def _families(review: Review) -> tuple[str, ...]:
    return DEVICE_ENV_FAMILIES + (ISOLATION_ENV_FAMILIES if review.trust in STRICT else ())


@rule("env-from", "`envFrom` whose prefix could produce a guarded variable (`NVIDIA_*`; for Internal and "
      "Untrusted also the isolation families): a ConfigMap's keys are not known at admission; except KAI's "
      "`envFrom` of the pod's own `-evar` ConfigMap in a fraction pod's first container")
def _env_from(review: Review) -> Iterator[str]:
    families = _families(review)
    own_prefix = kai_prefix(review)
    for key, kind, index, container in containers(review.pod):
        for source in container.get("envFrom") or []:
            if (own_prefix is not None and kai_container(key, index)
                    and kai_sharing.is_kai_env_from(source, own_prefix)):
                continue
            prefix = source.get("prefix", "")
            if any(family.startswith(prefix) or prefix.startswith(family) for family in families):
                what = f"prefix {prefix!r}" if prefix else "no prefix"
                yield (f"{kind} {container.get('name')} takes variables from envFrom with {what}, so GPU isolation "
                       "variables could arrive unseen; set envFrom[].prefix to one no GPU variable starts with, "
                       "e.g. APP_")


@rule("hami-preload", "a volume mounted on, above or below what loads or configures HAMi-core "
      "(`/etc/ld.so.preload`, `/usr/local/vgpu`, `/overrideEnv`, the guard's shared-region directory), but the "
      "guard's own mounts in a capped fraction container", STRICT)
def _hami_preload(review: Review) -> Iterator[str]:
    for key, kind, index, container in containers(review.pod):
        for mount in container.get("volumeMounts") or []:
            if guard_cap(review, key, index, mount, hami_caps.capped_mounts()):
                continue
            path = (mount.get("mountPath") or "").rstrip("/") or "/"
            above = path if path.endswith("/") else path + "/"
            for guarded in hami_caps.GUARDED_PATHS:
                if guarded == path or guarded.startswith(above) or path.startswith(guarded + "/"):
                    yield (f"{kind} {container.get('name')} mounts a volume at {mount.get('mountPath')}, which "
                           f"hides or replaces {guarded} that loads or configures GPU isolation (mount it elsewhere)")
                    break
