"""Kubeconfig rotation and the Argo CD cluster Secret, by the running operator against the real
control plane. Tokens are real TokenRequest tokens of the tenant's real vCluster, and every check
uses them against it (by NodePort at the node's address, see conftest)."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta

import kubernetes
import pytest
import yaml

from kubeplane import wait_for

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

EXPIRES = "gputenant.io/expires-at"
ROTATE = "gputenant.io/rotate-kubeconfigs"
TEN_MINUTES = timedelta(minutes=10)


def read_secret(plane, name: str, namespace: str):
    with plane.api_client() as client:
        try:
            return kubernetes.client.CoreV1Api(client).read_namespaced_secret(name, namespace)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return None
            raise


def kubeconfig_secret(plane, tenant: str, role: str):
    return read_secret(plane, f"{tenant}-kubeconfig-{role}", f"tenant-{tenant}")


def token_of(secret) -> str:
    return yaml.safe_load(base64.b64decode(secret.data["config"]))["users"][0]["user"]["token"]


def parse(timestamp: str) -> datetime:
    return datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def lists_namespaces(kubeconfig: dict) -> bool:
    with kubernetes.config.new_client_from_config_dict(kubeconfig) as client:
        return bool(kubernetes.client.CoreV1Api(client).list_namespace().items)


@pytest.fixture(scope="module")
def short_lived(tenants_api):
    """A tenant whose tokens live 10 minutes, the shortest lifetime the TokenRequest API grants."""
    tenants_api.apply(tenants_api.manifest("rot-t", "Trusted", owner="r-owner", kubeconfig={"tokenLifetime": "10m"}))
    return tenants_api.wait_ready("rot-t")


def test_rotate_annotation_issues_new_tokens(plane, tenants_api, short_lived):
    before = {role: kubeconfig_secret(plane, "rot-t", role) for role in ("admin", "view")}
    expiry_before = {k["role"]: k["expiresAt"] for k in short_lived["status"]["kubeconfigs"]}
    time.sleep(1.1)  # expiries have second precision: a later second proves a new token
    plane.kubectl("annotate", "gputenant", "rot-t", f"{ROTATE}=request-1", "--overwrite")

    def rotated():
        body = tenants_api.get("rot-t")
        expiry = {k["role"]: k["expiresAt"] for k in body["status"]["kubeconfigs"]}
        return body if all(expiry[r] > expiry_before[r] for r in expiry_before) else None
    body = wait_for(rotated, timeout=30, interval=0.5, what="new expiries in status")
    for role, old in before.items():
        new = kubeconfig_secret(plane, "rot-t", role)
        assert new.data["config"] != old.data["config"] and token_of(new) != token_of(old)
        assert new.metadata.annotations[EXPIRES] == next(
            k["expiresAt"] for k in body["status"]["kubeconfigs"] if k["role"] == role)
        assert lists_namespaces(yaml.safe_load(base64.b64decode(new.data["config"])))
    with plane.api_client() as client:
        events = kubernetes.client.CoreV1Api(client).list_namespaced_event(
            "default", field_selector="involvedObject.name=rot-t,reason=KubeconfigIssued").items
    assert any("(requested)" in event.message for event in events)
    # kopf's field handler of the annotation ran: the request does not wait for the drift timer
    assert f"Handler 'reconcile/metadata.annotations.{ROTATE}' succeeded" in tenants_api.operator.log_tail(400)


def test_timer_rotates_a_token_that_is_due(plane, tenants_api, short_lived):
    """Rotation is due at 80% of the lifetime (8 of 10 minutes), too long to wait in a test. The
    operator decides from the Secret's ``gputenant.io/expires-at`` annotation, so the test writes
    there what the operator would observe about 9.5 minutes after issue: an expiry 30 s away.
    The token itself is untouched; what is tested is that the drift timer, with no annotation or
    spec change, sees the token due, issues a new one and records its real expiry."""
    old = kubeconfig_secret(plane, "rot-t", "view")
    near = (datetime.now(UTC) + timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    plane.kubectl("annotate", "secret", "-n", "tenant-rot-t", "rot-t-kubeconfig-view",
                  f"{EXPIRES}={near}", "--overwrite")
    new = wait_for(lambda: (lambda s: s if s.metadata.annotations[EXPIRES] != near else None)(
        kubeconfig_secret(plane, "rot-t", "view")), timeout=4 * tenants_api.operator.resync_seconds,
        interval=0.5, what="the timer to re-issue the view kubeconfig")
    assert token_of(new) != token_of(old)
    issued_for = parse(new.metadata.annotations[EXPIRES]) - datetime.now(UTC)
    assert TEN_MINUTES - timedelta(seconds=30) < issued_for <= TEN_MINUTES
    body = wait_for(lambda: (lambda b: b if any(k["expiresAt"] == new.metadata.annotations[EXPIRES]
                                                for k in b["status"]["kubeconfigs"]) else None)(
        tenants_api.get("rot-t")), timeout=10, what="the new expiry in status")
    assert tenants_api.condition(body, "KubeconfigReady")["status"] == "True"


def test_argocd_cluster_secret_is_registered_and_removed_when_disabled(plane, tenants_api):
    """Argo CD runs nowhere here; the test checks what Argo CD would read: the labelled Secret,
    and that its server, CA and bearer token really open the tenant's virtual cluster."""
    if not plane.kubectl("get", "namespace", "argocd", "--ignore-not-found", "-o", "name").stdout.strip():
        plane.create_namespace("argocd")
    argocd = {"enabled": True, "namespace": "argocd", "project": "gpu-teams"}
    tenants_api.apply(tenants_api.manifest("argo-t", "Trusted", owner="a-owner", argocd=argocd))
    body = tenants_api.wait_ready("argo-t")
    secret = read_secret(plane, "gputenant-argo-t", "argocd")
    assert secret.metadata.labels["argocd.argoproj.io/secret-type"] == "cluster"
    assert secret.metadata.labels["gputenant.io/tenant"] == "argo-t"
    data = {key: base64.b64decode(value).decode() for key, value in secret.data.items()}
    assert data["server"] == body["status"]["vcluster"]["endpoint"]
    assert (data["name"], data["project"]) == ("gputenant-argo-t", "gpu-teams")
    config = json.loads(data["config"])
    assert config["tlsClientConfig"]["insecure"] is False
    as_argocd = {"apiVersion": "v1", "kind": "Config", "current-context": "argocd",
                 "clusters": [{"name": "vc", "cluster": {"server": data["server"],
                                                         "certificate-authority-data": config["tlsClientConfig"]["caData"]}}],
                 "users": [{"name": "argocd", "user": {"token": config["bearerToken"]}}],
                 "contexts": [{"name": "argocd", "context": {"cluster": "vc", "user": "argocd"}}]}
    with kubernetes.config.new_client_from_config_dict(as_argocd) as client:
        kubernetes.client.CoreV1Api(client).create_namespace(
            kubernetes.client.V1Namespace(metadata={"name": "deployed-by-argocd"}))
    assert tenants_api.condition(body, "ArgoCDReady")["reason"] == "Registered"

    tenants_api.apply(tenants_api.manifest("argo-t", "Trusted", owner="a-owner", argocd={**argocd, "enabled": False}))
    body = tenants_api.wait_ready("argo-t")
    assert read_secret(plane, "gputenant-argo-t", "argocd") is None
    assert tenants_api.condition(body, "ArgoCDReady")["reason"] == "NotRequested"


