"""kopf's bookkeeping kept in the operator's process (gputenant.kopf_state): what kopf compares a
tenant with to tell a creation from a change, each handler's progress, and the one annotation kopf
still writes, to be called again after a retry's delay. (Through the running operator, a spec
change and the tenant written once: e2e/tests/test_operator_changes.py.)"""

from __future__ import annotations

import kopf

from gputenant import naming
from gputenant.kopf_state import TOUCH_ANNOTATION, ProcessDiffBase, ProcessProgress
from gputenant.reconcile.memory import RETRY_ANNOTATION

FIELD_HANDLED = [("metadata", "annotations", annotation)
                 for annotation in (naming.ROTATE_ANNOTATION, naming.REVOKE_ANNOTATION, RETRY_ANNOTATION)]
"""The annotations `handlers.reconcile` is registered for with kopf.on.field."""


def tenant(uid: str = "uid-1", gpus: int = 1, **annotations: str) -> kopf.Body:
    return kopf.Body({"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant",
                      "metadata": {"name": "team-a", "uid": uid, "resourceVersion": "7", "annotations": annotations},
                      "spec": {"quotas": {"gpus": gpus}}, "status": {"observedGeneration": 1}})


def essence(body: kopf.Body, progress: kopf.ProgressStorage) -> kopf.BodyEssence:
    """What kopf compares, built as kopf's cause detection builds it."""
    return progress.clear(essence=ProcessDiffBase().build(body=body, extra_fields=FIELD_HANDLED))


def test_a_handled_tenant_is_compared_with_what_kopf_stored_and_nothing_is_written_to_it():
    storage = ProcessDiffBase()
    handled = tenant()
    assert storage.fetch(body=handled) is None  # never handled here: kopf sees a creation
    patch = kopf.Patch()
    storage.store(body=handled, patch=patch, essence=storage.build(body=handled))
    assert not patch
    changed = tenant(gpus=2)
    assert storage.fetch(body=changed) == storage.build(body=handled) != storage.build(body=changed)


def test_a_tenant_created_again_under_its_name_or_forgotten_has_no_diff_base():
    storage = ProcessDiffBase()
    first = tenant()
    storage.store(body=first, patch=kopf.Patch(), essence=storage.build(body=first))
    assert storage.fetch(body=tenant(uid="uid-2")) is None
    storage.forget("uid-1")
    assert storage.fetch(body=first) is None and len(storage) == 0


def test_a_stored_essence_is_not_changed_by_what_kopf_does_with_the_one_it_fetched():
    storage = ProcessDiffBase()
    first = tenant()
    storage.store(body=first, patch=kopf.Patch(), essence=storage.build(body=first))
    storage.fetch(body=first)["spec"]["quotas"]["gpus"] = 9
    assert storage.fetch(body=first)["spec"]["quotas"]["gpus"] == 1


def test_handler_progress_is_kept_per_tenant_and_handler_without_a_write():
    progress = ProcessProgress()
    patch = kopf.Patch()
    progress.store(key=kopf.HandlerId("reconcile"), record={"retries": 2, "delayed": "2026-11-26T08:00:00"},
                   body=tenant(), patch=patch)
    assert not patch
    assert progress.fetch(key=kopf.HandlerId("reconcile"), body=tenant()) == {"retries": 2,
                                                                             "delayed": "2026-11-26T08:00:00"}
    assert progress.fetch(key=kopf.HandlerId("reconcile"), body=tenant(uid="uid-2")) is None
    assert progress.fetch(key=kopf.HandlerId("reconcile/spec"), body=tenant()) is None
    progress.purge(key=kopf.HandlerId("reconcile"), body=tenant(), patch=patch)
    assert progress.fetch(key=kopf.HandlerId("reconcile"), body=tenant()) is None and not patch
    progress.store(key=kopf.HandlerId("delete"), record={"retries": 1}, body=tenant(), patch=patch)
    progress.forget("uid-1")
    assert len(progress) == 0


def test_the_wake_up_after_a_delay_changes_one_annotation_and_removes_it_when_patching_anyway():
    progress = ProcessProgress()
    touch = kopf.Patch()
    progress.touch(body=tenant(), patch=touch, value="2026-11-26T08:00:00")
    assert touch == {"metadata": {"annotations": {TOUCH_ANNOTATION: "2026-11-26T08:00:00"}}}
    touched = tenant(**{TOUCH_ANNOTATION: "2026-11-26T08:00:00"})
    removal = kopf.Patch()
    progress.touch(body=touched, patch=removal, value=None)
    assert removal == {"metadata": {"annotations": {TOUCH_ANNOTATION: None}}}
    untouched = kopf.Patch()
    progress.touch(body=tenant(), patch=untouched, value=None)
    assert not untouched


def test_kopf_sees_a_rotate_revoke_or_retry_request_and_not_its_own_wake_up():
    """kopf's annotation progress storage under the operator's prefix dropped gputenant.io/rotate-kubeconfigs
    and gputenant.io/retry from what kopf compares: their field handlers never ran."""
    progress = ProcessProgress()
    before = essence(tenant(), progress)
    assert essence(tenant(**{naming.ROTATE_ANNOTATION: "1"}), progress) != before
    assert essence(tenant(**{RETRY_ANNOTATION: "1"}), progress) != before
    assert essence(tenant(**{naming.REVOKE_ANNOTATION: "1"}), progress) != before
    assert essence(tenant(**{TOUCH_ANNOTATION: "2026-11-26T08:00:00"}), progress) == before
    kopfs_own = kopf.AnnotationsProgressStorage(prefix="gputenant.io")
    assert essence(tenant(**{naming.ROTATE_ANNOTATION: "1"}), kopfs_own) == essence(tenant(), kopfs_own)
