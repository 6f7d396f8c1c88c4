"""decide() on amounts: pool choice by name, model, replicas and MIG profile; capacity and limits;
time-slicing, MIG and HAMi fractions; the quota a tenant's own control plane needs. The trust x
mode x pool matrix and the fallbacks are in test_policy.py."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from gputenant.api.v1alpha1 import GpuTenantSpec, SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from kubeplane import builders

EXAMPLE = OperatorConfig.load(Path(__file__).resolve().parents[2] / "examples" / "config.yaml")
TS, HAMI, EXCL = SharingMode.TIME_SLICING, SharingMode.HAMI, SharingMode.EXCLUSIVE
TRUSTED, INTERNAL, UNTRUSTED = Trust.TRUSTED, Trust.INTERNAL, Trust.UNTRUSTED
spec = builders.tenant_spec
config = builders.operator_config


def pool(name: str, mode: str, model: str = "H100-80GB", memory: int = 81559, **fields) -> dict:
    return builders.pool(name, mode, model, memory, **fields)


# -- pool choice ---------------------------------------------------------------------------------


def test_named_pool_must_exist():
    decision = decide("x", spec(TRUSTED, quota=1, pool="gone"), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "PoolNotFound")
    assert "gpu.pool gone" in decision.message and "a100-timeslice (TimeSlicing, A100-80GB)" in decision.message


def test_named_pool_must_have_the_model():
    decision = decide("x", spec(TRUSTED, quota=1, pool="a100-timeslice", model="H100-80GB"), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "PoolModelMismatch")


def test_time_slicing_replicas_pick_the_pool():
    two_pools = config(
        pool("ts4", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 4}),
        pool("ts8", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 8}),
    )
    decision = decide("x", spec(TRUSTED, sharing={"timeSlicing": {"replicas": 8}}, quota=1), two_pools)
    assert (decision.pool.name, decision.quota) == ("ts8", {"requests.nvidia.com/gpu": "8"})
    refused = decide("x", spec(TRUSTED, sharing={"timeSlicing": {"replicas": 16}}, quota=1), two_pools)
    assert (refused.possible, refused.reason) == (False, "NoPoolForMode")
    assert "sharing.timeSlicing.replicas 16" in refused.message


def test_mig_profile_picks_the_pool_that_offers_it():
    decision = decide("x", spec(UNTRUSTED, sharing={"mig": {"profile": "2g.20gb"}}, quota=1), EXAMPLE)
    assert decision.pool.name == "h100-mig-balanced"
    assert decision.quota == {"requests.nvidia.com/mig-2g.20gb": "3"}


def test_mig_profile_of_another_gpu_is_not_on_gpu():
    decision = decide("x", spec(UNTRUSTED, sharing={"mig": {"profile": "1g.5gb"}}, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "ProfileNotOnGPU")
    assert "1g.5gb does not exist on H100-80GB" in decision.message
    assert decision.message.count("H100-80GB offers") == 1


def test_mig_profile_on_the_gpu_but_in_no_pool():
    decision = decide("x", spec(UNTRUSTED, sharing={"mig": {"profile": "4g.40gb"}}, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "ProfileNotInPool")


def test_named_mig_pool_without_the_profile():
    decision = decide("x", spec(UNTRUSTED, sharing={"mig": {"profile": "3g.40gb"}}, quota=1, pool="h100-mig-small"), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "ProfileNotInPool")
    assert "pool h100-mig-small" in decision.message


# -- capacity ------------------------------------------------------------------------------------


def test_limit_above_pool_gpus():
    decision = decide("x", spec(UNTRUSTED, EXCL, quota=1, limit=17), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "QuotaAbovePoolCapacity")
    assert "16 GPUs of pool h100-exclusive" in decision.message
    assert decide("x", spec(UNTRUSTED, EXCL, quota=1, limit=16), EXAMPLE).possible


def test_limit_above_the_instances_of_a_standard_mig_layout():
    """all-balanced holds one 2g.20gb per GPU: 4 GPUs hold 4, and limit 2 would be 6."""
    decision = decide("x", spec(UNTRUSTED, sharing={"mig": {"profile": "2g.20gb"}}, quota=1, limit=2), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "QuotaAbovePoolCapacity")
    assert "6 2g.20gb instances" in decision.message and "has only 4" in decision.message


def test_pool_without_gpu_count_is_not_capacity_checked():
    decision = decide("x", spec(TRUSTED, quota=100), config(pool("e", "Exclusive")))
    assert decision.quota == {"requests.nvidia.com/gpu": "100"}


# -- fractions and whole units -------------------------------------------------------------------


def test_exclusive_needs_whole_gpus():
    decision = decide("x", spec(TRUSTED, EXCL, validate=False, quota=1.5), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "FractionNotGrantable")
    assert "set gpu.quota to 1 (1 GPUs) or 2 (2 GPUs)" in decision.message


def test_time_slicing_grants_quarters_on_four_replicas():
    assert decide("x", spec(TRUSTED, quota=0.25), EXAMPLE).quota == {"requests.nvidia.com/gpu": "1"}
    decision = decide("x", spec(TRUSTED, quota=0.3), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "FractionNotGrantable")
    assert "gpu.limit 0.3 is 1.2 replicas" in decision.message
    assert "set gpu.limit to 0.25 (1 replicas) or 0.5 (2 replicas)" in decision.message


def test_time_slicing_quota_may_be_a_fraction_of_a_replica_for_kai():
    decision = decide("x", spec(TRUSTED, quota=0.1, limit=0.5), EXAMPLE)
    assert (decision.queue.quota, decision.queue.limit) == (0.4, 2)


def test_decimal_check_uses_what_the_tenant_wrote():
    """0.3 is exactly 3 of 10 replicas; 0.1 + 0.2 is the float 0.30000000000000004, which is not."""
    ten = config(pool("ts10", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 10}))
    assert decide("x", spec(TRUSTED, quota=0.3), ten).quota == {"requests.nvidia.com/gpu": "3"}
    assert decide("x", spec(TRUSTED, quota=0.1 + 0.2), ten).reason == "FractionNotGrantable"


def test_sevenths_of_a_gpu_are_mig_instances():
    decision = decide("x", spec(UNTRUSTED, quota=3 / 7), EXAMPLE)
    assert decision.quota == {"requests.nvidia.com/mig-1g.10gb": "3"}
    assert (decision.queue.quota, decision.queue.limit) == (3, 3)
    refused = decide("x", spec(UNTRUSTED, quota=0.4285), EXAMPLE)
    assert refused.reason == "FractionNotGrantable"
    assert "0.2857142857142857 (2 1g.10gb instances) or 0.42857142857142855 (3 1g.10gb instances)" in refused.message


def test_hami_shares_must_be_whole():
    decision = decide("x", spec(INTERNAL, quota=0.3), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "FractionNotGrantable")
    assert "1.2 shares" in decision.message


def test_quantities_are_canonical():
    decision = decide("x", spec(TRUSTED, EXCL, quota=2.0, limit=8.0), EXAMPLE)
    assert decision.quota == {"requests.nvidia.com/gpu": "8"}
    assert (repr(decision.queue.quota), repr(decision.queue.limit)) == ("2", "8")


def test_limit_below_quota_is_refused():
    decision = decide("x", spec(TRUSTED, validate=False, quota=2, limit=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "LimitBelowQuota")
    assert "gpu.limit 1 is below gpu.quota 2" in decision.message


# -- mechanism details ---------------------------------------------------------------------------


def test_time_slicing_renamed_resource_and_container_rule():
    renamed = config(
        pool("ts", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 2, "renameByDefault": True, "failRequestsGreaterThanOne": False})
    )
    decision = decide("x", spec(TRUSTED, quota=1, limit=3), renamed)
    assert decision.quota == {"requests.nvidia.com/gpu.shared": "6"}
    assert decision.pod_rules.gpu_resources == ("nvidia.com/gpu.shared",)
    assert decision.pod_rules.max_per_container == {}
    default = decide("x", spec(TRUSTED, quota=1), EXAMPLE)
    assert default.pod_rules.max_per_container == {"nvidia.com/gpu": 1}


def test_hami_is_kai_fractions_of_one_share_counted_by_the_queue():
    decision = decide("x", spec(INTERNAL, quota=1, limit=2), EXAMPLE)
    rules = decision.pod_rules
    assert decision.quota == {"requests.nvidia.com/gpu": "0"}
    assert (decision.queue.quota, decision.queue.limit) == (1, 2)
    assert rules.gpu_resources == () and rules.max_per_pod == {}
    assert (rules.fraction_share, rules.max_fraction) == (Fraction(1, 4), Fraction(3, 4))
    assert (rules.allow_fraction_annotations, rules.forbid_isolation_overrides) == (True, True)
    assert "8 KAI GPU fractions of 0.25 (5758 MiB each)" in decision.message


@pytest.mark.parametrize("core_percent,limit,largest", [(30, 0.3, Fraction(3, 10)), (30, 1.2, Fraction(9, 10)),
                                                       (50, 1, Fraction(1, 2)), (10, 0.5, Fraction(1, 2))])
def test_hami_largest_fraction_is_below_one_gpu_and_within_the_limit(core_percent, limit, largest):
    tenant = spec(INTERNAL, sharing={"hami": {"corePercent": core_percent}}, quota=limit)
    assert decide("x", tenant, EXAMPLE).pod_rules.max_fraction == largest


def test_hami_share_of_a_whole_gpu_is_not_a_fraction():
    decision = decide("x", spec(INTERNAL, sharing={"hami": {"corePercent": 100}}, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "FractionNotGrantable")
    assert "at most 50" in decision.message and "Exclusive" in decision.message


def test_hami_quota_must_be_whole_shares_too():
    decision = decide("x", spec(INTERNAL, quota=0.3, limit=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "FractionNotGrantable")
    assert "gpu.quota 0.3" in decision.message


def test_hami_share_finer_than_the_split_count():
    decision = decide("x", spec(INTERNAL, sharing={"hami": {"corePercent": 5}}, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "HamiShareTooSmall")
    assert "20 shares per GPU" in decision.message and "at least 10" in decision.message


def test_hami_memory_above_one_gpu():
    decision = decide("x", spec(INTERNAL, sharing={"hami": {"memoryMiB": 30000}}, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "MemoryAboveGpu")
    assert "more than one GPU of pool l4-hami has (23034 MiB)" in decision.message


def test_hami_memory_is_the_shares_portion_of_the_gpu():
    """KAI caps a fraction's memory at its portion of the GPU: memoryMiB may only restate it."""
    same = decide("x", spec(INTERNAL, sharing={"hami": {"memoryMiB": 5758}}, quota=1), EXAMPLE)
    assert same.possible, same.message
    other = decide("x", spec(INTERNAL, sharing={"hami": {"memoryMiB": 8000}}, quota=1), EXAMPLE)
    assert (other.possible, other.reason) == (False, "FractionNotGrantable")
    assert "5758 MiB for corePercent 25" in other.message and "set corePercent to 35" in other.message


