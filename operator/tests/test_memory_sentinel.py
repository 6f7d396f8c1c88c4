"""The GPU-memory sentinel's judgement (usage/sentinel.py) and its record on Nodes
(pools/memory_sentinel.py): pure, no cluster. The real Prometheus and API server run it in
e2e/tests/test_memory_sentinel.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gputenant.config.models import OperatorConfig
from gputenant.pools.memory_sentinel import RECORD_ANNOTATION, Finding, _record, format_unheld_memory, recorded
from gputenant.usage.sentinel import DeviceMemory, UnheldMemory, judge_unheld_memory, merge_devices

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=5)


def pod(name: str, phase: str = "Running", node: str = "gpu-1", namespace: str = "tenant-a", **metadata) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, **metadata}, "spec": {"nodeName": node},
            "status": {"phase": phase}}


def judge(devices, pods, previous=(), now=NOW):
    return judge_unheld_memory(list(devices), list(pods), list(previous), now, floor_mib=256, grace=GRACE)


def test_a_live_holder_is_never_reported_however_much_memory_and_however_long():
    device = DeviceMemory("gpu-1", "GPU-a", 79_000, holders=frozenset({("tenant-a", "train-0")}))
    old = [UnheldMemory("gpu-1", "GPU-a", "", 79_000, NOW - timedelta(days=3))]
    for holder in (pod("train-0"), pod("train-0", phase="Pending"),
                   pod("train-0", deletionTimestamp="2026-11-25T11:59:00Z")):
        verdict = judge([device], [holder], old)
        assert verdict.suspects == verdict.reported == [], holder


def test_memory_of_a_finished_or_vanished_pod_is_suspect_at_once_and_reported_after_the_grace_period():
    finished = DeviceMemory("gpu-1", "GPU-a", 4096, holders=frozenset({("tenant-a", "train-0")}))
    vanished = DeviceMemory("gpu-1", "GPU-b", 2048, holders=frozenset({("tenant-a", "gone-0")}))
    nameless = DeviceMemory("gpu-1", "GPU-c", 1024)
    first = judge([finished, vanished, nameless], [pod("train-0", phase="Succeeded")])
    assert [(s.gpu, s.since) for s in first.suspects] == [("GPU-a", NOW), ("GPU-b", NOW), ("GPU-c", NOW)]
    assert first.reported == []
    within = judge([finished, vanished, nameless], [pod("train-0", phase="Failed")], first.suspects,
                   NOW + GRACE - timedelta(seconds=1))
    assert within.reported == [] and [s.since for s in within.suspects] == [NOW] * 3
    past = judge([finished, vanished, nameless], [], within.suspects, NOW + GRACE)
    assert [(r.gpu, r.used_mib, r.since) for r in past.reported] == [("GPU-a", 4096, NOW), ("GPU-b", 2048, NOW),
                                                                     ("GPU-c", 1024, NOW)]


def test_memory_at_the_floor_a_released_gpu_and_a_gpu_held_again_leave_the_suspects():
    previous = [UnheldMemory("gpu-1", "GPU-a", "", 4096, NOW - GRACE * 2),
                UnheldMemory("gpu-1", "GPU-b", "", 4096, NOW - GRACE * 2)]
    released = DeviceMemory("gpu-1", "GPU-a", 256)
    held_again = DeviceMemory("gpu-1", "GPU-b", 4096, holders=frozenset({("tenant-b", "serve-0")}))
    verdict = judge([released, held_again], [pod("serve-0", namespace="tenant-b")], previous)
    assert verdict.suspects == []
    returns = judge([DeviceMemory("gpu-1", "GPU-a", 4096)], [], verdict.suspects)
    assert [s.since for s in returns.suspects] == [NOW], "released memory that comes back starts a new grace period"


def test_a_live_pod_on_the_node_naming_the_gpu_in_its_annotations_holds_it():
    device = DeviceMemory("gpu-1", "GPU-a", 4096)
    hami = pod("share-0", annotations={"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,20000,25:;"})
    elsewhere = pod("share-1", node="gpu-2", annotations={"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1,1:;"})
    assert judge([device], [hami]).suspects == []
    assert [s.gpu for s in judge([device], [elsewhere]).suspects] == ["GPU-a"]


def test_mig_instances_are_judged_each_and_series_of_one_device_merge():
    devices = merge_devices([
        ("gpu-1", "GPU-a", "1", 5000, "tenant-a", "small-0"),
        ("gpu-1", "GPU-a", "2", 3000, "", ""),
        ("gpu-1", "GPU-b", "", 1000, "tenant-a", "p-0"),
        ("gpu-1", "GPU-b", "", 3000, "tenant-b", "p-1"),
    ])
    assert [(d.gpu, d.instance, d.used_mib, sorted(d.holders)) for d in devices] == [
        ("GPU-a", "1", 5000, [("tenant-a", "small-0")]), ("GPU-a", "2", 3000, []),
        ("GPU-b", "", 3000, [("tenant-a", "p-0"), ("tenant-b", "p-1")])]
    verdict = judge(devices, [pod("small-0"), pod("p-1", namespace="tenant-b")])
    assert [(s.gpu, s.instance) for s in verdict.suspects] == [("GPU-a", "2")]


def test_the_node_record_round_trips_and_an_unreadable_one_reads_as_none():
    findings = [Finding(UnheldMemory("gpu-1", "GPU-a", "", 4096.4, NOW), NOW + GRACE),
                Finding(UnheldMemory("gpu-1", "GPU-a", "3", 300, NOW + GRACE), None)]
    node = {"metadata": {"name": "gpu-1", "annotations": {RECORD_ANNOTATION: _record(findings)}}}
    assert [(f.memory.key, f.memory.used_mib, f.memory.since, f.reported_at) for f in recorded(node)] == [
        (("gpu-1", "GPU-a", ""), 4096, NOW, NOW + GRACE), (("gpu-1", "GPU-a", "3"), 300, NOW + GRACE, None)]
    assert _record([]) is None
    for garbage in ("not json", '[{"gpu": "GPU-a"}]', '{"gpu": 1}', '[{"gpu": "x", "mib": 1, "since": "never"}]'):
        assert recorded({"metadata": {"name": "gpu-1", "annotations": {RECORD_ANNOTATION: garbage}}}) == []


def test_the_table_names_node_gpu_mib_and_since_when():
    table = format_unheld_memory([UnheldMemory("gpu-1", "GPU-a", "", 4096.4, NOW),
                                  UnheldMemory("gpu-2", "GPU-b", "3", 512, NOW)]).splitlines()
    assert table[0].split() == ["NODE", "GPU", "MIG-INSTANCE", "MIB", "HELD-BY-NO-ONE-SINCE"]
    assert table[1].split() == ["gpu-1", "GPU-a", "-", "4096", "2026-11-25T12:00:00Z"]
    assert table[2].split() == ["gpu-2", "GPU-b", "3", "512", "2026-11-25T12:00:00Z"]


def test_the_sentinel_defaults_to_reporting_only_and_its_settings_are_checked():
    settings = OperatorConfig().memory_sentinel
    assert (settings.floor_mi_b, settings.grace, settings.cordon) == (256, "5m", False)
    with pytest.raises(ValidationError, match="memorySentinel.grace"):
        OperatorConfig.model_validate({"memorySentinel": {"grace": "5 minutes"}})
