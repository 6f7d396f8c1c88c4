"""GPU pools in the configuration: the nodes prepared for one sharing mechanism each, and the CPU pool.
Everything the policy needs about the hardware comes from here."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from gputenant.api.gpus import MIG_PROFILES, mig_layout
from gputenant.api.hub import SharingMode, Trust
from gputenant.api.trust import allowed_modes, names
from gputenant.config.base import ConfigModel


class PoolMode(str, Enum):
    """The one sharing mechanism a pool's nodes are set up for."""

    TIME_SLICING = "TimeSlicing"
    HAMI = "HAMi"
    MIG = "MIG"
    EXCLUSIVE = "Exclusive"


class Toleration(ConfigModel):
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None


class TimeSlicingPool(ConfigModel):
    """NVIDIA device-plugin time-slicing settings for the pool's nodes."""

    replicas: int = Field(ge=2, le=64, description="Replicas advertised per physical GPU.")
    rename_by_default: bool = Field(default=False, description="Advertise nvidia.com/gpu.shared instead of nvidia.com/gpu.")
    fail_requests_greater_than_one: bool = Field(
        default=True, description="Reject containers asking for more than one replica (they would not get more compute)."
    )


class MigStrategy(str, Enum):
    MIXED = "mixed"
    SINGLE = "single"


class MigPool(ConfigModel):
    """MIG layout of the pool's nodes (GPU Operator mig-manager)."""

    strategy: MigStrategy = MigStrategy.MIXED
    config: str = Field(description="Value of the nvidia.com/mig.config node label, e.g. all-1g.10gb or all-balanced.")
    profiles: list[str] = Field(min_length=1, description="MIG profiles the layout offers, e.g. [1g.10gb, 3g.40gb].")
    default_profile: str | None = Field(default=None, description="Profile for tenants that name none. Unset: the first.")


HAMI_IMAGE = "docker.io/projecthami/hami:v2.6.1"
"""HAMi's device-plugin image, which ships HAMi-core as ``/k8s-vgpu/lib/nvidia/libvgpu.so.<version>``
(HAMi's ``docker/Dockerfile``; its ``vgpu-init.sh`` copies that directory onto each node)."""


class HamiLibrary(ConfigModel):
    """Where the admission guard's init container copies HAMi-core (``libvgpu.so``) from, into each capped
    pod's own read-only volume (docs/gpu-pools.md, "HAMi-core library"). The image needs ``/bin/sh`` and
    ``cp``; a pod whose copy fails does not start (fail closed)."""

    image: str = Field(default=HAMI_IMAGE, min_length=1,
                       description="Image that carries libvgpu.so, e.g. HAMi's device-plugin image.")
    path: str = Field(default="/k8s-vgpu/lib/nvidia/libvgpu.so.v2.6.1", pattern=r"^/[^\s'\"$`\\]+$",
                      description="Absolute path of libvgpu.so inside the image (no spaces or shell characters).")
    image_pull_policy: str = Field(default="IfNotPresent", pattern="^(Always|IfNotPresent|Never)$",
                                   description="Pull policy of the init container.")


class HamiPool(ConfigModel):
    """Settings of a HAMi-mode pool: KAI GPU fractions on NVIDIA's device plugin, capped by HAMi-core
    (docs/units.md). Pools are homogeneous: every GPU has the pool's gpuMemoryMiB, from which a share's
    memory cap is computed."""

    split_count: int = Field(default=10, ge=1, le=100,
                             description="Most shares per GPU: a tenant's share is at least 100/splitCount percent.")
    library: HamiLibrary = Field(default_factory=HamiLibrary,
                                 description="The HAMi-core library the guard loads into every capped container.")