def test_mig_single_strategy_counts_instances_as_gpus():
    single = config(pool("s", "MIG", mig={"strategy": "single", "config": "all-3g.40gb", "profiles": ["3g.40gb"]}))
    decision = decide("x", spec(UNTRUSTED, quota=1, limit=2), single)
    assert decision.quota == {"requests.nvidia.com/gpu": "4"}
    assert (decision.queue.quota, decision.queue.limit) == (2, 4)
    assert decision.pod_rules.gpu_resources == ("nvidia.com/gpu",)


def test_mig_default_profile_of_the_pool():
    decision = decide("x", spec(UNTRUSTED, quota=1, pool="h100-mig-balanced"), EXAMPLE)
    assert decision.quota == {"requests.nvidia.com/mig-3g.40gb": "2"}


def test_queue_takes_name_and_placement_from_the_spec():
    decision = decide("team-a", spec(INTERNAL, quota=1, parentQueue="research", priority=300, overQuotaWeight=4), EXAMPLE)
    queue = decision.queue
    assert (queue.name, queue.parent, queue.priority, queue.over_quota_weight) == ("team-a", "research", 300, 4)


def test_blocks_of_another_mechanism_are_reported_as_ignored():
    decision = decide("x", spec(UNTRUSTED, sharing={"hami": {"corePercent": 50}}, quota=1), EXAMPLE)
    assert decision.warnings == ("sharing.hami is ignored: the tenant's GPUs are shared by MIG",)


