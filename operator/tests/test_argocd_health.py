"""health.lua in a real Lua runtime (lupa), called the way Argo CD calls it: the object as the
global `obj`, the chunk's return value read as {status, message}, only the base and table
libraries loaded (Argo CD's default, without useOpenLibs)."""

from __future__ import annotations

import base64
import json
import re

import pytest

lupa = pytest.importorskip("lupa", reason="lupa (the Lua runtime) is in the test extras")

from gputenant.api.conditions import WAITS  # noqa: E402
from gputenant.argocd import HEALTH_LUA_PATH, cluster_secret  # noqa: E402

ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended"}


def run_health(obj: dict) -> dict:
    runtime = lupa.LuaRuntime(unpack_returned_tuples=False)
    sandbox = runtime.eval("""function(script, obj)
        local env = {ipairs = ipairs, pairs = pairs, next = next, tostring = tostring, tonumber = tonumber,
                     type = type, error = error, pcall = pcall, select = select, table = table, obj = obj}
        getmetatable("").__index = nil  -- no string library: s:sub() must fail as in Argo CD
        local chunk = assert(load(script, "health.lua", "t", env))
        return chunk()
    end""")
    table = sandbox(HEALTH_LUA_PATH.read_text(), runtime.table_from(json.loads(json.dumps(obj)), recursive=True))
    result = dict(table.items())
    assert set(result) <= {"status", "message", "deletionMessage"} and {"status", "message"} <= set(result)
    assert result["status"] in ARGO_STATUSES
    return result


def tenant(generation: int = 3, status: dict | None = None, **metadata) -> dict:
    obj = {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant",
           "metadata": {"name": "team-a", "generation": generation, **metadata}, "spec": {"trust": "Trusted"}}
    if status is not None:
        obj["status"] = status
    return obj


def ready(status: str, reason: str = "AllPartsReady", message: str = "everything in place", generation: int = 3,
          extra: list | None = None) -> dict:
    return {"observedGeneration": generation, "conditions": [
        {"type": "NamespaceReady", "status": "True", "reason": "Applied", "message": "",
         "lastTransitionTime": "2026-11-21T07:00:00Z"},
        {"type": "Ready", "status": status, "reason": reason, "message": message,
         "lastTransitionTime": "2026-11-21T07:00:00Z"},
        *(extra or [])]}


def test_no_status_yet_is_progressing():
    assert run_health(tenant())["status"] == "Progressing"


def test_older_generation_observed_is_progressing_even_if_ready():
    result = run_health(tenant(generation=4, status=ready("True", generation=3)))
    assert result == {"status": "Progressing", "message": "Waiting for the operator to reconcile generation 4"}


def test_ready_missing_or_unknown_is_progressing():
    no_ready = {"observedGeneration": 3, "conditions": [{"type": "QueueReady", "status": "True", "reason": "Applied"}]}
    assert run_health(tenant(status=no_ready))["status"] == "Progressing"
    unknown = run_health(tenant(status=ready("Unknown", "WaitingForControlPlane", "vCluster starting")))
    assert unknown == {"status": "Progressing", "message": "WaitingForControlPlane: vCluster starting"}


def test_ready_true_is_healthy():
    assert run_health(tenant(status=ready("True"))) == {"status": "Healthy", "message": "everything in place"}


def test_ready_false_is_degraded_with_reason():
    result = run_health(tenant(status=ready("False", "NoPoolForMode", "no MIG pool offers 1g.10gb")))
    assert result == {"status": "Degraded", "message": "NoPoolForMode: no MIG pool offers 1g.10gb"}


def test_a_tenant_onboarding_that_waits_for_its_control_plane_is_progressing():
    """Ready=False with a wait's reason before the control plane ever served (no KubeconfigReady
    yet): onboarding under way, as Argo CD's Progressing means."""
    starting = ready("False", "ControlPlaneStarting", "StatefulSet team-a: 1/1 pod(s), 0 ready")
    assert run_health(tenant(status=starting)) == {
        "status": "Progressing", "message": "ControlPlaneStarting: StatefulSet team-a: 1/1 pod(s), 0 ready"}


def test_the_same_wait_after_the_control_plane_served_is_degraded():
    """Once kubeconfigs were issued, a control plane that is starting again (its pod died) is a
    tenant that stopped working."""
    issued = {"type": "KubeconfigReady", "status": "True", "reason": "Issued", "message": ""}
    restarting = ready("False", "ControlPlaneStarting", "pod team-a-0 not ready", extra=[issued])
    assert run_health(tenant(status=restarting)) == {"status": "Degraded",
                                                     "message": "ControlPlaneStarting: pod team-a-0 not ready"}


def test_a_failure_while_onboarding_is_degraded():
    assert run_health(tenant(status=ready("False", "HelmFailed", "chart refused")))["status"] == "Degraded"


