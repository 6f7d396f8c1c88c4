"""GPU-hours by share and their cost (pools/shares.py, usage/accounting.py): pure, no cluster.
Tenants sharing one GPU are charged their parts and their costs add up to the GPU's."""

from __future__ import annotations

import csv
import io

import pytest
from pydantic import ValidationError

from gputenant.commands.usage import period_of
from gputenant.config.models import Accounting, OperatorConfig
from gputenant.config.pools import Pool
from gputenant.pools.shares import placements, pod_gpu_share, tenant_shares
from gputenant.usage.accounting import chargeback_csv, charges, format_chargeback
from gputenant.usage.prometheus import chargeback_step

HAMI = Pool.model_validate({"name": "l4-hami", "mode": "HAMi", "gpuModel": "L4", "gpuMemoryMiB": 23034,
                            "hami": {"splitCount": 4}})
TIME_SLICED = Pool.model_validate({"name": "a100-ts", "mode": "TimeSlicing", "gpuModel": "A100-80GB",
                                   "gpuMemoryMiB": 81920, "timeSlicing": {"replicas": 3}})
MIG = Pool.model_validate({"name": "h100-mig", "mode": "MIG", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559,
                           "mig": {"config": "all-balanced", "profiles": ["1g.10gb", "3g.40gb"]}})
MIG_SINGLE = Pool.model_validate({"name": "h100-mig-1g", "mode": "MIG", "gpuModel": "H100-80GB",
                                  "gpuMemoryMiB": 81559, "mig": {"strategy": "single", "config": "all-1g.10gb",
                                                                 "profiles": ["1g.10gb"]}})
EXCLUSIVE = Pool.model_validate({"name": "h100", "mode": "Exclusive", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559})
PRICE = 4.0


