"""The `plane` pytest fixture: one control plane per test session, shared by every conftest that
imports it (`from kubeplane.pytest_plugin import plane, pytest_runtest_makereport`).

KUBEPLANE_DIR=DIR attaches to a plane `python -m kubeplane up --dir DIR` keeps running, so
repeated runs skip the start. A failed test keeps the plane's directory and names its logs.
"""

from __future__ import annotations

import os

import pytest

from .plane import ControlPlane
from .tools import ensure_tools

_PLANE = pytest.StashKey[ControlPlane]()
_START_FAILURE = pytest.StashKey[BaseException]()


def session_plane(config: pytest.Config) -> ControlPlane:
    """The session's plane, started (or attached) on first use and stopped when pytest exits.
    Kept on the config rather than in a fixture's cache so that several conftests importing the
    fixture still share one plane; a failed start is remembered so it is not retried per test."""
    if _START_FAILURE in config.stash:
        raise config.stash[_START_FAILURE]
    if _PLANE not in config.stash:
        # A cold tools build takes minutes: show its progress instead of capturing it.
        with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
            ensure_tools()
        directory = os.environ.get("KUBEPLANE_DIR")
        try:
            plane = ControlPlane.attach(directory) if directory else ControlPlane(audit=True).start()
        except Exception as error:
            config.stash[_START_FAILURE] = error
            raise
        config.stash[_PLANE] = plane
        config.add_cleanup(plane.stop)
    return config.stash[_PLANE]


@pytest.fixture(scope="session")
def plane(pytestconfig: pytest.Config) -> ControlPlane:
    return session_plane(pytestconfig)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    running = item.config.stash.get(_PLANE, None)
    if report.failed and running is not None and "plane" in getattr(item, "fixturenames", ()):
        running.keep = True
        report.sections.append(("kubeplane", f"control-plane directory kept: {running.directory}\n"
                                             f"logs: {running.log_dir}"))
    return report
