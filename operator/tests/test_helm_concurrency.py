"""The bound on helm processes at once: a stand-in helm executable logs when each process starts
and ends (no cluster involved; what Helm does to a cluster is tested in
e2e/tests/test_vcluster_lifecycle.py)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from gputenant.helm import VClusterReleases

STAND_IN_HELM = """#!/bin/sh
if [ "$1" = version ]; then printf v3.22.0; exit 0; fi
echo "start $$" >> "{log}"
sleep 0.3
echo "end $$" >> "{log}"
"""


def most_at_once(log: Path) -> int:
    running = peak = 0
    for line in log.read_text().splitlines():
        running += 1 if line.startswith("start") else -1
        peak = max(peak, running)
    return peak


@pytest.fixture
def stand_in_helm(tmp_path) -> tuple[Path, Path]:
    log = tmp_path / "helm.log"
    helm = tmp_path / "helm"
    helm.write_text(STAND_IN_HELM.format(log=log))
    helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
    return helm, log


async def uninstall_all(releases: VClusterReleases, count: int) -> None:
    await asyncio.gather(*(releases.uninstall(f"team-{i}", "ns") for i in range(count)))


def test_no_more_helm_processes_run_at_once_than_allowed(stand_in_helm):
    helm, log = stand_in_helm
    releases = VClusterReleases(helm_path=helm, max_concurrent=2)
    asyncio.run(uninstall_all(releases, 6))
    assert most_at_once(log) == 2
    assert releases.counters.uninstalls == 6


def test_unbounded_enough_they_overlap(stand_in_helm):
    """The same calls with room for all of them do overlap, so the bound above is what held them."""
    helm, log = stand_in_helm
    asyncio.run(uninstall_all(VClusterReleases(helm_path=helm, max_concurrent=6), 6))
    assert most_at_once(log) > 2


def test_a_bound_below_one_is_refused(stand_in_helm):
    with pytest.raises(ValueError, match="max_concurrent helm processes is 0; give 1 or more"):
        VClusterReleases(helm_path=stand_in_helm[0], max_concurrent=0)
