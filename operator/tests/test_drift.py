"""Which change of an owned object is drift (reconcile.drift), from what a metadata watch keeps of it
(kube.watch.seen)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gputenant import naming
from gputenant.api.hub import GpuTenant
from gputenant.kube.watch import Seen, seen
from gputenant.kubeconfigs import rotation_due
from gputenant.policy.choose import decide
from gputenant.reconcile.drift import OWNED_KINDS, by_own_hand, drifted_tenant
from gputenant.render import render_tenant
from kubeplane.builders import operator_config, sharing_pools, tenant

OURS = "gpu-tenant-operator"


def metadata(rv: str, *writes: tuple, subresource: dict[str, str] | None = None, tenant: str = "team-a") -> dict:
    """An object's metadata with `writes` as (manager, time[, fields]) managedFields entries;
    `subresource` maps a manager to the subresource it wrote."""
    entries = [{"manager": write[0], "operation": "Apply", "time": write[1],
                "fieldsV1": write[2] if len(write) > 2 else {"f:spec": {}},
                **({"subresource": (subresource or {})[write[0]]} if write[0] in (subresource or {}) else {})}
               for write in writes]
    return {"name": "quota", "namespace": "tenant-team-a", "resourceVersion": rv,
            "labels": {naming.TENANT_LABEL: tenant} if tenant else {}, "managedFields": entries}


def tenant_seen(found: dict) -> Seen:
    return seen(found, naming.TENANT_LABEL)


def test_only_the_owner_label_is_kept():
    found = metadata("7", (OURS, "2026-11-28T00:00:01Z"))
    found["labels"]["app.kubernetes.io/managed-by"] = OURS
    assert tenant_seen(found).owner == "team-a"
    assert seen(found, "another/label").owner == ""


def test_the_newest_write_outside_a_subresource_names_the_last_hand():
    written = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z"), ("kubectl-edit", "2026-11-28T00:00:05Z"),
                            ("kube-controller-manager", "2026-11-28T00:00:09Z"),
                            subresource={"kube-controller-manager": "status"}))
    assert written.last_writer == "kubectl-edit" and written.owner == "team-a"
    assert not by_own_hand(written, OURS)


def test_an_edit_by_another_hand_drifts_and_the_operators_own_write_does_not():
    before = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z")))
    edited = tenant_seen(metadata("8", (OURS, "2026-11-28T00:00:01Z"), ("kubectl-edit", "2026-11-28T00:00:05Z")))
    repaired = tenant_seen(metadata("9", ("kubectl-edit", "2026-11-28T00:00:05Z"), (OURS, "2026-11-28T00:00:06Z")))
    assert drifted_tenant(before, edited, OURS) == "team-a"
    assert drifted_tenant(edited, repaired, OURS) is None
    assert drifted_tenant(None, tenant_seen(metadata("1", (OURS, "2026-11-28T00:00:01Z"))), OURS) is None


def test_a_status_writer_of_the_operator_and_a_controllers_status_are_not_drift():
    before = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z")))
    status = tenant_seen(metadata("8", (OURS, "2026-11-28T00:00:01Z"), ("kube-controller-manager", "2026-11-28T00:00:09Z"),
                           subresource={"kube-controller-manager": "status"}))
    assert drifted_tenant(before, status, OURS) is None
    assert by_own_hand(tenant_seen(metadata("3", (f"{OURS}-pipeline", "2026-11-28T00:00:01Z"))), OURS)


def test_a_deletion_always_drifts_and_an_unmoved_version_never_does():
    before = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z")))
    assert drifted_tenant(before, None, OURS) == "team-a"
    other = tenant_seen(metadata("7", ("kubectl-edit", "2026-11-28T00:00:05Z")))
    assert drifted_tenant(other, other, OURS) is None


def test_a_tie_in_the_same_second_counts_as_another_hand():
    tie = tenant_seen(metadata("8", (OURS, "2026-11-28T00:00:05Z"), ("kubectl-edit", "2026-11-28T00:00:05Z")))
    assert tie.last_writer == f"{OURS},kubectl-edit"
    assert drifted_tenant(None, tie, OURS) == "team-a"


LABELS = {"f:metadata": {"f:labels": {"f:a": {}, "f:b": {}}}}
LABEL_A = {"f:metadata": {"f:labels": {"f:a": {}}}}


def test_a_field_another_hand_removed_drifts_though_it_left_no_entry():
    before = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z", LABELS)))
    removed = tenant_seen(metadata("8", (OURS, "2026-11-28T00:00:01Z", LABEL_A)))
    assert removed.last_writer == OURS
    assert drifted_tenant(before, removed, OURS) == "team-a"
    everything_removed = tenant_seen(metadata("9", ("kube-controller-manager", "2026-11-28T00:00:09Z"),
                                       subresource={"kube-controller-manager": "status"}))
    assert drifted_tenant(before, everything_removed, OURS) == "team-a"


def test_the_operators_own_apply_and_a_controllers_status_are_not_taken_for_a_removal():
    before = tenant_seen(metadata("7", (OURS, "2026-11-28T00:00:01Z", LABELS),
                           ("kube-controller-manager", "2026-11-28T00:00:02Z"),
                           subresource={"kube-controller-manager": "status"}))
    reapplied = tenant_seen(metadata("8", (OURS, "2026-11-28T00:00:05Z", LABEL_A),
                              ("kube-controller-manager", "2026-11-28T00:00:02Z"),
                              subresource={"kube-controller-manager": "status"}))
    status = tenant_seen(metadata("9", (OURS, "2026-11-28T00:00:05Z", LABEL_A),
                           ("kube-controller-manager", "2026-11-28T00:00:07Z"),
                           subresource={"kube-controller-manager": "status"}))
    assert drifted_tenant(before, reapplied, OURS) is None
    assert drifted_tenant(reapplied, status, OURS) is None


def test_an_object_without_the_tenant_label_names_no_tenant():
    assert drifted_tenant(None, tenant_seen(metadata("2", ("kubectl", "2026-11-28T00:00:05Z"), tenant="")), OURS) is None


@pytest.mark.parametrize("trust", ["Trusted", "Internal", "Untrusted"])
def test_the_watched_kinds_cover_every_kind_the_pipeline_renders(trust):
    config = operator_config(*sharing_pools())
    body = GpuTenant.model_validate(tenant("team-a", trust, argocd={"enabled": True}))
    rendered = render_tenant(body, decide("team-a", body.spec, config), config).objects
    kinds = {(obj["apiVersion"], obj["kind"]) for obj in rendered}
    assert kinds and kinds <= set(OWNED_KINDS), kinds - set(OWNED_KINDS)


def test_a_token_falls_due_when_four_fifths_of_its_lifetime_passed():
    expires = datetime(2026, 11, 29, tzinfo=UTC)
    assert rotation_due(expires, timedelta(hours=10)) == expires - timedelta(hours=2)