def test_the_scripts_waits_are_the_operators():
    """health.lua carries its own copy of api/conditions.py WAITS (Argo CD runs it alone)."""
    [table] = re.findall(r"local waits = \{(.*?)\}", HEALTH_LUA_PATH.read_text(), re.S)
    assert set(re.findall(r"(\w+) = true", table)) == set(WAITS)


def test_ready_false_without_reason_or_message_still_answers():
    status = {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "False"}]}
    assert run_health(tenant(status=status)) == {"status": "Degraded", "message": "NotReady: "}


def test_deletion_prevented_is_suspended():
    prevented = {"type": "DeletionPrevented", "status": "True", "reason": "PreventDeletionSet",
                 "message": "deletion is blocked while spec.preventDeletion is true"}
    result = run_health(tenant(status=ready("True", extra=[prevented]), deletionTimestamp="2026-11-21T08:00:00Z"))
    assert result["status"] == "Suspended"
    assert "spec.preventDeletion" in result["message"]
    # Argo CD 3.6 keeps the script's status for a terminating object only with a deletionMessage
    assert result["deletionMessage"] == result["message"]
    by_reason = ready("False", "DeletionPrevented", "set spec.preventDeletion to false to delete")
    assert run_health(tenant(status=by_reason))["status"] == "Suspended"


def test_deletion_prevented_false_does_not_suspend():
    lifted = {"type": "DeletionPrevented", "status": "False", "reason": "PreventDeletionUnset", "message": ""}
    assert run_health(tenant(status=ready("True", extra=[lifted])))["status"] == "Healthy"


def test_deleting_without_prevention_is_progressing():
    result = run_health(tenant(status=ready("True"), deletionTimestamp="2026-11-21T08:00:00Z"))
    assert result == {"status": "Progressing", "message": "Pending deletion"}


def test_sandbox_really_lacks_the_string_library():
    runtime = lupa.LuaRuntime()
    probe = runtime.eval("""function()
        getmetatable("").__index = nil
        return pcall(function() return ("abc"):sub(1, 1) end)
    end""")
    ok, _ = probe()
    assert ok is False


def test_cluster_secret_follows_argo_cd_declarative_setup():
    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    secret = cluster_secret("team-a", "argocd", "https://team-a.gpu.example.com", ca, "tok3n", project="ml")
    assert secret["metadata"]["namespace"] == "argocd"
    assert secret["metadata"]["name"] == "gputenant-team-a"
    assert secret["metadata"]["labels"]["argocd.argoproj.io/secret-type"] == "cluster"
    assert secret["metadata"]["labels"]["gputenant.io/tenant"] == "team-a"
    data = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert data["name"] == "gputenant-team-a"
    assert data["server"] == "https://team-a.gpu.example.com"
    assert data["project"] == "ml"
    config = json.loads(data["config"])
    assert config == {"bearerToken": "tok3n", "tlsClientConfig": {"insecure": False, "caData": base64.b64encode(ca).decode()}}
    assert "project" not in cluster_secret("team-a", "argocd", "https://x", ca, "t")["data"]


def test_a_sleeping_tenant_is_suspended_not_degraded():
    asleep = {"type": "Asleep", "status": "True", "reason": "IdleGpus", "message": "GPUs idle for 30m",
              "lastTransitionTime": "2026-11-21T07:00:00Z"}
    result = run_health(tenant(status=ready("False", "Asleep", "the vCluster sleeps", extra=[asleep])))
    assert result == {"status": "Suspended", "message": "Asleep (IdleGpus): GPUs idle for 30m"}
    woken = {**asleep, "status": "False", "reason": "Awake"}
    assert run_health(tenant(status=ready("True", extra=[woken])))["status"] == "Healthy"


@pytest.mark.parametrize("ready_status, argo_status", [("True", "Healthy"), ("False", "Degraded"), ("Unknown", "Progressing")])
def test_both_served_versions_get_the_same_health(ready_status, argo_status):
    """Argo CD reads a GpuTenant in the version Git names (or the preferred v1beta1); the status the
    health check reads is the same in every version (api/status.py), so both give one answer."""
    from gputenant.api.conversion import convert

    alpha = tenant(status=ready(ready_status, "NoPoolForMode" if ready_status == "False" else "AllPartsReady"))
    alpha["spec"] = {"trust": "Internal", "owners": [{"kind": "User", "name": "a"}],
                     "sharing": {"mode": "HAMi", "hami": {"memoryMiB": 10240}}}
    beta = convert(alpha, "v1beta1")
    assert beta["spec"]["sharing"]["hami"] == {"memory": "10Gi"} and beta["status"] == alpha["status"]
    assert run_health(alpha) == run_health(beta) and run_health(beta)["status"] == argo_status
