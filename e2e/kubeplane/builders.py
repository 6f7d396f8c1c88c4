"""Builders of the objects tests write again and again: containers, pods and GPU pools of the
operator configuration, as plain dicts, as the API server and the operator's models take them; and
the validated tenant specs and configurations the policy's tests decide on. One module so that unit
tests (operator/tests) and e2e tests build them alike."""

from __future__ import annotations

from typing import Any

from gputenant.api.v1alpha1 import GpuTenantSpec, SharingMode, Trust
from gputenant.config.models import OperatorConfig

from .tools import pinned_versions

RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65534, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
"""A container's securityContext that the restricted Pod Security Standard admits (the Untrusted
tier's virtual cluster and host namespace); tests copy it (`dict(RESTRICTED)`) before changing it."""

POOL_LABEL = "gputenant.io/pool"
"""The node label and taint key a placed pool selects and tolerates (examples/config.yaml's shape)."""


def container(name: str = "main", limits: dict | None = None, image: str = "registry.example/app:1",
              **fields: Any) -> dict:
    """A container named `name` with `limits` as its resource limits (e.g. ``{"nvidia.com/gpu": 1}``)."""
    result: dict[str, Any] = {"name": name, "image": image, **fields}
    if limits:
        result["resources"] = {"limits": limits}
    return result


def pod(*containers: dict, labels: dict | None = None, annotations: dict | None = None,
        metadata: dict | None = None, **spec: Any) -> dict:
    """A Pod of `containers` (one default container when none), `spec` fields beside them; named by
    `metadata` (default: a generated name, as a test creating many pods needs)."""
    meta: dict[str, Any] = dict(metadata or {"generateName": "case-"})
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": list(containers) or [container()], **spec}}


def pool(name: str, mode: str, model: str = "A100-80GB", memory_mib: int = 81920, **fields: Any) -> dict:
    """A GPU pool of the operator configuration (pools[]): `model` GPUs of `memory_mib`, nothing more."""
    return {"name": name, "mode": mode, "gpuModel": model, "gpuMemoryMiB": memory_mib, **fields}


def placed_pool(name: str, mode: str, model: str = "A100-80GB", gpus: int = 8, **fields: Any) -> dict:
    """`pool` with `gpus` GPUs on nodes labelled ``gputenant.io/pool=<name>`` and tainted so that only
    the pool's pods tolerate them."""
    return pool(name, mode, model, gpus=gpus, nodeSelector={POOL_LABEL: name},
                tolerations=[{"key": POOL_LABEL, "operator": "Equal", "value": name, "effect": "NoSchedule"}],
                **fields)


def sharing_pools() -> list[dict]:
    """One placed pool per sharing mechanism (time-slicing, HAMi, MIG): the configuration the guard's
    tests judge pods against."""
    return [
        placed_pool("ts", "TimeSlicing", timeSlicing={"replicas": 4}),
        placed_pool("hami", "HAMi"),
        placed_pool("mig", "MIG", mig={"config": "all-balanced", "profiles": ["1g.10gb", "2g.20gb", "3g.40gb"]}),
    ]


def tenant_spec(trust: Trust, mode: SharingMode = SharingMode.AUTO, *, validate: bool = True,
                sharing: dict | None = None, **gpu: Any) -> GpuTenantSpec:
    """A tenant spec as the API accepts it; validate=False builds one the API would reject (the policy
    must still cope)."""
    amounts: dict[str, Any] = {key: gpu.pop(key) for key in ("quota", "limit") if key in gpu and not validate}
    body = {
        "trust": Trust.TRUSTED.value if not validate else trust.value,
        "owners": [{"kind": "Group", "name": "team-a"}],
        "gpu": gpu,
        "sharing": {"mode": SharingMode.AUTO.value if not validate else mode.value, **(sharing or {})},
    }
    parsed = GpuTenantSpec.model_validate(body)
    if validate:
        return parsed
    return parsed.model_copy(update={"trust": trust, "gpu": parsed.gpu.model_copy(update=amounts),
                                     "sharing": parsed.sharing.model_copy(update={"mode": mode})})


def operator_config(*pools: dict, **extra: Any) -> OperatorConfig:
    """The operator configuration with `pools` and any other top-level fields."""
    return OperatorConfig.model_validate({"pools": list(pools), **extra})


def tenant(name: str, trust: str = "Trusted", *, owner: str | None = None, gpus: float = 1, **spec: Any) -> dict:
    """A GpuTenant as a platform engineer writes it: one User owner (`owner`, default
    ``<name>-owner``), `gpus` of quota, its vCluster at the pinned Kubernetes version (the distro image
    built here; the chart's default, a newer one, is not on the node) with `vcluster`'s fields on
    top; `spec` adds or replaces the other fields. The one tenant builder of the tests."""
    vcluster = {"kubernetesVersion": pinned_versions()["kube"], **spec.pop("vcluster", {})}
    gpu = {"quota": gpus, **spec.pop("gpu", {})}
    return {"apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "metadata": {"name": name},
            "spec": {"trust": trust, "owners": [{"kind": "User", "name": owner or f"{name}-owner"}],
                     "gpu": gpu, "vcluster": vcluster, **spec}}
