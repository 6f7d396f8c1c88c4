"""decide(): the whole trust x mode x pool matrix, fallbacks, trust levels of pools, parent queues,
and a sweep that never raises; amounts, capacity and fractions are in test_policy_amounts.py."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import yaml

from gputenant.api.trust import allowed_modes
from gputenant.api.v1alpha1 import GpuTenant, SharingMode, Trust
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


spec = builders.tenant_spec
config = builders.operator_config


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
