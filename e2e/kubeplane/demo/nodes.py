"""Fake GPU nodes for the pools of an operator config, so every pool of the local demo has
capacity and `gputenant pools` shows real numbers. Pure: returns what to create."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gputenant.api.gpus import MIG_PROFILES, mig_layout
from gputenant.config.models import OperatorConfig, Pool, PoolMode

GPUS_PER_NODE = 8
"""A typical HGX/DGX node; a pool of 16 GPUs becomes two nodes."""


@dataclass(frozen=True)
class FakeGpuNode:
    """Arguments for `kubeplane.fixtures.create_gpu_node(plane, name, **options)`."""

    name: str
    pool: str
    options: dict = field(default_factory=dict)


class FakeNodeError(ValueError):
    """A pool cannot be imitated by fake nodes; the message names the pool field to change."""


def _gpus_per_node(pool: Pool) -> list[int]:
    """The pool's GPUs spread over nodes of at most GPUS_PER_NODE; one full node when unset."""
    total = GPUS_PER_NODE if pool.gpus is None else pool.gpus
    if total == 0:
        return []
    nodes = math.ceil(total / GPUS_PER_NODE)
    return [min(GPUS_PER_NODE, total - index * GPUS_PER_NODE) for index in range(nodes)]


def _mode_options(pool: Pool, gpus: int) -> dict:
    """How the GPU Operator (or HAMi) would advertise this node's GPUs for the pool's mode."""
    if pool.mode is PoolMode.TIME_SLICING:
        return {"time_slicing_replicas": pool.time_slicing.replicas}
    if pool.mode is PoolMode.HAMI:
        return {"hami": True}
    if pool.mode is PoolMode.MIG:
        layout = mig_layout(pool.gpu_model, pool.mig.config)
        if layout is None:
            raise FakeNodeError(
                f"pools[{pool.name}].mig.config {pool.mig.config!r} is a custom layout the demo cannot "
                f"imitate; use all-<profile> or all-balanced for the local demo")
        return {"mig_profiles": {profile: count * gpus for profile, count in layout.items()},
                "mig_config": pool.mig.config}
    return {}


def fake_gpu_nodes(config: OperatorConfig) -> list[FakeGpuNode]:
    """Nodes labelled with each pool's nodeSelector and sized by its `gpus`."""
    nodes = []
    for pool in config.pools:
        if not pool.node_selector:
            raise FakeNodeError(f"pools[{pool.name}].nodeSelector is empty: the pool selects no node; "
                                "give it the labels of its nodes")
        for index, gpus in enumerate(_gpus_per_node(pool), start=1):
            options = {"product": f"NVIDIA-{pool.gpu_model}", "gpus": gpus,
                       "gpu_memory_mib": pool.gpu_memory_mi_b, "mig_capable": pool.gpu_model in MIG_PROFILES,
                       "labels": dict(pool.node_selector),
                       **_mode_options(pool, gpus)}
            nodes.append(FakeGpuNode(name=f"gpu-{pool.name}-{index}", pool=pool.name, options=options))
    return nodes
