"""The `plane` pytest fixture: one control plane per test session, shared by every conftest that
imports it (`from kubeplane.pytest_plugin import plane, pytest_runtest_makereport`).

The plane starts with KAI's PodGroup CRD installed (from ../shared/third_party), as a GPU cluster
has it before any tenant.

`kwok` runs kwok (kubeplane.kwok) on the session's plane, started once on first use, for tests
that create SIMULATED GPU nodes (kubeplane.gpu_nodes): kwok marks them Ready and runs the pods
bound to them.

`node_plane` is a second, separate session plane with a real node and kube-scheduler
(`ControlPlane(node=True)`), for tests that run pods; tests that rely on pods staying Pending keep
using `plane`.

KUBEPLANE_DIR=DIR attaches to a plane `python -m kubeplane up --dir DIR` keeps running, so
repeated runs skip the start. A failed test keeps the plane's directory and names its logs.
"""

from __future__ import annotations

import os

import pytest

from .fixtures import UPSTREAM_PODGROUP_CRD, install_crds
from .kwok import Kwok
from .plane import ControlPlane
from .tools import require_tools

_PLANE = pytest.StashKey[ControlPlane]()
_START_FAILURE = pytest.StashKey[BaseException]()
_KWOK = pytest.StashKey[Kwok]()
_NODE_PLANE = pytest.StashKey[ControlPlane]()
_NODE_START_FAILURE = pytest.StashKey[BaseException]()


def session_plane(config: pytest.Config) -> ControlPlane:
    """The session's plane, started (or attached) on first use and stopped when pytest exits.
    Kept on the config rather than in a fixture's cache so that several conftests importing the
    fixture still share one plane; a failed start is remembered so it is not retried per test."""
    if _START_FAILURE in config.stash:
        raise config.stash[_START_FAILURE]
    if _PLANE not in config.stash:
        require_tools()
        directory = os.environ.get("KUBEPLANE_DIR")
        try:
            plane = ControlPlane.attach(directory) if directory else ControlPlane(audit=True).start()
            if UPSTREAM_PODGROUP_CRD.is_file():
                # As on a GPU cluster, where KAI is installed before any tenant: the controller-manager's
                # quota and garbage collector controllers find a new resource by discovery only every
                # 30 s, and a test that makes a gang's PodGroup waits for both.
                install_crds(plane, UPSTREAM_PODGROUP_CRD)
        except Exception as error:
            config.stash[_START_FAILURE] = error
            raise
        config.stash[_PLANE] = plane
        config.add_cleanup(plane.stop)
    return config.stash[_PLANE]


def session_kwok(config: pytest.Config) -> Kwok:
    """kwok on the session's plane, started on first use and stopped before the plane."""
    if _KWOK not in config.stash:
        config.stash[_KWOK] = Kwok().start(session_plane(config))
        config.add_cleanup(config.stash[_KWOK].stop)
    return config.stash[_KWOK]


def session_node_plane(config: pytest.Config) -> ControlPlane:
    """The session's plane with a node, started on first use and stopped when pytest exits."""
    if _NODE_START_FAILURE in config.stash:
        raise config.stash[_NODE_START_FAILURE]
    if _NODE_PLANE not in config.stash:
        require_tools()
        try:
            plane = ControlPlane(audit=True, node=True).start()
        except Exception as error:
            config.stash[_NODE_START_FAILURE] = error
            raise
        config.stash[_NODE_PLANE] = plane
        config.add_cleanup(plane.stop)
    return config.stash[_NODE_PLANE]


@pytest.fixture(scope="session")
def plane(pytestconfig: pytest.Config) -> ControlPlane:
    return session_plane(pytestconfig)


@pytest.fixture(scope="session")
def kwok(pytestconfig: pytest.Config) -> Kwok:
    return session_kwok(pytestconfig)


@pytest.fixture(scope="session")
def node_plane(pytestconfig: pytest.Config) -> ControlPlane:
    return session_node_plane(pytestconfig)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    for key, fixture in ((_PLANE, "plane"), (_NODE_PLANE, "node_plane")):
        running = item.config.stash.get(key, None)
        if report.failed and running is not None and fixture in getattr(item, "fixturenames", ()):
            running.keep = True
            report.sections.append(("kubeplane", f"control-plane directory kept: {running.directory}\n"
                                                 f"logs: {running.log_dir}"))
    return report
