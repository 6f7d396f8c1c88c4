"""decide(): the whole trust x mode x pool matrix, fallbacks, pool choice, capacity, fractions, pod rules."""

from __future__ import annotations

import itertools
import re
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from gputenant.api.trust import allowed_modes
from gputenant.api.v1alpha1 import GpuTenant, GpuTenantSpec, SharingMode, Trust
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from kubeplane import builders

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = OperatorConfig.load(ROOT / "examples" / "config.yaml")

TS, HAMI, MIG, EXCL, AUTO = (
    SharingMode.TIME_SLICING,
    SharingMode.HAMI,
    SharingMode.MIG,
    SharingMode.EXCLUSIVE,
    SharingMode.AUTO,
)
TRUSTED, INTERNAL, UNTRUSTED = Trust.TRUSTED, Trust.INTERNAL, Trust.UNTRUSTED


def spec(trust: Trust, mode: SharingMode = AUTO, *, validate: bool = True, sharing: dict | None = None, **gpu) -> GpuTenantSpec:
    """A tenant spec as the API accepts it; validate=False builds one the API would reject (the policy must still cope)."""
    amounts = {key: gpu.pop(key) for key in ("quota", "limit") if key in gpu and not validate}
    body = {
        "trust": TRUSTED.value if not validate else trust.value,
        "owners": [{"kind": "Group", "name": "team-a"}],
        "gpu": gpu,
        "sharing": {"mode": AUTO.value if not validate else mode.value, **(sharing or {})},
    }
    parsed = GpuTenantSpec.model_validate(body)
    if validate:
        return parsed
    return parsed.model_copy(
        update={"trust": trust, "gpu": parsed.gpu.model_copy(update=amounts), "sharing": parsed.sharing.model_copy(update={"mode": mode})}
    )


def config(*pools: dict, **extra) -> OperatorConfig:
    return OperatorConfig.model_validate({"pools": list(pools), **extra})


def pool(name: str, mode: str, model: str = "H100-80GB", memory: int = 81559, **fields) -> dict:
    return builders.pool(name, mode, model, memory, **fields)


# -- the matrix: every trust x mode x (example pool or none), quota 1 and limit 2 -----------------

GRANT_ON = {
    "a100-timeslice": (TS, {"requests.nvidia.com/gpu": "8"}, 4, 8),
    "l4-hami": (HAMI, {"requests.nvidia.com/gpu": "0"}, 1, 2),
    "h100-mig-small": (MIG, {"requests.nvidia.com/mig-1g.10gb": "14"}, 7, 14),
    "h100-mig-balanced": (MIG, {"requests.nvidia.com/mig-3g.40gb": "4"}, 6, 12),
    "h100-exclusive": (EXCL, {"requests.nvidia.com/gpu": "2"}, 1, 2),
}
"""What quota 1 / limit 2 GPU equivalents are on each pool of examples/config.yaml."""

FIRST_POOL_OF = {TS: "a100-timeslice", HAMI: "l4-hami", MIG: "h100-mig-small", EXCL: "h100-exclusive"}
NOT_SERVING = {"h100-mig-small": {TRUSTED}}
"""Pools of examples/config.yaml whose trustLevels leave a trust level out."""
AUTO_MODE = {TRUSTED: TS, INTERNAL: HAMI, UNTRUSTED: MIG}
POOL_MODES_FOR_AUTO = {TRUSTED: {TS, HAMI, MIG, EXCL}, INTERNAL: {HAMI, MIG, EXCL}, UNTRUSTED: {MIG, EXCL}}
REFUSED_MODES = {(INTERNAL, TS), (UNTRUSTED, TS), (UNTRUSTED, HAMI)}


def expected(trust: Trust, mode: SharingMode, pool_name: str | None) -> tuple[str, str | None]:
    """(reason, pool) the policy must give for quota 1 / limit 2 on the example config."""
    if (trust, mode) in REFUSED_MODES:
        return "ModeNotAllowedForTrust", None
    if pool_name is None:
        if mode is AUTO:
            return "ChosenFromTrust", FIRST_POOL_OF[AUTO_MODE[trust]]
        serving = [name for name, (pool_mode, *_) in GRANT_ON.items()
                   if pool_mode is mode and trust not in NOT_SERVING.get(name, ())]
        return "ExplicitMode", serving[0]
    pool_mode = GRANT_ON[pool_name][0]
    if mode is AUTO:
        if pool_mode not in POOL_MODES_FOR_AUTO[trust]:
            return "PoolModeMismatch", None
        if trust in NOT_SERVING.get(pool_name, ()):
            return "PoolTrustMismatch", None
        return ("ChosenFromTrust" if pool_mode is AUTO_MODE[trust] else "FallbackToStrongerMode"), pool_name
    if pool_mode is not mode:
        return "PoolModeMismatch", None
    return ("PoolTrustMismatch", None) if trust in NOT_SERVING.get(pool_name, ()) else ("ExplicitMode", pool_name)


