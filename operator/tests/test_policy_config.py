"""The policy's inputs: the MIG profile catalogue and the operator config checks a platform engineer relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gputenant.api.gpus import MIG_PROFILES, all_mig_profile_names, mig_layout, mig_profile
from gputenant.api.v1alpha1 import SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.config.pools import HamiPool
from kubeplane import builders

ROOT = Path(__file__).resolve().parents[2]


def pool(name: str = "p", mode: str = "MIG", model: str = "H100-80GB", **fields) -> dict:
    return builders.pool(name, mode, model, 81559, **fields)


def mig(config: str = "all-1g.10gb", profiles: tuple[str, ...] = ("1g.10gb",), **fields) -> dict:
    return {"config": config, "profiles": list(profiles), **fields}


def load(*pools: dict, **extra) -> OperatorConfig:
    return OperatorConfig.model_validate({"pools": list(pools), **extra})


# -- MIG catalogue (research notes gpu-sharing.md §3) --------------------------------------------


@pytest.mark.parametrize(
    "model,profile,slices,memory,max_instances",
    [
        ("A100-40GB", "1g.5gb", 1, 5, 7),
        ("A100-40GB", "1g.10gb", 1, 10, 4),
        ("A100-80GB", "3g.40gb", 3, 40, 2),
        ("H100-80GB", "2g.20gb", 2, 20, 3),
        ("H100-80GB", "7g.80gb", 7, 80, 1),
        ("H200-141GB", "1g.18gb", 1, 18, 7),
        ("H200-141GB", "4g.71gb", 4, 71, 1),
        ("A30-24GB", "1g.6gb", 1, 6, 4),
        ("A30-24GB", "2g.12gb", 2, 12, 2),
    ],
)
def test_profile_table(model, profile, slices, memory, max_instances):
    found = mig_profile(model, profile)
    assert (found.compute_slices, found.memory_gb, found.max_instances) == (slices, memory, max_instances)
    assert found.resource_name == f"nvidia.com/mig-{profile}"


def test_profiles_missing_from_a_gpu():
    assert mig_profile("A30-24GB", "3g.20gb") is None
    assert mig_profile("H100-80GB", "1g.5gb") is None
    assert mig_profile("L4", "1g.10gb") is None


def test_all_profile_names_are_unique_and_ordered_by_size():
    names = all_mig_profile_names()
    assert len(names) == len(set(names)) == 20
    assert names[:3] == ["1g.5gb", "1g.6gb", "1g.10gb"] and names[-1] == "7g.141gb"
    assert not any("+" in name for name in names)


def test_a_full_gpu_of_each_profile_never_exceeds_seven_slices():
    for model, profiles in MIG_PROFILES.items():
        total = 4 if model == "A30-24GB" else 7
        for profile in profiles:
            assert profile.compute_slices * profile.max_instances <= total, (model, profile.name)


def test_standard_layouts():
    assert mig_layout("H100-80GB", "all-1g.10gb") == {"1g.10gb": 7}
    assert mig_layout("H100-80GB", "all-balanced") == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert mig_layout("A30-24GB", "all-balanced") == {"1g.6gb": 2, "2g.12gb": 1}
    assert mig_layout("H100-80GB", "custom-layout") is None
    assert mig_layout("L4", "all-balanced") is None


# -- operator config -----------------------------------------------------------------------------


def test_example_config_loads():
    config = OperatorConfig.load(ROOT / "examples" / "config.yaml")
    assert [p.name for p in config.pools] == ["a100-timeslice", "l4-hami", "h100-mig-small", "h100-mig-balanced", "h100-exclusive"]
    assert {p.mode.value for p in config.pools} == {"TimeSlicing", "HAMi", "MIG", "Exclusive"}
    assert all(p.node_selector and p.tolerations for p in config.pools)


@pytest.mark.parametrize(
    "pools,message",
    [
        ([pool("a", "Exclusive"), pool("a", "Exclusive")], "pools: the name 'a' is used by more than one pool"),
        ([pool(mode="HAMi", mig=mig())], "pool 'p': mig is set but mode is HAMi; remove mig or set mode: MIG"),
        ([pool(mode="Exclusive", timeSlicing={"replicas": 4})], "timeSlicing is set but mode is Exclusive"),
        ([pool(mode="TimeSlicing")], "mode TimeSlicing needs timeSlicing.replicas"),
        ([pool(mode="MIG")], "mode MIG needs mig.config"),
        ([pool(model="L4", mig=mig())], "gpuModel L4 has no MIG"),
        ([pool(mig=mig("all-1g.5gb", ("1g.5gb",)))], "mig.profiles has 1g.5gb, which H100-80GB does not offer"),
        ([pool(mig=mig(profiles=("1g.10gb",), defaultProfile="3g.40gb"))], "mig.defaultProfile 3g.40gb is not in mig.profiles"),
        ([pool(mig=mig("all-balanced", ("1g.10gb", "3g.40gb"), strategy="single"))], "mig.profiles must list exactly one profile"),
        ([pool(mig=mig("all-1g.10gb", ("1g.10gb", "3g.40gb")))], "mig.config all-1g.10gb has no 3g.40gb instances on H100-80GB"),
    ],
)
def test_pool_mistakes_name_the_field(pools, message):
    with pytest.raises(ValidationError) as error:
        load(*pools)
    assert message in str(error.value)


def test_custom_mig_config_is_not_layout_checked():
    config = load(pool(mig=mig("team-layout", ("1g.10gb", "7g.80gb"))))
    assert config.pools[0].mig.profiles == ["1g.10gb", "7g.80gb"]


def test_hami_pool_gets_default_settings():
    assert load(pool(mode="HAMi", model="L4")).pools[0].hami == HamiPool()


@pytest.mark.parametrize(
    "trust_modes,message",
    [
        ({"Internal": "TimeSlicing"}, "trustModes.Internal: TimeSlicing is not allowed for Internal tenants; use HAMi, MIG or Exclusive"),
        ({"Untrusted": "HAMi"}, "trustModes.Untrusted: HAMi is not allowed for Untrusted tenants; use MIG or Exclusive"),
        ({"Trusted": "Auto"}, "trustModes.Trusted: Auto is not allowed"),
    ],
)
def test_trust_modes_weaker_than_the_trust_are_rejected(trust_modes, message):
    with pytest.raises(ValidationError) as error:
        load(trustModes=trust_modes)
    assert message in str(error.value)


def test_trust_modes_left_out_get_the_weakest_allowed():
    config = load(trustModes={"Untrusted": "Exclusive"})
    assert config.trust_modes == {
        Trust.TRUSTED: SharingMode.TIME_SLICING,
        Trust.INTERNAL: SharingMode.HAMI,
        Trust.UNTRUSTED: SharingMode.EXCLUSIVE,
    }


# -- parent queues (KAI v0.12 docs/queues/README.md: quota and limit -1 are unlimited) -------------


def test_parent_queues_by_name_get_kai_unlimited_defaults_and_the_default_queue_joins_them():
    config = load(parentQueues=["research", {"name": "training", "resources": {"gpu": {"quota": 8, "limit": 16}}}])
    research, training, default = config.platform_parent_queues()
    assert (research.name, training.name, default.name) == ("research", "training", "gpu-tenants")
    assert research.priority == 100 and research.resources.gpu.model_dump(by_alias=True) == {
        "quota": -1, "limit": -1, "overQuotaWeight": 1}
    assert (training.resources.gpu.quota, training.resources.gpu.limit) == (8, 16)
    assert config.parent_queue_names == ["research", "training", "gpu-tenants"]
    assert load().parent_queue_names == ["gpu-tenants"] and load().parent_queues == []


@pytest.mark.parametrize("queues,message", [
    ([{"name": "a", "resources": {"gpu": {"quota": 8, "limit": 4}}}],
     "parentQueues.0.resources.gpu\n  Value error, limit 4 is below quota 8; raise limit, or -1 for no limit"),
    ([{"name": "a", "resources": {"cpu": {"quota": -2}}}],
     "parentQueues.0.resources.cpu\n  Value error, quota -2 is negative; use -1 for unlimited, or 0 or more"),
    ([{"name": "a", "resources": {"memory": {"limit": -0.5}}}],
     "parentQueues.0.resources.memory\n  Value error, limit -0.5 is negative; use -1 for unlimited, or 0 or more"),
    (["a", "a"], "parentQueues: 'a' is declared more than once; declare each parent queue once"),
    (["Research"], "parentQueues.0.name\n  String should match pattern"),
])
def test_parent_queue_mistakes_name_the_field(queues, message):
    with pytest.raises(ValidationError) as error:
        load(parentQueues=queues)
    assert message in str(error.value)


def test_an_unlimited_limit_may_sit_above_any_quota():
    [queue, _] = load(parentQueues=[{"name": "a", "resources": {"gpu": {"quota": 64, "limit": -1}}}]).platform_parent_queues()
    assert (queue.resources.gpu.quota, queue.resources.gpu.limit) == (64, -1)