class CpuPool(ConfigModel):
    """The nodes for a tenant's pods that ask for no GPU: its vCluster's control plane, CoreDNS and
    CPU-only work. The admission guard pins every such pod here, as it pins GPU pods to their pool."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Labels of the CPU nodes; set on every tenant pod without GPUs."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Tolerations of the CPU nodes' taints; added to every tenant pod without GPUs."
    )


class Pool(ConfigModel):
    """A set of GPU nodes prepared for one sharing mechanism."""

    name: str
    mode: PoolMode
    gpu_model: str = Field(description="GPU model, e.g. A100-80GB, H100-80GB, H200-141GB, A30-24GB, A100-40GB, L4.")
    gpu_memory_mi_b: int = Field(alias="gpuMemoryMiB", ge=1, description="Memory of one GPU in MiB.")
    gpus: int | None = Field(default=None, ge=0, description="Physical GPUs in the pool; unset: capacity is not checked.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    scheduler_name: str = Field(default="kai-scheduler", description="Scheduler that places the pool's pods.")
    device_plugin_config: str | None = Field(
        default=None, description="Name of the device-plugin config for this pool (nvidia.com/device-plugin.config label)."
    )
    time_slicing: TimeSlicingPool | None = None
    mig: MigPool | None = None
    hami: HamiPool | None = None
    trust_levels: list[Trust] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Trust levels whose tenants the pool serves; the policy never places a tenant on a pool outside its trust. "
            "Unset: every trust level that may use the pool's mode (docs/trust-levels.md, \"Pools and trust\")."
        ),
    )

    @property
    def serves(self) -> tuple[Trust, ...]:
        """The trust levels the pool serves: its trustLevels, or every trust its mode is allowed for."""
        if self.trust_levels is not None:
            return tuple(self.trust_levels)
        return tuple(trust for trust in Trust if SharingMode(self.mode.value) in allowed_modes(trust))

    @model_validator(mode="after")
    def _trust_levels_allow_the_mode(self) -> Pool:
        """A pool may not declare a trust level its mode isolates too weakly (e.g. Untrusted on TimeSlicing)."""
        for trust in self.trust_levels or ():
            if SharingMode(self.mode.value) not in allowed_modes(trust):
                raise ValueError(
                    f"pool {self.name!r}: trustLevels has {trust.value}, but {self.mode.value} isolates {trust.value} "
                    f"tenants too weakly; remove {trust.value} or use a pool of {names(allowed_modes(trust))}"
                )
        return self

    @model_validator(mode="after")
    def _mode_blocks_match_mode(self) -> Pool:
        """Exactly the block of the pool's mode may be set; HAMi's block has defaults and is filled in."""
        blocks = {
            PoolMode.TIME_SLICING: ("timeSlicing", self.time_slicing),
            PoolMode.MIG: ("mig", self.mig),
            PoolMode.HAMI: ("hami", self.hami),
        }
        for mode, (block, value) in blocks.items():
            if mode is not self.mode and value is not None:
                raise ValueError(
                    f"pool {self.name!r}: {block} is set but mode is {self.mode.value}; remove {block} or set mode: {mode.value}"
                )
        if self.mode is PoolMode.TIME_SLICING and self.time_slicing is None:
            raise ValueError(f"pool {self.name!r}: mode TimeSlicing needs timeSlicing.replicas (time-slice replicas per GPU)")
        if self.mode is PoolMode.MIG and self.mig is None:
            raise ValueError(f"pool {self.name!r}: mode MIG needs mig.config (the nvidia.com/mig.config label) and mig.profiles")
        if self.mode is PoolMode.HAMI and self.hami is None:
            self.hami = HamiPool()
        if self.mig is not None:
            self._check_mig_layout(self.mig)
        return self

    def time_slicing_settings(self) -> TimeSlicingPool:
        """The timeSlicing block, which a TimeSlicing pool always has (checked on load)."""
        if self.time_slicing is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a TimeSlicing pool")
        return self.time_slicing

    def mig_settings(self) -> MigPool:
        """The mig block, which a MIG pool always has (checked on load)."""
        if self.mig is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a MIG pool")
        return self.mig

    def hami_settings(self) -> HamiPool:
        """The hami block, which a HAMi pool always has (filled in on load)."""
        if self.hami is None:
            raise ValueError(f"pool {self.name!r} is a {self.mode.value} pool, not a HAMi pool")
        return self.hami

    def _check_mig_layout(self, mig: MigPool) -> None:
        """Profiles must exist on the GPU model and, for the standard mig-parted configs, in the layout."""
        field = f"pool {self.name!r}"
        on_gpu = MIG_PROFILES.get(self.gpu_model)
        if on_gpu is None:
            raise ValueError(
                f"{field}: gpuModel {self.gpu_model} has no MIG; MIG pools need one of {', '.join(MIG_PROFILES)}"
            )
        known = [profile.name for profile in on_gpu]
        for profile in mig.profiles:
            if profile not in known:
                raise ValueError(
                    f"{field}: mig.profiles has {profile}, which {self.gpu_model} does not offer; "
                    f"its profiles are {', '.join(known)}"
                )
        if mig.default_profile is not None and mig.default_profile not in mig.profiles:
            raise ValueError(f"{field}: mig.defaultProfile {mig.default_profile} is not in mig.profiles {mig.profiles}")
        if mig.strategy is MigStrategy.SINGLE and len(mig.profiles) != 1:
            raise ValueError(
                f"{field}: mig.strategy single advertises every instance as nvidia.com/gpu, so mig.profiles "
                f"must list exactly one profile; use strategy mixed for {mig.profiles}"
            )
        layout = mig_layout(self.gpu_model, mig.config)
        if layout is not None and not set(mig.profiles) <= set(layout):
            missing = sorted(set(mig.profiles) - set(layout))
            raise ValueError(
                f"{field}: mig.config {mig.config} has no {', '.join(missing)} instances on {self.gpu_model} "
                f"(it has {', '.join(layout)}); fix mig.profiles or mig.config"
            )