MATRIX = list(itertools.product(Trust, SharingMode, [None, *GRANT_ON]))


@pytest.mark.parametrize("trust,mode,pool_name", MATRIX, ids=lambda v: getattr(v, "value", v) or "any-pool")
def test_matrix(trust, mode, pool_name):
    allowed = mode is AUTO or mode in allowed_modes(trust)
    tenant = spec(trust, mode, validate=allowed, quota=1, limit=2, pool=pool_name)
    decision = decide("team-a", tenant, EXAMPLE)
    reason, granted_pool = expected(trust, mode, pool_name)

    assert decision.reason == reason, decision.message
    assert decision.trust is trust
    if granted_pool is None:
        assert not decision.possible
        assert (decision.quota, decision.queue, decision.pod_rules, decision.pool) == ({}, None, None, None)
        assert decision.message
        return
    pool_mode, quota, queue_quota, queue_limit = GRANT_ON[granted_pool]
    assert decision.possible
    assert (decision.mode, decision.pool.name) == (pool_mode, granted_pool)
    assert decision.quota == quota
    assert (decision.queue.quota, decision.queue.limit) == (queue_quota, queue_limit)
    whole_gpus_allowed = {key.split(".", 1)[1]: int(value) for key, value in quota.items() if value != "0"}
    assert decision.pod_rules.max_per_pod == whole_gpus_allowed
    assert decision.pod_rules.forbid_isolation_overrides is (trust is not TRUSTED)
    assert decision.pod_rules.allow_fraction_annotations is (pool_mode in (TS, HAMI))
    assert (decision.pod_rules.fraction_share is not None) is (pool_mode is HAMI)


def test_matrix_covers_every_outcome():
    reasons = {expected(*combination)[0] for combination in MATRIX}
    assert reasons == {"ChosenFromTrust", "FallbackToStrongerMode", "ExplicitMode", "PoolModeMismatch",
                       "ModeNotAllowedForTrust", "PoolTrustMismatch"}


# -- the example tenants get what their comments say ----------------------------------------------


@pytest.mark.parametrize(
    "file,mode,pool_name,quota,queue",
    [
        ("trusted.yaml", TS, "a100-timeslice", {"requests.nvidia.com/gpu": "16"}, (8, 16)),
        (
            "internal.yaml",
            HAMI,
            "l4-hami",
            {"requests.nvidia.com/gpu": "0"},
            (2, 3),
        ),
        ("untrusted.yaml", MIG, "h100-mig-balanced", {"requests.nvidia.com/mig-3g.40gb": "4"}, (6, 12)),
    ],
)
def test_example_tenants(file, mode, pool_name, quota, queue):
    tenant = GpuTenant.from_body(yaml.safe_load((ROOT / "examples" / "tenants" / file).read_text()))
    decision = decide(tenant.name, tenant.spec, EXAMPLE)
    assert (decision.possible, decision.mode, decision.pool.name) == (True, mode, pool_name), decision.message
    assert decision.quota == quota
    assert (decision.queue.quota, decision.queue.limit) == queue
    assert decision.warnings == ()


# -- mode and trust ------------------------------------------------------------------------------


def test_explicit_weaker_mode_is_refused_with_the_allowed_ones():
    decision = decide("x", spec(UNTRUSTED, HAMI, validate=False, quota=1), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "ModeNotAllowedForTrust")
    assert "sharing.mode HAMi" in decision.message and "MIG or Exclusive" in decision.message


def test_config_mapping_auto_to_a_weaker_mode_is_refused():
    """Load-time validation rejects such a config; a config built without validation still gets no grant."""
    weak = EXAMPLE.model_copy(update={"trust_modes": {**EXAMPLE.trust_modes, INTERNAL: TS}})
    decision = decide("x", spec(INTERNAL, quota=1), weak)
    assert (decision.possible, decision.reason) == (False, "ModeNotAllowedForTrust")
    assert "trustModes.Internal" in decision.message and "HAMi, MIG or Exclusive" in decision.message


