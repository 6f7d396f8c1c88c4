"""Everything under e2e/tests runs against the real local control plane (see kubeplane)."""

from pathlib import Path

import pytest

from kubeplane.pytest_plugin import node_plane, plane, pytest_runtest_makereport  # noqa: F401 (fixtures, hook)

pytest_plugins = ["kubeplane.kai_fixtures"]

E2E_TESTS = Path(__file__).parent / "tests"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark e2e tests `plane`, so `pytest -m 'not plane'` runs only the fast ones."""
    for item in items:
        if E2E_TESTS in item.path.parents:
            item.add_marker(pytest.mark.plane)
