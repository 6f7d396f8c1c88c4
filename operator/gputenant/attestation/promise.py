"""What each pool promises a pod, and the canary pod that checks it, shaped as the admission guard
shapes a tenant's GPU pod for that pool (pure: no cluster access).

The canary runs in the operator's namespace, not a tenant's: it must not spend a tenant's quota or
queue, nor depend on a tenant existing; so it is given here what the guard would give a tenant pod
of the pool (scheduler, node selector, tolerations, one unit of the pool's GPU resource, or on a
HAMi pool one KAI GPU fraction of the default share) and nothing the guard would refuse (no
runtimeClass, no device variables).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from fractions import Fraction

from gputenant import naming
from gputenant.api.gpus import mig_profile
from gputenant.api.hub import HamiSpec
from gputenant.config.pools import MigStrategy, Pool, PoolMode
from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.keys import FRACTION_ANNOTATIONS
from gputenant.guard.pods import asks_for_fraction

MIB_PER_GB = 1024
FINGERPRINT_ANNOTATION = "gputenant.io/attestation-fingerprint"
POOL_LABEL = "gputenant.io/attested-pool"
COMPONENT = "isolation-canary"
CANARY_PATH = "/canary/canary.py"
OVER_MIB = 1024
"""How far past the promised memory the canary tries to allocate."""
HAMI_MEMORY_FLOOR = 0.99
"""HAMi-core answers cuDeviceTotalMem with the cap itself: the total must equal it (within 1%)."""
NOBODY = 65534
"""The canary runs as nobody and needs no privilege, so Pod Security "restricted" admits it; the
NVIDIA driver's device files are world-accessible by default (NVreg_DeviceFileMode 0666)."""


@dataclass(frozen=True)
class Promise:
    """What one pod of the pool must see, and how strictly."""

    pool: str
    mode: str
    devices: int
    memory_mib: int
    """Total memory of the one device the pod gets: the GPU, the MIG slice or the HAMi cap."""
    memory_floor: float
    """Below this share of `memory_mib` the reading is wrong too (a smaller slice, a wrong GPU)."""
    resists_evasion: bool
    """True where isolation is outside the tenant's process (MIG, whole GPUs): a variable the
    program changes must not widen access. HAMi and time-slicing promise no such thing
    (docs/trust-levels.md), so there it is measured and reported, not failed."""
    resources: dict[str, str]
    description: str
    annotations: dict[str, str] = field(default_factory=dict)
    """How the pod asks for its GPU where no resource does (a KAI GPU fraction)."""
    capped: bool = True
    """Whether allocating past `memory_mib` must be refused. Time-slicing promises no cap, and its
    memory is its neighbours' too: the canary allocates nothing there, so it never starves them."""
    compute_percent: int | None = None
    """The share of the GPU's SMs the pod may use (HAMi-core's ``CUDA_DEVICE_SM_LIMIT``); None: no compute
    cap is promised (MIG slices and whole GPUs are sized by hardware, time-slices by turn-taking)."""