def test_auto_uses_the_configured_mode():
    strict = config(*[p.model_dump(by_alias=True) for p in EXAMPLE.pools], trustModes={"Trusted": "Exclusive"})
    decision = decide("x", spec(TRUSTED, quota=1), strict)
    assert (decision.reason, decision.mode, decision.pool.name) == ("ChosenFromTrust", EXCL, "h100-exclusive")


# -- fallbacks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pools,mode,pool_name",
    [
        ([pool("h", "HAMi", "L4", 23034), pool("m", "MIG", mig={"config": "all-1g.10gb", "profiles": ["1g.10gb"]})], HAMI, "h"),
        ([pool("m", "MIG", mig={"config": "all-1g.10gb", "profiles": ["1g.10gb"]}), pool("e", "Exclusive")], MIG, "m"),
        ([pool("e", "Exclusive")], EXCL, "e"),
    ],
)
def test_auto_falls_back_to_the_next_stronger_mechanism_with_a_pool(pools, mode, pool_name):
    decision = decide("x", spec(TRUSTED, quota=1), config(*pools))
    assert (decision.possible, decision.reason, decision.mode, decision.pool.name) == (True, "FallbackToStrongerMode", mode, pool_name)
    assert "no TimeSlicing pool" in decision.message and mode.value in decision.message


def test_fallback_follows_the_gpu_model_to_a_pool_that_serves_the_trust():
    decision = decide("x", spec(TRUSTED, quota=1, model="H100-80GB"), EXAMPLE)
    assert (decision.reason, decision.mode, decision.pool.name) == ("FallbackToStrongerMode", MIG, "h100-mig-balanced")
    assert "gpu.model H100-80GB" in decision.message


# -- pools serve the trust levels they declare ----------------------------------------------------

MIG_SMALL = {"config": "all-1g.10gb", "profiles": ["1g.10gb"]}


def test_a_trusted_tenant_never_lands_on_a_customers_mig_pool():
    """The attack of issue 12 (class 5): a Trusted tenant asks for the model only the customers' pool has."""
    customers = config(pool("a100", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 4}),
                       pool("customers", "MIG", mig=MIG_SMALL, trustLevels=["Untrusted"]))
    decision = decide("x", spec(TRUSTED, quota=1, model="H100-80GB"), customers)
    assert (decision.possible, decision.reason) == (False, "PoolTrustMismatch")
    assert "customers (MIG, H100-80GB)" in decision.message and "trustLevels" in decision.message


def test_auto_passes_over_pools_of_another_trust_to_a_stronger_one_that_serves_it():
    pools = config(pool("customers", "MIG", mig=MIG_SMALL, trustLevels=["Untrusted"]), pool("whole", "Exclusive"))
    decision = decide("x", spec(INTERNAL, quota=1), pools)
    assert (decision.reason, decision.mode, decision.pool.name) == ("FallbackToStrongerMode", EXCL, "whole")


@pytest.mark.parametrize("trust", [TRUSTED, INTERNAL])
def test_naming_a_pool_of_another_trust_is_refused_naming_the_field(trust):
    pools = config(pool("customers", "MIG", mig=MIG_SMALL, trustLevels=["Untrusted"]),
                   pool("internal-mig", "MIG", mig=MIG_SMALL))
    decision = decide("x", spec(trust, MIG, quota=1, pool="customers"), pools)
    assert (decision.possible, decision.reason) == (False, "PoolTrustMismatch")
    assert decision.message.startswith("gpu.pool customers serves Untrusted tenants")
    assert "internal-mig (MIG, H100-80GB)" in decision.message


def test_an_unset_trust_levels_serves_every_trust_the_mode_allows():
    pools = config(pool("m", "MIG", mig=MIG_SMALL), pool("t", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 2}))
    assert pools.pool("m").serves == (TRUSTED, INTERNAL, UNTRUSTED)
    assert pools.pool("t").serves == (TRUSTED,)


def test_a_pool_may_not_declare_a_trust_its_mode_isolates_too_weakly():
    with pytest.raises(ValueError, match=r"pool 't': trustLevels has Untrusted, but TimeSlicing isolates Untrusted tenants too weakly"):
        config(pool("t", "TimeSlicing", "A100-80GB", 81920, timeSlicing={"replicas": 2}, trustLevels=["Untrusted"]))


