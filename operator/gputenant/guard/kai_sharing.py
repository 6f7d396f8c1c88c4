"""The exact shape KAI-Scheduler's own admission webhook gives a GPU-fraction pod, so that the guard
admits KAI's additions and nothing a tenant shapes like them.

Read from KAI v0.12.0 (the version ``tools/kai/go.mod`` pins): ``pkg/admission/webhook/v1alpha2/gpusharing``
mutates the fraction container (``containers[0]``; ``gpu-fraction-container-name`` is refused from
tenants) of every pod with a ``gpu-fraction``/``gpu-memory`` annotation:

- annotation ``runai/shared-gpu-configmap: <base>-<7 random>-shared-gpu`` unless one is already set
  (``gpusharingconfigmap.SetGpuCapabilitiesConfigMapName``: a pre-set value is KEPT); base is the first
  owner's name, else the pod's, cut to 33 characters; the random part is
  ``k8s.io/apimachinery/pkg/util/rand.String(7)``;
- env ``NVIDIA_VISIBLE_DEVICES``, ``RUNAI_NUM_OF_GPUS``, ``GPU_PORTION``, each ``valueFrom.configMapKeyRef``
  of the same key in ConfigMap ``<prefix>-0`` (``common.AddGPUSharingEnvVars``);
- volume ``<prefix>-0-vol`` of that ConfigMap, mounted nowhere (``common.SetConfigMapVolume``; the guard
  refuses no ConfigMap volume: it carries only the GPU's index and the portion);
- ``envFrom`` ConfigMap ``<prefix>-0-evar``, no prefix, ``optional: false``
  (``common.AddDirectEnvVarsConfigMapSource``).

KAI's binder creates both ConfigMaps when it binds the pod, owned by the pod, and writes the reserved
GPU's index and the portion into them (``pkg/binder/plugins/gpusharing``,
``pkg/binder/common/gpu_access.go``). A ConfigMap that a tenant syncs in through vCluster is named
``<name>-x-<namespace>-x-<vcluster>`` or, past 63 characters, ``<52 characters>-<10 hex>``: neither ends
in ``-shared-gpu-0`` or ``-evar`` (the tenant's vCluster name would have to be ``<7 chars>-shared-gpu-0``
or end in ``evar``), so a well-formed prefix never names a ConfigMap the tenant writes.

The guard does not leave the prefix to KAI: its mutation writes ``guard_prefix(pod)`` (replacing any value
the tenant set) and its validation admits no other value. The apiserver calls mutating webhook
configurations in name order, so ``gputenant-guard`` runs before KAI's ``mutating-kai-admission``, which
keeps the value; were the order ever reversed, KAI's references would name its own random prefix, not the
guard's, and validation would refuse the pod (fail closed).
"""

from __future__ import annotations

import hashlib

CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"
FRACTION_CONTAINER = 0
"""KAI's fraction container: the first of ``spec.containers`` (KAI ``defaultFractionContainer``)."""
CONFIGMAP_ENV = ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
RANDOM_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""``k8s.io/apimachinery/pkg/util/rand`` alphanums: KAI's 7 random characters come from these."""
MAX_BASE_LENGTH = 33
"""63 (volume name) - 13 (random, hyphens, ``-vol``) - 10 (``shared-gpu``) - 2 (``-0``) - 5 (``-evar``)."""
DIGEST_LENGTH = 30
"""Characters of the guard's digest: 27**30 is about 2**142, so even two names the tenant picks together
(a birthday search, about 2**71 hashes) do not collide."""
MAX_GUARD_PREFIX_LENGTH = 57
"""63 (volume name) - 6 (``-0-vol``)."""
MAX_GUARD_BASE_LENGTH = MAX_GUARD_PREFIX_LENGTH - len("--shared-gpu") - DIGEST_LENGTH
"""57 - 12 (two hyphens, ``shared-gpu``) - 30 (digest) = 15 characters of the name, for people reading it."""