def pod(namespace: str, name: str, *, fraction: str | None = None, resources: dict | None = None,
        node: str | None = "gpu-1", phase: str = "Running") -> dict:
    return {"metadata": {"namespace": namespace, "name": name,
                         "annotations": {"gpu-fraction": fraction} if fraction else {}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": resources or {}}}]},
            "status": {"phase": phase}}


def shared_gpu_costs(pool: Pool, pods: dict[str, dict], hours: float) -> list[float]:
    """Each tenant's cost when its pod held its share of one GPU for `hours`."""
    shares = tenant_shares({tenant: (p["metadata"]["namespace"], pool) for tenant, p in pods.items()},
                           list(pods.values()))
    held = {(tenant, pool_name): share * hours for tenant, (pool_name, share) in shares.items()}
    return [charge.cost for charge in charges(held, {}, Accounting(price_per_gpu_hour={pool.name: PRICE}))]


def test_three_tenants_sharing_one_gpu_as_hami_shares_pay_their_parts_which_sum_to_the_gpus_cost():
    pods = {"a": pod("tenant-a", "a-0", fraction="0.25"), "b": pod("tenant-b", "b-0", fraction="0.25"),
            "c": pod("tenant-c", "c-0", fraction="0.5")}
    costs = shared_gpu_costs(HAMI, pods, hours=10)
    assert costs == [10.0, 10.0, 20.0]
    assert sum(costs) == pytest.approx(10 * PRICE)


def test_three_tenants_on_the_replicas_of_one_time_sliced_gpu_sum_to_the_gpus_cost():
    pods = {tenant: pod(f"tenant-{tenant}", f"{tenant}-0", resources={"nvidia.com/gpu": "1"}) for tenant in "abc"}
    costs = shared_gpu_costs(TIME_SLICED, pods, hours=10)
    assert costs == pytest.approx([40 / 3] * 3)
    assert sum(costs) == pytest.approx(10 * PRICE)


def test_a_mig_instance_counts_its_profiles_share_and_a_whole_gpu_one():
    assert pod_gpu_share(pod("t", "p", resources={"nvidia.com/mig-1g.10gb": "1"}), MIG) == pytest.approx(1 / 7)
    assert pod_gpu_share(pod("t", "p", resources={"nvidia.com/mig-3g.40gb": "2"}), MIG) == pytest.approx(1.0)
    assert pod_gpu_share(pod("t", "p", resources={"nvidia.com/gpu": "7"}), MIG_SINGLE) == pytest.approx(1.0)
    assert pod_gpu_share(pod("t", "p", resources={"nvidia.com/gpu": "2"}), EXCLUSIVE) == 2.0
    assert pod_gpu_share(pod("t", "p", resources={"nvidia.com/gpu.shared": "2"}), TIME_SLICED) == pytest.approx(2 / 3)
    assert pod_gpu_share(pod("t", "p", resources={"cpu": "2"}), EXCLUSIVE) == 0.0
    assert pod_gpu_share(pod("t", "p", fraction="not a number"), HAMI) == 0.0


def test_only_placed_pods_that_have_not_finished_hold_their_share():
    pods = [pod("tenant-a", "running", fraction="0.25"), pod("tenant-a", "pending", fraction="0.25", node=None,
                                                            phase="Pending"),
            pod("tenant-a", "done", fraction="0.25", phase="Succeeded"), pod("tenant-a", "failed", fraction="0.5",
                                                                            phase="Failed"),
            pod("tenant-x", "stranger", fraction="0.5")]
    assert tenant_shares({"a": ("tenant-a", HAMI), "idle": ("tenant-idle", HAMI)}, pods) == {
        "a": ("l4-hami", 0.25), "idle": ("l4-hami", 0.0)}


def test_placements_follow_the_pool_the_policy_chose():
    config = OperatorConfig(pools=[HAMI, EXCLUSIVE])
    tenants = [{"metadata": {"name": "a"}, "status": {"sharing": {"pool": "l4-hami"}}},
               {"metadata": {"name": "b"}, "status": {"namespace": "custom-b", "sharing": {"pool": "h100"}}},
               {"metadata": {"name": "c"}, "status": {"sharing": {"pool": "gone"}}},
               {"metadata": {"name": "d"}}]
    assert placements(tenants, config) == {"a": ("tenant-a", HAMI), "b": ("custom-b", EXCLUSIVE)}


def test_the_chargeback_table_and_csv_price_hours_by_share_and_label_used_hours_apportioned():
    rows = charges({("a", "l4-hami"): 42.0, ("b", "h100"): 10.0}, {"a": 0.5},
                   Accounting(currency="EUR", price_per_gpu_hour={"l4-hami": 0.8}))
    table = format_chargeback("7d", rows, "EUR").splitlines()
    assert table[0].split() == ["TENANT", "POOL", "GPU-H-BY-SHARE", "USED-GPU-H(APPORTIONED)", "PRICE/GPU-H(EUR)",
                                "COST-7d(EUR)"]
    assert table[1].split() == ["a", "l4-hami", "42.00", "21.00", "0.8", "33.60"]
    assert table[2].split() == ["b", "h100", "10.00", "-", "0", "0.00"], "a pool without a price costs nothing"
    assert table[3].split() == ["TOTAL", "-", "52.00", "-", "-", "33.60"]
    parsed = list(csv.DictReader(io.StringIO(chargeback_csv("7d", rows, "EUR"))))
    assert parsed[0] == {"tenant": "a", "pool": "l4-hami", "period": "7d", "gpu_hours_by_share": "42.0",
                         "used_gpu_hours_apportioned": "21.0", "price_per_gpu_hour": "0.8",
                         "cost": str(42.0 * 0.8), "currency": "EUR"}
    assert parsed[1]["used_gpu_hours_apportioned"] == ""


def test_prices_must_name_pools_and_not_be_negative_and_periods_read_days():
    with pytest.raises(ValidationError, match="accounting.pricePerGpuHour names \\['nope'\\]"):
        OperatorConfig(pools=[HAMI], accounting=Accounting(price_per_gpu_hour={"nope": 1.0}))
    with pytest.raises(ValidationError, match="accounting.pricePerGpuHour.l4-hami: -1.0 is negative"):
        OperatorConfig(pools=[HAMI], accounting=Accounting(price_per_gpu_hour={"l4-hami": -1.0}))
    assert period_of("7d") == "168h" and period_of("36h") == "36h"
    assert chargeback_step("168h") == 300 and chargeback_step("1h") == 60
    with pytest.raises(ValueError, match="period '7 days'"):
        chargeback_step("7 days")