# -- parent queues --------------------------------------------------------------------------------

def test_a_parent_queue_outside_the_platforms_list_is_refused():
    platform = config(pool("e", "Exclusive"), parentQueues=["research", "training"])
    decision = decide("x", spec(INTERNAL, quota=1, parentQueue="team-b"), platform)
    assert (decision.possible, decision.reason) == (False, "ParentQueueNotAllowed")
    assert decision.message.startswith("gpu.parentQueue team-b is not one of the platform's parent queues (research, training")
    assert decide("x", spec(INTERNAL, quota=1, parentQueue="training"), platform).queue.parent == "training"


def test_every_queue_gets_a_parent_the_default_when_the_tenant_names_none():
    """KAI v0.12 schedules nothing from a top-level queue, so no tenant Queue is one."""
    platform = config(pool("e", "Exclusive"), defaultParentQueue="tenants")
    assert decide("x", spec(INTERNAL, quota=1), platform).queue.parent == "tenants"
    assert decide("x", spec(INTERNAL, quota=1, parentQueue="research"), platform).queue.parent == "research"
    assert decide("x", spec(INTERNAL, quota=0), platform).queue.parent == "tenants"
    assert decide("x", spec(INTERNAL, quota=1), config(pool("e", "Exclusive"))).queue.parent == "gpu-tenants"


def test_the_default_parent_queue_is_allowed_beside_the_declared_ones():
    platform = config(pool("e", "Exclusive"), parentQueues=["research"], defaultParentQueue="tenants")
    assert decide("x", spec(INTERNAL, quota=1, parentQueue="tenants"), platform).queue.parent == "tenants"
    refused = decide("x", spec(INTERNAL, quota=1, parentQueue="sales"), platform)
    assert refused.message.startswith("gpu.parentQueue sales is not one of the platform's parent queues (research, operator")


@pytest.mark.parametrize("tenant", ["research", "gpu-tenants"])
def test_a_tenant_whose_queue_would_be_a_parent_queue_is_refused(tenant):
    """Its Queue would overwrite the department (same name, same field manager) and be its own parent."""
    decision = decide(tenant, spec(INTERNAL, quota=1), config(pool("e", "Exclusive"), parentQueues=["research"]))
    assert (decision.possible, decision.reason) == (False, "QueueNameIsParentQueue")
    assert decision.message == (f"the tenant's KAI Queue {tenant} would be the platform's parent queue of that name "
                                "(operator config parentQueues, defaultParentQueue); choose another tenant name")


def test_fallback_never_goes_weaker():
    decision = decide("x", spec(UNTRUSTED, quota=1), config(pool("h", "HAMi", "L4", 23034), pool("t", "TimeSlicing", timeSlicing={"replicas": 4})))
    assert (decision.possible, decision.reason) == (False, "NoPoolForMode")
    assert "MIG or Exclusive" in decision.message


def test_explicit_mode_does_not_fall_back():
    decision = decide("x", spec(TRUSTED, TS, quota=1, model="H100-80GB"), EXAMPLE)
    assert (decision.possible, decision.reason) == (False, "NoPoolForMode")
    assert "gpu.model H100-80GB" in decision.message


def test_no_pools_at_all():
    decision = decide("x", spec(INTERNAL, quota=1), config())
    assert (decision.possible, decision.reason) == (False, "NoPoolForMode")
    assert "pools: none" in decision.message


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


# -- robustness ----------------------------------------------------------------------------------

SWEEP_AMOUNTS = [0, 0.1, 0.25, 0.3, 3 / 7, 0.5, 1, 1.5, 2, 17, 10000]


@pytest.mark.parametrize("trust", list(Trust))
def test_decide_never_raises_and_always_explains(trust):
    for mode, amount, pool_name in itertools.product(SharingMode, SWEEP_AMOUNTS, [None, "gone", *GRANT_ON]):
        allowed = mode is AUTO or mode in allowed_modes(trust)
        decision = decide("x", spec(trust, mode, validate=allowed and amount == int(amount), quota=amount, pool=pool_name), EXAMPLE)
        assert re.fullmatch(r"(?:[A-Z][a-z]*|GPU)+", decision.reason), decision.reason
        assert decision.message
        assert decision.possible == (decision.queue is not None)


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