def promise_of(pool: Pool) -> Promise:
    """The pool's promise to one pod holding one unit of its GPU resource."""
    mode = pool.mode
    whole = pool.gpu_memory_mi_b
    if mode is PoolMode.MIG and pool.mig is not None:
        name = pool.mig.default_profile or pool.mig.profiles[0]
        profile = mig_profile(pool.gpu_model, name)
        memory = profile.memory_gb * MIB_PER_GB if profile else whole
        resource = "nvidia.com/gpu" if pool.mig.strategy is MigStrategy.SINGLE else f"nvidia.com/mig-{name}"
        return Promise(pool.name, mode.value, 1, memory, 0.9, True, {resource: "1"},
                       f"one MIG {name} instance of at most {memory} MiB, isolated in hardware")
    if mode is PoolMode.HAMI:
        caps = hami_caps.caps_for(Fraction(HamiSpec().core_percent, 100), pool)
        return Promise(pool.name, mode.value, 1, caps.memory_mib, HAMI_MEMORY_FLOOR, False, {},
                       f"one KAI GPU fraction of {float(caps.fraction):g}, capped by HAMi-core at {caps.memory_mib} MiB "
                       f"and {caps.sm_percent}% of the SMs (best effort, in the process: against mistakes, not evasion)",
                       annotations={FRACTION_ANNOTATIONS[0]: f"{float(caps.fraction):g}"},
                       compute_percent=caps.sm_percent)
    if mode is PoolMode.TIME_SLICING and pool.time_slicing is not None:
        resource = "nvidia.com/gpu.shared" if pool.time_slicing.rename_by_default else "nvidia.com/gpu"
        return Promise(pool.name, mode.value, 1, whole, 0.9, False, {resource: "1"},
                       f"one time-slice of a {whole} MiB GPU, memory shared with the other slices", capped=False)
    return Promise(pool.name, mode.value, 1, whole, 0.9, True, {"nvidia.com/gpu": "1"},
                   f"one whole GPU of {whole} MiB, no other pod on it")


def fingerprint(pool: Pool, image: str) -> str:
    """Changes when the pool's configuration or the canary image does: a new attestation is due."""
    text = pool.model_dump_json(by_alias=True) + "\0" + image
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def canary_pod_name(pool: Pool) -> str:
    return f"isolation-canary-{pool.name}"[:63].rstrip("-")


def canary_pod(pool: Pool, namespace: str, image: str, queue: str | None = None) -> dict:
    """The canary Pod for the pool, as the guard would admit a tenant's one-unit GPU pod there;
    `queue`: the KAI queue it is charged to (a KAI pool schedules no pod without one)."""
    promise = promise_of(pool)
    labels = {naming.MANAGED_BY_LABEL: naming.MANAGED_BY, naming.COMPONENT_LABEL: COMPONENT, POOL_LABEL: pool.name}
    if queue:
        labels[naming.QUEUE_LABEL] = queue
    spec: dict = {
        "restartPolicy": "Never",
        "schedulerName": pool.scheduler_name,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "canary", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", CANARY_PATH, "--expect-memory-mib", str(promise.memory_mib),
                        "--over-mib", str(OVER_MIB if promise.capped else 0),
                        *(["--measure-compute"] if promise.compute_percent else [])],
            "resources": {"limits": {**promise.resources, "cpu": "500m", "memory": "512Mi"},
                          "requests": {"cpu": "100m", "memory": "256Mi"}},
            "terminationMessagePolicy": "File",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                "runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY,
                                "seccompProfile": {"type": "RuntimeDefault"}},
        }],
    }
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    if pool.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True, by_alias=True) for t in pool.tolerations]
    annotations = {FINGERPRINT_ANNOTATION: fingerprint(pool, image), **promise.annotations}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": canary_pod_name(pool), "namespace": namespace, "labels": labels,
                     "annotations": annotations},
        "spec": spec,
    }
    if pool.mode is PoolMode.HAMI:
        _cap(spec, pool)
    prefix = kai_sharing.guard_prefix(pod) if asks_for_fraction(pod) else None
    if prefix:
        # KAI's binder writes a fraction's GPU into the ConfigMaps this names; KAI's admission keeps
        # a value already set, and it is the one the guard gives a tenant's share of that name.
        annotations[kai_sharing.CONFIGMAP_ANNOTATION] = prefix
    return pod


def _cap(spec: dict, pool: Pool) -> None:
    """HAMi-core's caps on the canary's share, exactly as the guard writes them on a tenant's share."""
    caps = hami_caps.caps_for(Fraction(HamiSpec().core_percent, 100), pool)
    container = spec["containers"][0]
    container["env"] = caps.env()
    container["volumeMounts"] = hami_caps.capped_mounts()
    spec["volumes"] = hami_caps.volumes()
    spec["initContainers"] = [hami_caps.init_container(hami_caps.library_settings(pool))]
