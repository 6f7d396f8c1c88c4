"""The operator against the real control plane: tenants of every trust level become Ready, their
kubeconfigs work inside the (stand-in) virtual cluster, only owners read them, resyncs write
nothing, drift is repaired, deletion cleans up and preventDeletion blocks it."""

from __future__ import annotations

import base64
import time

import kubernetes
import pytest
import yaml

from kubeplane import wait_for


TENANTS = {"team-a": "Trusted", "team-b": "Internal", "team-c": "Untrusted"}


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
                kubernetes.client.V1Namespace(metadata={"name": f"made-by-{name}-admin"}))


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


def test_resync_of_unchanged_tenants_writes_nothing(plane, tenants):
    """Counted from the apiserver's audit log over two drift-timer periods (5 s each here)."""
    offset = plane.audit_offset()
    time.sleep(12)
    writes = [e for e in plane.audit_events(offset)
              if e.get("verb") in {"create", "update", "patch", "delete"}
              and e.get("user", {}).get("username") == "kubeplane-admin"]
    assert writes == [], [(e["verb"], e["requestURI"], e.get("userAgent")) for e in writes]
    reads = [e for e in plane.audit_events(offset) if e.get("userAgent", "").startswith("gpu-tenant-operator")]
    assert reads, "the drift timer did not run: no reads from the operator"


def test_deleted_managed_object_is_repaired(plane, operator, tenants):
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        quota = core.list_namespaced_resource_quota("tenant-team-a").items[0].metadata.name
        core.delete_namespaced_resource_quota(quota, "tenant-team-a")
        wait_for(lambda: any(q.metadata.name == quota for q in
                             core.list_namespaced_resource_quota("tenant-team-a").items),
                 timeout=30, what="the operator to recreate the ResourceQuota")
        events = core.list_namespaced_event("default", field_selector="reason=DriftRepaired").items
        assert any(e.involved_object.name == "team-a" for e in events)