def base_name(pod: dict) -> str:
    """The name KAI derives the prefix from: the first owner's, else the pod's, cut to 33 characters. (A pod
    with ``generateName`` and no owner has no name yet in KAI's webhook; the prefix KAI then writes starts
    with ``-`` and the apiserver refuses the pod's ConfigMap references, so no such pod exists.)"""
    metadata = pod.get("metadata") or {}
    owners = metadata.get("ownerReferences") or []
    name = (owners[0].get("name") or "") if owners else (metadata.get("name") or "")
    return name[:MAX_BASE_LENGTH]


def guard_prefix(pod: dict) -> str | None:
    """The prefix the guard gives a fraction pod: ``<base, 15 characters>-<digest>-shared-gpu``, the digest
    SHA-256 of ``<namespace>/<name>`` in KAI's random alphabet; None for a pod without a name yet
    (``generateName``: the apiserver names it after mutation).

    No secret is needed: names are unique in a namespace, so two pods of the tenant never get the same
    prefix, and pointing a pod at another pod's ConfigMaps would take a SHA-256 collision. Only the
    guard's own value can then carry KAI's references (rule ``kai-sharing``)."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name")
    if not name:
        return None
    number = int.from_bytes(hashlib.sha256(f"{metadata.get('namespace') or ''}/{name}".encode()).digest(), "big")
    digest = []
    for _ in range(DIGEST_LENGTH):
        number, index = divmod(number, len(RANDOM_ALPHABET))
        digest.append(RANDOM_ALPHABET[index])
    return f"{base_name(pod)[:MAX_GUARD_BASE_LENGTH]}-{''.join(digest)}-shared-gpu"


def capabilities_configmap(prefix: str) -> str:
    return f"{prefix}-{FRACTION_CONTAINER}"


def env_configmap(prefix: str) -> str:
    return f"{capabilities_configmap(prefix)}-evar"


def is_kai_env(variable: dict, prefix: str) -> bool:
    """Exactly one of KAI's ConfigMap-key variables, pointing at this pod's capabilities ConfigMap."""
    name = variable.get("name")
    return (name in CONFIGMAP_ENV and set(variable) == {"name", "valueFrom"}
            and variable["valueFrom"] == {"configMapKeyRef": {"name": capabilities_configmap(prefix), "key": name}})


def is_kai_env_from(source: dict, prefix: str) -> bool:
    """Exactly KAI's ``envFrom`` of this pod's ``-evar`` ConfigMap: no prefix, not optional."""
    return source == {"configMapRef": {"name": env_configmap(prefix), "optional": False}}


def kai_shape(prefix: str) -> dict:
    """What KAI's admission adds to a fraction pod with this prefix (for tests and the docs)."""
    name = capabilities_configmap(prefix)
    return {
        "annotations": {CONFIGMAP_ANNOTATION: prefix},
        "env": [{"name": variable, "valueFrom": {"configMapKeyRef": {"name": name, "key": variable}}}
                for variable in CONFIGMAP_ENV],
        "envFrom": [{"configMapRef": {"name": env_configmap(prefix), "optional": False}}],
        "volumes": [{"name": f"{name}-vol", "configMap": {"name": name}}],
    }


def with_kai_shape(pod: dict, prefix: str) -> dict:
    """The pod as it leaves KAI's admission: a prefix already on the pod is kept (KAI's
    ``SetGpuCapabilitiesConfigMapName``), ``prefix`` is KAI's own otherwise; KAI's env replaces same-named
    variables, as KAI's does."""
    metadata = dict(pod.get("metadata") or {})
    shape = kai_shape((metadata.get("annotations") or {}).get(CONFIGMAP_ANNOTATION, prefix))
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **shape["annotations"]}
    spec = dict(pod.get("spec") or {})
    containers = [dict(c) for c in spec.get("containers") or []]
    first = containers[FRACTION_CONTAINER]
    first["env"] = [v for v in first.get("env") or [] if v.get("name") not in CONFIGMAP_ENV] + shape["env"]
    first["envFrom"] = [*(first.get("envFrom") or []), *shape["envFrom"]]
    spec["containers"] = containers
    spec["volumes"] = [*(spec.get("volumes") or []), *shape["volumes"]]
    return {**pod, "metadata": metadata, "spec": spec}
