"""Handing the record of an older release's status merge patches to the writers that own each field now."""

from gputenant.tenant_status.fields import split_merge_patched_status

OLD = {
    "manager": "gpu-tenant-operator", "operation": "Update", "apiVersion": "gputenant.io/v1alpha1",
    "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
    "fieldsV1": {"f:status": {
        ".": {}, "f:observedGeneration": {}, "f:usage": {".": {}, "f:allIdleSince": {}, "f:gpusHeld": {}},
        "f:conditions": {".": {}, 'k:{"type":"Ready"}': {".": {}, "f:status": {}},
                         'k:{"type":"IsolationVerified"}': {".": {}, "f:status": {}}}}},
}
SPEC = {"manager": "platform-engineer", "operation": "Apply", "apiVersion": "gputenant.io/v1alpha1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}


def by_manager(entries: list[dict]) -> dict[str, dict]:
    return {entry["manager"]: entry for entry in entries}


def test_each_field_goes_to_the_writer_that_applies_it_now():
    entries = by_manager(split_merge_patched_status([SPEC, OLD], "gpu-tenant-operator", "gpu-tenant-operator"))
    assert set(entries) == {"platform-engineer", "gpu-tenant-operator-pipeline", "gpu-tenant-operator-usage",
                            "gpu-tenant-operator-attestation"}
    assert entries["gpu-tenant-operator-usage"]["fieldsV1"] == {"f:status": {"f:usage": OLD["fieldsV1"]["f:status"]["f:usage"]}}
    assert entries["gpu-tenant-operator-attestation"]["fieldsV1"] == {
        "f:status": {"f:conditions": {'k:{"type":"IsolationVerified"}': {".": {}, "f:status": {}}}}}
    pipeline = entries["gpu-tenant-operator-pipeline"]
    assert (pipeline["operation"], pipeline["subresource"]) == ("Apply", "status")
    assert pipeline["fieldsV1"]["f:status"]["f:conditions"] == {".": {}, 'k:{"type":"Ready"}': {".": {}, "f:status": {}}}
    assert "f:usage" not in pipeline["fieldsV1"]["f:status"]


def test_a_writer_that_applied_already_keeps_one_entry_with_both_records():
    usage = {"manager": "gpu-tenant-operator-usage", "operation": "Apply", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:usage": {"f:window": {}}}}}
    entries = split_merge_patched_status([OLD, usage], "gpu-tenant-operator", "gpu-tenant-operator")
    [mine] = [e for e in entries if e["manager"] == "gpu-tenant-operator-usage"]
    assert mine["fieldsV1"] == {"f:status": {"f:usage": {
        "f:window": {}, ".": {}, "f:allIdleSince": {}, "f:gpusHeld": {}}}}


def test_nothing_to_hand_over_without_a_merge_patch_record():
    assert split_merge_patched_status([SPEC], "gpu-tenant-operator", "gpu-tenant-operator") is None
    spec_update = {**OLD, "subresource": None}
    assert split_merge_patched_status([spec_update], "gpu-tenant-operator", "gpu-tenant-operator") is None
