"""Everything under e2e/tests runs against the real local control plane (see kubeplane)."""

from pathlib import Path

import pytest

from kubeplane.pytest_plugin import node_plane, plane, pytest_runtest_makereport  # noqa: F401 (fixtures, hook)

pytest_plugins = ["kubeplane.kai_fixtures"]

E2E_TESTS = Path(__file__).parent / "tests"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark e2e tests `plane`, so `pytest -m 'not plane'` runs only the fast ones; with several
    workers (`make test`), hand out the longest modules first."""
    for item in items:
        if E2E_TESTS in item.path.parents:
            item.add_marker(pytest.mark.plane)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller hands out its collection's order
        items[:] = longest_modules_first(items)


def longest_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """pytest-xdist's `--dist loadfile --no-loadscope-reorder` gives each worker the next module in
    collection order (without the last flag, modules with the most tests go first), so
    the suite ends when the last long module does. Modules with real vClusters (`vcluster_node`, or
    marked `on_vcluster_node`)
    take minutes, other plane modules seconds to a minute, unit tests seconds: that order, each
    module kept whole and in place among its peers, lets the short ones fill the end."""
    weight: dict[Path, int] = {}
    for item in items:
        on_node = "vcluster_node" in item.fixturenames or item.get_closest_marker("on_vcluster_node")
        rank = 0 if on_node else 1 if E2E_TESTS in item.path.parents else 2
        weight[item.path] = min(rank, weight.get(item.path, rank))
    return sorted(items, key=lambda item: weight[item.path])