def test_zero_gpus_needs_no_pool_and_blocks_gpus():
    decision = decide("team-a", spec(UNTRUSTED), config())
    assert (decision.possible, decision.reason, decision.mode, decision.pool) == (True, "NoGpuRequested", None, None)
    assert decision.quota == {"requests.nvidia.com/gpu": "0"}
    assert (decision.queue.quota, decision.queue.limit) == (0, 0)
    assert decision.pod_rules.gpu_resources == ()


@pytest.mark.parametrize("quotas, needed, field", [
    ({"cpu": "100m"}, "2", "quotas.cpu 100m"),
    ({"memory": "1Gi"}, "2Gi", "quotas.memory 1Gi"),
])
def test_quota_below_the_tenants_own_control_plane_is_refused_with_both_numbers(quotas, needed, field):
    tenant = spec(TRUSTED, quota=1).model_copy(
        update={"quotas": GpuTenantSpec.model_validate({"trust": "Trusted", "owners": [{"kind": "Group", "name": "a"}],
                                                        "quotas": quotas}).quotas})
    decision = decide("x", tenant, EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "QuotaBelowControlPlane")
    assert field in decision.message and f"limited to {needed}" in decision.message
    assert "vcluster.resources.limits" in decision.message


def test_quota_that_holds_the_control_plane_exactly_is_granted():
    tenant = GpuTenantSpec.model_validate({"trust": "Trusted", "owners": [{"kind": "Group", "name": "a"}],
                                           "quotas": {"cpu": "2", "memory": "2Gi"}})
    assert decide("x", tenant, EXAMPLE).possible
