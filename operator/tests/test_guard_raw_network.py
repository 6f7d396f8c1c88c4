"""No forged packets: the guard drops NET_RAW from every container of a tenant pod and refuses a pod
that keeps it or adds it back (guard.capabilities, rule raw-network), as a tenant would try it."""

from __future__ import annotations

import jsonpatch
import pytest

from gputenant.api.v1alpha1 import Trust
from gputenant.guard.capabilities import drop_patch, drops_spoofing
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.decision import Decision
from gputenant.sharing.base import PodRules

POLICY = Decision(trust=Trust.TRUSTED, possible=True, reason="test", message="test",
                  pod_rules=PodRules(gpu_resources=(), forbid_isolation_overrides=False))


def pod(*containers: dict, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "tenant-a"},
            "spec": {"containers": list(containers) or [{"name": "main", "image": "busybox"}], **spec}}


def admitted(manifest: dict, trust: Trust = Trust.TRUSTED) -> tuple[dict, list[str]]:
    """The pod as the guard's mutation leaves it, and the rules it then breaks."""
    patched = jsonpatch.apply_patch(manifest, mutate_pod(manifest, "a", POLICY))
    return patched, [v.rule for v in validate_pod(patched, "a", trust, POLICY)]


@pytest.mark.parametrize("security_context", [
    None, {}, {"runAsUser": 0}, {"capabilities": {}}, {"capabilities": {"add": ["CHOWN"]}},
    {"capabilities": {"drop": ["MKNOD"]}}, {"privileged": False, "capabilities": {"drop": []}},
])
def test_every_container_shape_leaves_admission_without_net_raw(security_context):
    main = {"name": "main", "image": "busybox", **({"securityContext": security_context} if security_context is not None else {})}
    init = {"name": "init", "image": "busybox"}
    patched, refused = admitted(pod(main, initContainers=[init]))
    for container in patched["spec"]["containers"] + patched["spec"]["initContainers"]:
        assert drops_spoofing(container), container
    assert "raw-network" not in refused
    if security_context and "runAsUser" in security_context:
        assert patched["spec"]["containers"][0]["securityContext"]["runAsUser"] == 0, "nothing else changes"


def test_a_container_that_drops_all_or_net_raw_already_is_left_alone():
    for drop in (["ALL"], ["NET_RAW"], ["CAP_NET_RAW", "MKNOD"], ["net_raw"]):
        manifest = pod({"name": "main", "image": "busybox", "securityContext": {"capabilities": {"drop": drop}}})
        assert drop_patch(manifest) == [], drop


@pytest.mark.parametrize("added", [["NET_RAW"], ["CAP_NET_RAW"], ["NET_ADMIN"], ["ALL"]])
@pytest.mark.parametrize("trust", list(Trust))
def test_a_container_that_adds_a_spoofing_capability_back_is_refused_at_every_trust(added, trust):
    manifest = pod({"name": "main", "image": "busybox", "securityContext": {"capabilities": {"add": added}}})
    _, refused = admitted(manifest, trust)
    assert refused == ["raw-network"]


def test_a_pod_that_reaches_validation_with_net_raw_is_refused_naming_the_field():
    """A webhook called after the guard could put NET_RAW back; validation runs after every mutation."""
    [violation] = [v for v in validate_pod(pod(), "a", Trust.INTERNAL, POLICY) if v.rule == "raw-network"]
    assert "containers main keeps NET_RAW" in violation.message
    assert "securityContext.capabilities.drop" in violation.message


def test_an_ephemeral_container_added_later_drops_net_raw_and_old_pods_stay_updatable():
    old = pod(ephemeralContainers=[{"name": "first", "image": "busybox"}])
    new = pod(ephemeralContainers=[{"name": "first", "image": "busybox"}, {"name": "debug", "image": "busybox"}])
    patch = mutate_pod(new, "a", POLICY, operation="UPDATE", subresource="ephemeralcontainers", old=old)
    patched = jsonpatch.apply_patch(new, patch)
    assert drops_spoofing(patched["spec"]["ephemeralContainers"][1])
    assert "securityContext" not in patched["spec"]["ephemeralContainers"][0], "an existing one cannot change"
    assert [v.rule for v in validate_pod(new, "a", Trust.TRUSTED, POLICY, operation="UPDATE", old=old)
            if v.rule == "raw-network"] == ["raw-network"], "the new debug container unpatched is refused"
    labelled = {**old, "metadata": {**old["metadata"], "labels": {"x": "y"}}}
    assert validate_pod(labelled, "a", Trust.TRUSTED, POLICY, operation="UPDATE", old=old) == [], \
        "a pod admitted before the rule keeps its label updates"
