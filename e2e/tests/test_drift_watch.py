"""Drift repaired on the change, not at the next resync: the real operator with its resync period
set to ten hours (so no resync runs during this module) drives a real vCluster tenant to Ready;
then each kind it owns is deleted or edited as another hand would, and the owned-kind watches
(`gputenant.owned_watch`) have the pass put it back within seconds.

Measured here on 2 cores (the bench measures it at scale): docs/performance.md, Drift.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from gputenant import naming
from kubeplane import wait_for

pytestmark = pytest.mark.on_vcluster_node

OPERATOR_RESYNC_SECONDS = 36000
"""Ten hours: the production safety net; nothing in this module waits for it."""
NAME = "drifty"
NAMESPACE = f"tenant-{NAME}"
REPAIRED_WITHIN_SECONDS = 20
"""Generous for 2 loaded cores; the repairs measured here take about a second (module docstring)."""


@pytest.fixture(scope="module")
def ready(tenants_api):
    tenants_api.apply(tenants_api.manifest(NAME, "Trusted", owner=f"{NAME}-owner"))
    return tenants_api.wait_ready(NAME)


def get(plane, kind: str, name: str, namespace: str | None = NAMESPACE) -> dict | None:
    where = ["--namespace", namespace] if namespace else []
    found = plane.kubectl("get", kind, name, *where, "-o", "json", check=False)
    return json.loads(found.stdout) if found.returncode == 0 else None


def first(plane, kind: str, namespace: str | None = NAMESPACE) -> str:
    where = ["--namespace", namespace] if namespace else []
    names = plane.kubectl("get", kind, *where, "-l", f"{naming.TENANT_LABEL}={NAME}", "-o", "name").stdout.split()
    assert names, f"no {kind} of tenant {NAME}"
    return names[0].split("/", 1)[1]


def deleted(kind: str, namespace: str | None = NAMESPACE) -> Callable:
    """Delete the tenant's first object of `kind`; repaired when one of that name exists again with
    another uid."""
    def act(plane) -> Callable[[], bool]:
        name = first(plane, kind, namespace)
        before = get(plane, kind, name, namespace)
        assert before is not None
        where = ["--namespace", namespace] if namespace else []
        plane.kubectl("delete", kind, name, *where, "--wait=true")

        def repaired() -> bool:
            now = get(plane, kind, name, namespace)
            return now is not None and now["metadata"]["uid"] != before["metadata"]["uid"]
        return repaired
    return act


def edited(kind: str, patch: dict, read: Callable[[dict], object], namespace: str | None = NAMESPACE) -> Callable:
    """Merge-patch the tenant's first object of `kind` as kubectl would; repaired when `read` of it
    gives what it gave before (often already when kubectl's answer arrives)."""
    def act(plane) -> Callable[[], bool]:
        name = first(plane, kind, namespace)
        before = get(plane, kind, name, namespace)
        assert before is not None
        where = ["--namespace", namespace] if namespace else []
        patched = plane.kubectl("patch", kind, name, *where, "--type=merge", "-p", json.dumps(patch)).stdout
        assert "no change" not in patched, f"the patch changed nothing of {kind}/{name}: {patched}"

        def repaired() -> bool:
            now = get(plane, kind, name, namespace)
            return now is not None and read(now) == read(before)
        return repaired
    return act


ENFORCE = "pod-security.kubernetes.io/enforce"
CASES = {
    "namespace label removed": edited("namespace", {"metadata": {"labels": {ENFORCE: None}}},
                                      lambda o: o["metadata"]["labels"].get(ENFORCE), namespace=None),
    "resourcequota deleted": deleted("resourcequota"),
    "resourcequota edited": edited("resourcequota", {"spec": {"hard": {"pods": "9999"}}},
                                   lambda o: o["spec"]["hard"].get("pods")),
    "limitrange deleted": deleted("limitrange"),
    "networkpolicy deleted": deleted("networkpolicy"),
    "networkpolicy edited": edited("networkpolicy", {"spec": {"ingress": [{}]}}, lambda o: o["spec"].get("ingress")),
    "role deleted": deleted("role"),
    "role edited": edited("role", {"rules": []}, lambda o: o.get("rules")),
    "rolebinding deleted": deleted("rolebinding"),
    "configmap deleted": deleted("configmap"),
    "secret deleted": deleted("secret"),
    "queue edited": edited("queues.scheduling.run.ai", {"spec": {"priority": 77}}, lambda o: o["spec"].get("priority"),
                           namespace=None),
    "queue deleted": deleted("queues.scheduling.run.ai", namespace=None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_another_hands_change_of_an_owned_object_is_repaired_within_seconds(plane, operator, ready, case):
    repaired = CASES[case](plane)
    started = time.monotonic()
    try:
        wait_for(repaired, timeout=REPAIRED_WITHIN_SECONDS, interval=0.2, what=f"{case}: repaired")
    except TimeoutError:
        raise AssertionError(f"{case}: not repaired in {REPAIRED_WITHIN_SECONDS}s (resync every "
                             f"{OPERATOR_RESYNC_SECONDS}s)\n{operator.log_tail()}") from None
    print(f"{case}: repaired after {time.monotonic() - started:.1f}s")
    assert "by another hand" in operator.log_path.read_text(errors="replace")

