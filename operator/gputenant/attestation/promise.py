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
from fractions import Fraction

from gputenant import naming
from gputenant.api.hub import HamiSpec
from gputenant.config.pools import Pool
from gputenant.guard import hami_caps, kai_sharing
from gputenant.guard.pods import asks_for_fraction
from gputenant.sharing import registry
from gputenant.sharing.base import Promise

FINGERPRINT_ANNOTATION = "gputenant.io/attestation-fingerprint"
POOL_LABEL = "gputenant.io/attested-pool"
COMPONENT = "isolation-canary"
CANARY_PATH = "/canary/canary.py"
OVER_MIB = 1024
"""How far past the promised memory the canary tries to allocate."""
NOBODY = 65534
"""The canary runs as nobody and needs no privilege, so Pod Security "restricted" admits it; the
NVIDIA driver's device files are world-accessible by default (NVreg_DeviceFileMode 0666)."""


def promise_of(pool: Pool) -> Promise:
    """The pool's promise to one pod holding one unit of its GPU resource (its mechanism's)."""
    return registry.of_pool(pool).promise(pool)


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
    if registry.of_pool(pool).caps_in_process:
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
