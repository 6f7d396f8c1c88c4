"""The sharing registry: every mechanism has every part, and a mechanism's module is all that the
policy, the admission guard, the pools (node labels, device-plugin config, GPUs held by share) and
the attestation read of it (the fake mechanism below stands in for
Exclusive through `registry.registered` and changes what each of them does, nothing else edited)."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
import yaml

from gputenant.api import conditions as reasons
from gputenant.api.hub import GpuTenantSpec, SharingSpec
from gputenant.api.trust import BY_STRENGTH, SharingMode, Trust
from gputenant.attestation.promise import canary_pod, promise_of
from gputenant.config.pools import Pool, PoolMode
from gputenant.guard.rules import validate_pod
from gputenant.policy.choose import decide
from gputenant.pools.plan import desired_node_labels, device_plugin_config_data
from gputenant.pools.shares import pod_gpu_share
from gputenant.sharing import registry
from gputenant.sharing.base import WHOLE_GPU, Grant, Mechanism, PodRules, Promise, Refused, whole_units
from gputenant.sharing.exclusive import Exclusive
from kubeplane import builders

POOLS = {
    PoolMode.TIME_SLICING: builders.placed_pool("ts", "TimeSlicing", timeSlicing={"replicas": 4}),
    PoolMode.HAMI: builders.placed_pool("hami", "HAMi"),
    PoolMode.MIG: builders.placed_pool("mig", "MIG", mig={"config": "all-1g.10gb", "profiles": ["1g.10gb"]}),
    PoolMode.EXCLUSIVE: builders.placed_pool("whole", "Exclusive"),
}
TEXT_PARTS = ("unit", "isolation")


def missing_parts(mechanism: Mechanism) -> list[str]:
    """The parts a registered mechanism lacks: a mode of the API and of pools, its unit and what it
    isolates, a spec block the API has, and its own grant, fit check and promise on a pool of its mode."""
    missing = [part for part in ("mode", "pool_mode") if not hasattr(mechanism, part)]
    missing += [part for part in TEXT_PARTS if not getattr(mechanism, part, "")]
    if mechanism.spec_block is not None:
        wire, attribute = mechanism.spec_block
        field = SharingSpec.model_fields.get(attribute)
        if field is None or field.alias != wire:
            missing.append(f"spec_block {mechanism.spec_block} (no such field of spec.sharing)")
    if missing:
        return missing
    pool = Pool.model_validate(POOLS[mechanism.pool_mode])
    spec = builders.tenant_spec(Trust.UNTRUSTED if mechanism.mode in (SharingMode.MIG, SharingMode.EXCLUSIVE)
                                else Trust.TRUSTED, mechanism.mode, quota=1, limit=2)
    if not isinstance(mechanism.grant(spec, pool, 1, 2), Grant):
        missing.append("grant")
    if not isinstance(mechanism.promise(pool), Promise):
        missing.append("promise")
    return missing


@pytest.mark.parametrize("mode", list(registry.MECHANISMS), ids=lambda mode: mode.value)
def test_every_registered_mechanism_has_every_part(mode):
    assert missing_parts(registry.mechanism(mode)) == []


def test_the_registry_serves_every_mode_of_the_api_and_of_pools_in_strength_order():
    assert tuple(registry.MECHANISMS) == BY_STRENGTH
    assert set(BY_STRENGTH) == set(SharingMode) - {SharingMode.AUTO}
    assert {mechanism.pool_mode for mechanism in registry.MECHANISMS.values()} == set(PoolMode)


def test_the_check_finds_a_mechanism_without_its_unit_or_with_a_block_the_api_lacks():
    class Unitless(Exclusive):
        unit = ""

    class WrongBlock(Exclusive):
        spec_block = ("exclusive", "exclusive")

    assert missing_parts(Unitless()) == ["unit"]
    assert missing_parts(WrongBlock()) == ["spec_block ('exclusive', 'exclusive') (no such field of spec.sharing)"]


def test_a_mechanism_without_grant_or_promise_cannot_be_registered():
    class NoPromise(Mechanism):
        mode = SharingMode.EXCLUSIVE
        pool_mode = PoolMode.EXCLUSIVE
        unit, isolation = "GPUs", "everything"

        def grant(self, spec, pool, quota_gpus, limit_gpus):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="promise"):
        NoPromise()  # type: ignore[abstract]


class GpuPairs(Mechanism):
    """A fake mechanism, a test double of a mechanism nobody ships: whole GPUs granted in pairs,
    one pair per container at most."""

    mode = SharingMode.EXCLUSIVE
    pool_mode = PoolMode.EXCLUSIVE
    unit = "GPU pairs"
    isolation = "everything, two GPUs at a time"
    per_container_why = " (a pair is the unit)"

    def grant(self, spec: GpuTenantSpec, pool: Pool, quota_gpus: float, limit_gpus: float) -> Grant:
        pairs = whole_units(limit_gpus, Fraction(1, 2), "gpu.limit", f"GpuPairs pool {pool.name}", "pairs")
        if pairs == 0:
            raise Refused(reasons.FRACTION_NOT_GRANTABLE, "gpu.limit holds no pair; set gpu.limit to 2")
        return Grant(quota={f"requests.{WHOLE_GPU}": str(2 * pairs)}, queue_quota=Fraction(quota_gpus),
                     queue_limit=Fraction(2 * pairs),
                     pod_rules=PodRules(gpu_resources=(WHOLE_GPU,), max_per_pod={WHOLE_GPU: 2 * pairs},
                                        max_per_container={WHOLE_GPU: 2}),
                     summary=f"up to {pairs} GPU pairs")

    def promise(self, pool: Pool) -> Promise:
        return Promise(pool.name, pool.mode.value, 2, pool.gpu_memory_mi_b, 0.9, True, {WHOLE_GPU: "2"},
                       "two whole GPUs")

    def node_labels(self, pool: Pool) -> dict[str, str]:
        return {"example.com/gpu-pairs": "on"}

    def device_plugin_config(self, pool: Pool) -> dict:
        return {"version": "v1", "flags": {"migStrategy": "none"}}

    def whole_resource_share(self, pool: Pool, amount: Decimal) -> Decimal:
        return amount / 2


def test_a_mechanism_is_its_module_the_policy_guard_and_attestation_read_only_the_registry():
    config = builders.operator_config(POOLS[PoolMode.EXCLUSIVE])
    spec = builders.tenant_spec(Trust.UNTRUSTED, SharingMode.EXCLUSIVE, quota=2, limit=4)
    pool = config.pools[0]
    before = decide("team-a", spec, config)
    assert missing_parts(GpuPairs()) == []
    with registry.registered(GpuPairs()):
        decision = decide("team-a", spec, config)
        assert decision.possible and decision.message.endswith("up to 2 GPU pairs")
        assert decision.quota == {f"requests.{WHOLE_GPU}": "4"}
        odd = decide("team-a", builders.tenant_spec(Trust.UNTRUSTED, SharingMode.EXCLUSIVE, quota=1, limit=1),
                     config)
        assert not odd.possible and "GpuPairs pool whole grants only whole pairs" in odd.message
        three = builders.pod(builders.container("main", {WHOLE_GPU: 3}),
                             metadata={"name": "p", "namespace": "tenant-team-a"})
        refused = [v.message for v in validate_pod(three, "team-a", Trust.UNTRUSTED, decision, config=config)]
        assert "container main requests 3 nvidia.com/gpu; at most 2 per container (a pair is the unit)" in refused
        assert promise_of(pool).description == "two whole GPUs"
        assert desired_node_labels(pool) == {"example.com/gpu-pairs": "on"}
        assert yaml.safe_load(device_plugin_config_data(config)["whole"]) == {"version": "v1",
                                                                              "flags": {"migStrategy": "none"}}
        held = builders.pod(builders.container("main", {WHOLE_GPU: 2}))
        assert pod_gpu_share(held, pool) == 1.0
        assert canary_pod(pool, "gpu-tenant-operator", "canary:1")["spec"]["containers"][0]["resources"][
            "limits"][WHOLE_GPU] == "2"
    assert decide("team-a", spec, config) == before
    assert promise_of(pool).description.startswith("one whole GPU")
    assert desired_node_labels(pool) == {} and device_plugin_config_data(config) == {}
