"""The `kai_cluster` pytest fixture: a plane of its own with SIMULATED GPU nodes (kwok) for every
pool of the test configuration, the SIMULATED report of KAI's GPU reservation pods (the GPU each
one got, kubeplane.gpu_nodes.SimulatedGpuReservations) and the real KAI-Scheduler, started once per
test session.

A plane of its own, so the session plane's tests never meet a scheduler that binds their pods, nor
KAI v0.12.0's CRDs in place of the newer Queue CRD they check conformance against. Import the
fixture into a test module: `from kubeplane.kai_fixtures import kai_cluster`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import yaml

from gputenant.config.models import OperatorConfig

from .gpu_nodes import GpuNode, SimulatedGpuReservations, create_nodes, pool_nodes
from .kai import KaiScheduler
from .kwok import Kwok
from .plane import ControlPlane
from .tools import REPO_ROOT, require_tools

EXCLUSIVE_POOL = "h100-exclusive"
EXCLUSIVE_POOL_GPUS = 4
"""examples/config.yaml's pools, but this one shrunk from 16 GPUs to one node of 4, so that a few
one-GPU pods fill it and two queues can over-subscribe it."""


def scheduling_config() -> OperatorConfig:
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    [pool] = [pool for pool in document["pools"] if pool["name"] == EXCLUSIVE_POOL]
    pool["gpus"] = EXCLUSIVE_POOL_GPUS
    return OperatorConfig.model_validate(document)


@dataclass(frozen=True)
class KaiCluster:
    plane: ControlPlane
    config: OperatorConfig
    nodes: list[GpuNode]

    def node_names(self, pool: str) -> set[str]:
        return {node.name for node in self.nodes if node.pool == pool}


@contextmanager
def gpu_scheduling(plane: ControlPlane, config: OperatorConfig) -> Iterator[KaiCluster]:
    """On `plane`: kwok's SIMULATED GPU nodes for every pool of `config`, the SIMULATED report of
    KAI's reservation pods, and the real KAI-Scheduler; stopped again when the block ends."""
    kwok, kai = Kwok(), KaiScheduler()
    reservations_client = plane.api_client()
    reservations = SimulatedGpuReservations(reservations_client)
    try:
        kwok.start(plane)
        nodes = pool_nodes(config)
        with plane.api_client() as client:
            create_nodes(client, nodes)
        reservations.start()
        kai.start(plane)
        yield KaiCluster(plane=plane, config=config, nodes=nodes)
    finally:
        kai.stop()
        reservations.stop()
        reservations_client.close()
        kwok.stop()


@pytest.fixture(scope="session")
def kai_cluster(request: pytest.FixtureRequest) -> Iterator[KaiCluster]:
    require_tools()
    plane = ControlPlane().start()
    try:
        with gpu_scheduling(plane, scheduling_config()) as cluster:
            yield cluster
    except BaseException:
        plane.keep = True
        raise
    finally:
        if request.session.testsfailed:
            plane.keep = True
        plane.stop()
