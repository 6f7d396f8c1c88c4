"""The SIMULATED GPU nodes derived from the pool configuration (kubeplane.gpu_nodes), checked with
the operator's own reading of nodes (gputenant.pools.plan). Pure; the nodes meet kwok and the real
KAI-Scheduler in test_kai_scheduling.py."""

from __future__ import annotations

import time

import kubernetes
import pytest

from gputenant.config.models import OperatorConfig
from gputenant.pools.plan import node_gpus, pool_nodes
from kubeplane.gpu_nodes import KWOK_NODE_ANNOTATION, GpuNodeError, SimulatedGpuReservations
from kubeplane.gpu_nodes import pool_nodes as simulated_nodes
from kubeplane.tools import REPO_ROOT

EXAMPLE_CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")


def node_objects(config: OperatorConfig) -> list[dict]:
    return [{**node.manifest(), "status": node.status()} for node in simulated_nodes(config)]


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Kubernetes' toleration match for the fields pools use."""
    return any(t.get("key") == taint["key"] and t.get("effect") in (None, taint["effect"])
               and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
               for t in tolerations)


def test_every_pool_selects_simulated_nodes_holding_its_configured_gpus():
    nodes = node_objects(EXAMPLE_CONFIG)
    for pool in EXAMPLE_CONFIG.pools:
        members = pool_nodes(pool, nodes)
        assert members, pool.name
        assert sum(node_gpus(node) for node in members) == pool.gpus, pool.name
    assert len({node["metadata"]["name"] for node in nodes}) == len(nodes)
    assert all(node["metadata"]["annotations"] == dict([KWOK_NODE_ANNOTATION]) for node in nodes)


def test_simulated_nodes_advertise_each_pools_mechanism():
    by_pool = {pool.name: pool_nodes(pool, node_objects(EXAMPLE_CONFIG)) for pool in EXAMPLE_CONFIG.pools}
    [timeslice] = by_pool["a100-timeslice"]
    assert timeslice["status"]["allocatable"]["nvidia.com/gpu"] == str(8 * 4)
    assert timeslice["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert timeslice["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "a100-timeslice-4"
    for hami in by_pool["l4-hami"]:
        # no `gpu=on`: that label starts HAMi's device plugin, which must not run beside NVIDIA's
        assert "gpu" not in hami["metadata"]["labels"]
        assert hami["metadata"]["labels"]["nvidia.com/mig.capable"] == "false"
        # KAI fractions on NVIDIA's device plugin: whole GPUs, their memory in a label, no HAMi resources.
        assert hami["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert hami["metadata"]["labels"]["nvidia.com/gpu.memory"] == "23034"
        assert not {key for key in hami["status"]["capacity"] if key.startswith("nvidia.com/gpu") and key != "nvidia.com/gpu"}
    [balanced] = by_pool["h100-mig-balanced"]
    assert {key: value for key, value in balanced["status"]["capacity"].items() if "mig-" in key} == {
        "nvidia.com/mig-1g.10gb": "8", "nvidia.com/mig-2g.20gb": "4", "nvidia.com/mig-3g.40gb": "4"}
    assert balanced["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert balanced["status"]["capacity"]["nvidia.com/gpu"] == "0"
    [small] = by_pool["h100-mig-small"]
    assert small["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == str(4 * 7)
    assert sorted(n["status"]["capacity"]["nvidia.com/gpu"] for n in by_pool["h100-exclusive"]) == ["8", "8"]


def test_each_pools_nodes_are_tainted_so_only_pods_with_its_tolerations_land_there():
    for pool in EXAMPLE_CONFIG.pools:
        own = [t.model_dump(exclude_none=True, by_alias=True) for t in pool.tolerations]
        for node in pool_nodes(pool, node_objects(EXAMPLE_CONFIG)):
            taints = node["spec"]["taints"]
            assert taints and all(tolerates(own, taint) for taint in taints), (pool.name, taints)
    exclusive = pool_nodes(EXAMPLE_CONFIG.pools[-1], node_objects(EXAMPLE_CONFIG))[0]["spec"]["taints"]
    timeslice = [t.model_dump(exclude_none=True, by_alias=True) for t in EXAMPLE_CONFIG.pools[0].tolerations]
    assert not all(tolerates(timeslice, taint) for taint in exclusive)


def pool_document(**changes) -> dict:
    pool = {"name": "odd", "mode": "MIG", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559, "gpus": 3,
            "nodeSelector": {"pool": "odd"}, "mig": {"config": "all-1g.10gb", "profiles": ["1g.10gb"]}}
    return {"pools": [{**pool, **changes}], "trustModes": {"Trusted": "MIG", "Internal": "MIG", "Untrusted": "MIG"}}


def test_pool_sizes_are_split_into_nodes_of_at_most_eight_gpus():
    config = OperatorConfig.model_validate(pool_document(gpus=19))
    assert [node.labels["nvidia.com/gpu.count"] for node in simulated_nodes(config)] == ["8", "8", "3"]
    unset = OperatorConfig.model_validate(pool_document(gpus=None))
    assert [node.labels["nvidia.com/gpu.count"] for node in simulated_nodes(unset)] == ["8"]


def test_single_strategy_mig_advertises_instances_as_whole_gpus():
    config = OperatorConfig.model_validate(pool_document(mig={"strategy": "single", "config": "all-1g.10gb",
                                                              "profiles": ["1g.10gb"]}))
    [node] = simulated_nodes(config)
    assert node.resources == {"nvidia.com/gpu": str(3 * 7)}
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-MIG-1g.10gb"


def test_pools_that_cannot_be_simulated_are_named_with_the_fix():
    custom = OperatorConfig.model_validate(pool_document(mig={"config": "custom-layout", "profiles": ["1g.10gb"]}))
    with pytest.raises(GpuNodeError, match=r"pools\[odd\]\.mig\.config 'custom-layout'.*all-<profile>"):
        simulated_nodes(custom)
    no_selector = OperatorConfig.model_validate(pool_document(nodeSelector={}))
    with pytest.raises(GpuNodeError, match=r"pools\[odd\]\.nodeSelector is empty"):
        simulated_nodes(no_selector)


def test_the_simulated_reservation_reporter_outlives_an_unreachable_api_server():
    """test_operator_outage stops the API server for 30 s; the reporter must resume after it, or every
    GPU fraction placed later in the session waits forever for its reservation's GPU."""
    configuration = kubernetes.client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    reporter = SimulatedGpuReservations(kubernetes.client.ApiClient(configuration), interval=0.05)
    reporter._thread.start()
    try:
        time.sleep(1)
        assert reporter._thread.is_alive()
    finally:
        reporter.stop()
    assert not reporter._thread.is_alive()
