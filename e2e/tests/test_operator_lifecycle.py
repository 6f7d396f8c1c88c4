"""The operator against the real control plane: tenants of every trust level become Ready, their
kubeconfigs work against their real vCluster (by NodePort at the node's address), only owners read
them, a resync of unchanged tenants writes nothing and drift is repaired.

Each tenant is a real vCluster (25-60 s to start, about 300 MiB): the zero-writes resync runs over
the three trust-level tenants, plus GPUTENANT_E2E_RESYNC_TENANTS - 3 more when set (20 was the
count checked before the vCluster was real; `python -m bench` measures resync at scale)."""

from __future__ import annotations

import base64
import os
import time
import uuid

import kubernetes
import pytest
import yaml

from kubeplane import WRITE_VERBS, wait_for

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

TENANTS = {"team-a": "Trusted", "team-b": "Internal", "team-c": "Untrusted"}
RESYNC_TENANTS = int(os.environ.get("GPUTENANT_E2E_RESYNC_TENANTS", len(TENANTS)))
CROWD = [f"crowd-{index:02d}" for index in range(max(RESYNC_TENANTS - len(TENANTS), 0))]
"""With TENANTS, the tenants of the zero-writes resync check."""


@pytest.fixture(scope="module")
def tenants(tenants_api):
    tenants_api.apply(*(tenants_api.manifest(name, trust, owner=f"{name}-owner")
                        for name, trust in TENANTS.items()))
    return {name: tenants_api.wait_ready(name) for name in TENANTS}


def kubeconfig_of(plane, name: str, role: str) -> dict:
    with plane.api_client() as client:
        secret = kubernetes.client.CoreV1Api(client).read_namespaced_secret(
            f"{name}-kubeconfig-{role}", f"tenant-{name}")
    return yaml.safe_load(base64.b64decode(secret.data["config"]))


def test_every_trust_level_becomes_ready_with_its_sharing_mode(tenants):
    modes = {name: body["status"]["sharing"]["mode"] for name, body in tenants.items()}
    assert modes == {"team-a": "TimeSlicing", "team-b": "HAMi", "team-c": "MIG"}
    for body in tenants.values():
        types = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        assert set(types.values()) == {"True"}, types
        assert {k["role"] for k in body["status"]["kubeconfigs"]} == {"admin", "view"}
        assert all(k["expiresAt"] for k in body["status"]["kubeconfigs"])


def test_view_kubeconfig_lists_but_cannot_create_admin_can(plane, tenants):
    for name in TENANTS:
        with kubernetes.config.new_client_from_config_dict(kubeconfig_of(plane, name, "view")) as client:
            core = kubernetes.client.CoreV1Api(client)
            names = {n.metadata.name for n in core.list_namespace().items}
            assert "kube-system" in names
            with pytest.raises(kubernetes.client.ApiException) as denied:
                core.create_namespace(kubernetes.client.V1Namespace(metadata={"name": "from-view"}))
            assert denied.value.status == 403
        with kubernetes.config.new_client_from_config_dict(kubeconfig_of(plane, name, "admin")) as client:
            kubernetes.client.CoreV1Api(client).create_namespace(
                kubernetes.client.V1Namespace(metadata={"name": f"made-by-{name}-admin-{uuid.uuid4().hex[:6]}"}))


def _read_kubeconfig_secret(plane, user_kubeconfig, name: str) -> int:
    with plane.api_client(user_kubeconfig) as client:
        try:
            kubernetes.client.CoreV1Api(client).read_namespaced_secret(f"{name}-kubeconfig-view", f"tenant-{name}")
            return 200
        except kubernetes.client.ApiException as error:
            return error.status


def test_only_owners_read_kubeconfig_secrets(plane, tenants):
    owner_a = plane.user("team-a-owner")
    assert _read_kubeconfig_secret(plane, owner_a, "team-a") == 200
    assert _read_kubeconfig_secret(plane, owner_a, "team-b") == 403
    stranger = plane.user("nobody")
    assert _read_kubeconfig_secret(plane, stranger, "team-a") == 403
    assert _read_kubeconfig_secret(plane, stranger, "team-b") == 403


@pytest.fixture(scope="module")
def crowd(tenants_api, tenants):
    """The tenants beyond the three of `tenants` (Trusted, a quarter GPU each, so that with team-a
    17 of them fit the 8-GPU pool the admission guard's capacity check holds them to), each with
    its own Helm release and real vCluster. Nothing here is shared or stubbed to make them cheaper."""
    if not CROWD:
        return {}
    tenants_api.apply(*(tenants_api.manifest(name, "Trusted", owner=f"{name}-owner", gpus=0.25) for name in CROWD))
    return {name: tenants_api.wait_ready(name, timeout=900) for name in CROWD}


def quiet_offset(plane, operator) -> int:
    """An audit offset after which the operator has written nothing for a whole resync period: a
    tenant seen Ready may still have its last run in flight (its events, kopf's annotations),
    which are onboarding writes, not resync writes."""
    def quiet() -> int | None:
        offset = plane.audit_offset()
        time.sleep(operator.resync_seconds)
        return None if plane.count_requests(offset, user=operator.user) else offset
    try:
        return wait_for(quiet, timeout=12 * operator.resync_seconds, interval=0, what="the operator to go quiet")
    except TimeoutError:
        raise AssertionError(f"the operator kept writing after every tenant was Ready:\n{operator.log_tail()}") from None


def test_resync_of_unchanged_tenants_writes_nothing(plane, tenants_api, tenants, crowd):
    """Counted from the apiserver's audit log by the operator's own user (which Helm also runs
    as) over at least two drift-timer runs per tenant: the window lasts until every tenant's
    pipeline has read its ``vc-<release>`` Secret twice (on 2 loaded cores 20 timers need more
    than two nominal periods), which also proves the timer ran."""
    names = [*TENANTS, *crowd]
    assert len(names) == max(RESYNC_TENANTS, len(TENANTS))
    operator = tenants_api.operator
    offset = quiet_offset(plane, operator)

    def ours() -> list[dict]:
        return [e for e in plane.audit_events(offset) if e.get("user", {}).get("username") == operator.user]

    def runs(events: list[dict], name: str) -> int:
        uri = f"/api/v1/namespaces/tenant-{name}/secrets/vc-{name}"
        return sum(e["verb"] == "get" and e["requestURI"] == uri for e in events)

    try:
        events = wait_for(lambda: (lambda found: found if all(runs(found, n) >= 2 for n in names) else None)(ours()),
                          timeout=12 * operator.resync_seconds, interval=1, what="two timer runs per tenant")
    except TimeoutError:
        found = ours()
        raise AssertionError(f"the drift timer did not run twice: {({n: runs(found, n) for n in names})}") from None
    writes = [(e["verb"], e["requestURI"]) for e in events if e["verb"] in WRITE_VERBS]
    assert writes == []


def test_deleted_managed_object_is_repaired(plane, operator, tenants):
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        quota = core.list_namespaced_resource_quota("tenant-team-a").items[0].metadata.name
        core.delete_namespaced_resource_quota(quota, "tenant-team-a")
        wait_for(lambda: any(q.metadata.name == quota for q in
                             core.list_namespaced_resource_quota("tenant-team-a").items),
                 timeout=30, what="the operator to recreate the ResourceQuota")
        uid = tenants["team-a"]["metadata"]["uid"]
        wait_for(lambda: any(e.involved_object.uid == uid for e in core.list_namespaced_event(
            "default", field_selector="reason=DriftRepaired").items),
            timeout=10, what="a DriftRepaired event (posted after the repair)")