REVOKE = "gputenant.io/revoke-kubeconfigs"


def refused(kubeconfig: dict) -> bool:
    """True when the virtual cluster no longer accepts the kubeconfig's token (401)."""
    try:
        lists_namespaces(kubeconfig)
    except kubernetes.client.ApiException as error:
        return error.status == 401
    return False


def test_revoke_annotation_makes_the_old_tokens_fail_within_seconds(plane, tenants_api, short_lived):
    old = {role: yaml.safe_load(base64.b64decode(kubeconfig_secret(plane, "rot-t", role).data["config"]))
           for role in ("admin", "view")}
    assert all(lists_namespaces(kubeconfig) for kubeconfig in old.values())
    plane.kubectl("annotate", "gputenant", "rot-t", f"{REVOKE}=incident-1", "--overwrite")
    started = time.monotonic()
    wait_for(lambda: all(refused(kubeconfig) for kubeconfig in old.values()), timeout=60, interval=0.5,
             what="the kubeconfigs issued before the revocation refused")
    print(f"\nold tokens refused {time.monotonic() - started:.1f}s after the revoke annotation")

    def reissued():
        new = {role: yaml.safe_load(base64.b64decode(kubeconfig_secret(plane, "rot-t", role).data["config"]))
               for role in old}
        return new if all(new[r]["users"] != old[r]["users"] for r in old) else None
    new = wait_for(reissued, timeout=60, interval=0.5, what="new kubeconfigs in the Secrets")
    assert all(lists_namespaces(kubeconfig) for kubeconfig in new.values())
    assert all(refused(kubeconfig) for kubeconfig in old.values()), "the old tokens stay refused"
    # kopf's field handler of the annotation ran: a revocation does not wait for the drift timer
    assert f"Handler 'reconcile/metadata.annotations.{REVOKE}' succeeded" in tenants_api.operator.log_tail(400)
