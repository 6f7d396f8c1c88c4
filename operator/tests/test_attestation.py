"""Isolation attestation, the pure parts: each pool's promise, the canary pod's shape (admitted by
the guard's own rules as a tenant pod of that pool), the canary's report when no GPU is there, and
the verdicts on reports of each kind."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_guard_rules import apply_patch

from gputenant.api.v1alpha1 import GpuTenantSpec, Trust
from gputenant.attestation import canary
from gputenant.attestation.promise import canary_pod, fingerprint, promise_of
from gputenant.attestation.run import Attestation, Attestor, tenant_condition
from gputenant.attestation.verdict import AttestationOutcome, judge, parse_report
from gputenant.config.models import OperatorConfig
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.policy.choose import decide

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
POOLS = {pool.name: pool for pool in CONFIG.pools}
STRONGEST_FIRST = (Trust.UNTRUSTED, Trust.INTERNAL, Trust.TRUSTED)


def report(devices=(9984,), allocated=9728, refused=True, forbidden=None, tried=11264, compute=None) -> dict:
    """A canary report as canary.py writes it, with one CUDA view (and its compute reading, when measured)."""
    return {"canary": 1, "expectMemoryMiB": 10240, "nvml": {"ok": True, "driver": "580.65", "devices": []},
            "cuda": cuda(devices, allocated, refused, tried, compute), **({"forbidden": forbidden} if forbidden else {})}


def cuda(devices, allocated, refused, tried=11264, compute=None) -> dict:
    view = {"ok": True, "devices": [{"name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "totalMiB": m} for m in devices],
            "overCap": {"targetMiB": tried, "allocatedMiB": allocated, "refused": refused,
                        "error": "CUDA_ERROR_OUT_OF_MEMORY" if refused else None}}
    return {**view, "compute": compute} if compute is not None else view


def share(value: float) -> dict:
    """The canary's compute reading: `value` of the whole GPU's speed (2 ms kernels, 250 of them)."""
    return {"seconds": round(0.5 / value, 4), "wholeGpuSeconds": 0.5, "share": value}


def test_promises_follow_the_pool_mechanism():
    mig, hami = promise_of(POOLS["h100-mig-small"]), promise_of(POOLS["l4-hami"])
    assert (mig.devices, mig.memory_mib, mig.resources, mig.resists_evasion) == (
        1, 10240, {"nvidia.com/mig-1g.10gb": "1"}, True)
    assert (hami.memory_mib, hami.resources, hami.annotations, hami.resists_evasion) == (
        5758, {}, {"gpu-fraction": "0.25"}, False)
    assert promise_of(POOLS["a100-timeslice"]).memory_mib == 81920
    assert promise_of(POOLS["h100-exclusive"]).resources == {"nvidia.com/gpu": "1"}


@pytest.mark.parametrize("pool_name", sorted(POOLS))
def test_the_canary_pod_is_what_the_guard_admits_for_a_tenant_on_the_pool(pool_name):
    """The canary's spec, sent from a tenant namespace, passes the guard of the strongest trust the
    pool serves, and the guard's mutation adds nothing but the tenant's queue label (and, for a share, the
    guard's KAI ConfigMap prefix): its shape is a tenant's. (Its metadata is the operator's bookkeeping,
    gputenant.io keys no tenant may set.)"""
    pool = POOLS[pool_name]
    trust = next(t for t in STRONGEST_FIRST if pool.trust_levels is None or t in pool.trust_levels)
    mode = {"TimeSlicing": "TimeSlicing", "HAMi": "HAMi", "MIG": "MIG", "Exclusive": "Exclusive"}[pool.mode.value]
    trust = trust if mode != "TimeSlicing" else Trust.TRUSTED
    if mode == "HAMi" and trust is Trust.UNTRUSTED:
        trust = Trust.INTERNAL
    spec = GpuTenantSpec.model_validate({"trust": trust.value, "owners": [{"kind": "Group", "name": "a"}],
                                         "gpu": {"quota": 1, "pool": pool.name}, "sharing": {"mode": mode}})
    decision = decide("team-a", spec, CONFIG)
    assert decision.possible, decision.message
    canary = canary_pod(pool, "tenant-team-a", "localhost/gputenant/isolation-canary:1")
    requests = {key: value for key, value in canary["metadata"]["annotations"].items()
                if not key.startswith("gputenant.io/")}
    pod = {"metadata": {"name": canary["metadata"]["name"], "namespace": "tenant-team-a", "annotations": requests},
           "spec": canary["spec"]}
    patch = mutate_pod(pod, "team-a", decision)
    # a fraction canary already carries the KAI prefix the guard would give it
    assert patch == [{"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/queue": "team-a"}}]
    assert validate_pod(apply_patch(pod, patch), "team-a", trust, decision, config=CONFIG) == []


def test_the_fingerprint_changes_with_the_pool_and_the_image():
    pool = POOLS["h100-mig-small"]
    changed = pool.model_copy(update={"tolerations": []})
    assert len({fingerprint(pool, "a"), fingerprint(pool, "b"), fingerprint(changed, "a")}) == 3
    assert canary_pod(pool, "ns", "a")["metadata"]["annotations"]["gputenant.io/attestation-fingerprint"] == \
        fingerprint(pool, "a")


def test_no_report_is_unattested():
    verdict = judge(promise_of(POOLS["h100-mig-small"]), None, "its canary was bound to node gpu-1, which is simulated")
    assert verdict.outcome is AttestationOutcome.UNATTESTED
    assert verdict.message == ("pool h100-mig-small (MIG) is not attested: its canary was bound to node gpu-1, "
                               "which is simulated")


@pytest.mark.parametrize("text", [None, "", "not json", '{"other": 1}', "[1]"])
def test_anything_but_a_canary_report_reads_as_none(text):
    assert parse_report(text) is None


def test_a_slice_of_the_promised_size_that_refuses_more_is_verified_with_its_numbers():
    verdict = judge(promise_of(POOLS["h100-mig-small"]), report())
    assert verdict.outcome is AttestationOutcome.VERIFIED
    assert verdict.measured == {"devices": 1, "totalMiB": 9984, "allocatedMiB": 9728, "triedMiB": 11264,
                                "refused": True, "computeShare": None, "computeError": None}
    assert "devices=1, totalMiB=9984, allocatedMiB=9728 of 11264 tried, refused=yes" in verdict.message


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"devices": (81559,)}, "total memory 81559 MiB, 10240 MiB promised"),
    ({"devices": (4864,)}, "total memory 4864 MiB, 10240 MiB promised"),
    ({"devices": (9984, 9984)}, "2 devices visible, 1 promised"),
    ({"allocated": 11264, "refused": False}, "allocating 11264 MiB, past the promised 10240 MiB, was not refused"),
])
def test_a_broken_promise_fails_naming_what_was_measured(kwargs, problem):
    verdict = judge(promise_of(POOLS["h100-mig-small"]), report(**kwargs))
    assert verdict.outcome is AttestationOutcome.FAILED
    assert problem in verdict.message


def test_a_canary_that_sees_no_gpu_fails_rather_than_being_unattested():
    """It ran with the pool's shape: a tenant pod of that shape would see no GPU either."""
    no_gpu = {"canary": 1, "nvml": {"ok": False, "error": "libnvidia-ml.so.1 not loadable"},
              "cuda": {"ok": False, "error": "libcuda.so.1 not loadable"}}
    verdict = judge(promise_of(POOLS["h100-exclusive"]), no_gpu)
    assert verdict.outcome is AttestationOutcome.FAILED
    assert "saw no GPU: CUDA: libcuda.so.1 not loadable; NVML: libnvidia-ml.so.1 not loadable" in verdict.message


def test_widening_by_changed_variables_fails_mig_but_is_only_reported_for_hami():
    widened = {"changed": ["CUDA_DEVICE_MEMORY_LIMIT"], "cuda": cuda((81559,), 6782, False, 6782, share(0.97))}
    hami = judge(promise_of(POOLS["l4-hami"]),
                 report(devices=(5758,), allocated=5632, tried=6782, forbidden=widened, compute=share(0.26)))
    assert hami.outcome is AttestationOutcome.VERIFIED
    assert ("a program that changes CUDA_DEVICE_MEMORY_LIMIT gets total memory 81559 MiB, 6782 MiB allocated, "
            "97% of the SMs (this tier does not promise to resist that)") in hami.message
    assert hami.measured["forbiddenTotalMiB"] == 81559
    mig = judge(promise_of(POOLS["h100-mig-small"]),
                report(forbidden={"changed": ["NVIDIA_VISIBLE_DEVICES"], "cuda": cuda((9984, 9984), 9728, True)}))
    assert mig.outcome is AttestationOutcome.FAILED
    assert "a program that changes NVIDIA_VISIBLE_DEVICES gets 2 devices instead of 1" in mig.message


def test_the_canary_program_without_a_driver_reports_no_gpu(tmp_path):
    """The program itself, run here (no NVIDIA driver): one JSON report on stdout and in the
    termination file, which the judge reads as a failed promise."""
    log = tmp_path / "termination-log"
    done = subprocess.run([sys.executable, canary.__file__, "--expect-memory-mib", "1024",
                           "--termination-log", str(log)], capture_output=True, text=True, timeout=60, check=True)
    printed = json.loads(done.stdout)
    assert json.loads(log.read_text()) == printed
    assert printed["cuda"]["ok"] is False and printed["nvml"]["ok"] is False
    assert printed["forbidden"]["changed"] == sorted(canary.FORBIDDEN_OVERRIDES)
    assert judge(promise_of(POOLS["h100-exclusive"]), parse_report(log.read_text())).outcome is AttestationOutcome.FAILED


def test_a_report_too_long_for_a_termination_message_drops_the_nvml_device_list():
    big = {"canary": 1, "nvml": {"ok": True, "devices": [{"name": "x" * 90}] * 60}, "cuda": {"ok": False}}
    text = canary.compact(big)
    assert len(text) <= 4000 and "devices" not in json.loads(text)["nvml"]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_pool_is_due_again_after_the_interval_or_when_its_config_changes():
    clock, pool = Clock(), POOLS["h100-mig-small"]
    attestor = Attestor(image="canary:1", namespace="ops", interval=600, clock=clock)
    assert attestor.due(pool)
    attestor.results[pool.name] = Attestation(pool.name, judge(promise_of(pool), report()),
                                              fingerprint(pool, "canary:1"), clock())
    assert not attestor.due(pool)
    assert attestor.due(pool.model_copy(update={"tolerations": []}))
    clock.now += timedelta(seconds=600)
    assert attestor.due(pool)


def test_tenants_hear_a_withheld_promise_and_unattested_pools_say_so():
    clock, pool = Clock(), POOLS["h100-mig-small"]
    attestor = Attestor(image="canary:1", namespace="ops", interval=600, clock=clock)
    assert tenant_condition(attestor, pool.name) == (
        "Unknown", "Unattested", "the isolation this tier promises is not verified: pool h100-mig-small has not "
        "been attested yet")
    failed = judge(promise_of(pool), report(devices=(81559,)))
    attestor.results[pool.name] = Attestation(pool.name, failed, fingerprint(pool, "canary:1"), clock())
    status, reason, message = tenant_condition(attestor, pool.name)
    assert (status, reason) == ("False", "AttestationFailed")
    assert message.startswith("the isolation this tier promises is not verified: pool h100-mig-small does not keep")
    attestor.results[pool.name] = Attestation(pool.name, judge(promise_of(pool), report()), "f", clock())
    assert tenant_condition(attestor, pool.name)[:2] == ("True", "Attested")
    assert attestor.summary(pool.name)["measured"]["totalMiB"] == 9984


def test_the_operator_attests_only_when_told_the_canary_image(monkeypatch):
    from gputenant import handlers
    from gputenant.config.settings import OperatorSettings

    monkeypatch.delenv("GPUTENANT_ATTESTATION_IMAGE", raising=False)
    assert handlers.attestor_from_settings(CONFIG, OperatorSettings()) is None
    monkeypatch.setenv("GPUTENANT_ATTESTATION_IMAGE", "registry/canary:1")
    monkeypatch.setenv("GPUTENANT_ATTESTATION_QUEUE", "attestation")
    attestor = handlers.attestor_from_settings(CONFIG, OperatorSettings())
    assert attestor is not None
    assert (attestor.image, attestor.namespace, attestor.interval, attestor.queue) == (
        "registry/canary:1", CONFIG.operator_namespace, 3600.0, "attestation")
    assert handlers.attestor_from_settings(CONFIG.model_copy(update={"pools": []}), OperatorSettings()) is None


def test_time_slicing_is_never_filled_by_the_canary_and_needs_no_refusal():
    """Its memory is the neighbours' too: the canary allocates nothing there."""
    pool = POOLS["a100-timeslice"]
    command = canary_pod(pool, "ops", "canary:1")["spec"]["containers"][0]["command"]
    assert command[command.index("--over-mib") + 1] == "0"
    shared = {"canary": 1, "cuda": {"ok": True, "devices": [{"name": "NVIDIA A100-SXM4-80GB", "totalMiB": 81050}]}}
    verdict = judge(promise_of(pool), shared)
    assert verdict.outcome is AttestationOutcome.VERIFIED, verdict.message
    assert verdict.message.endswith("(devices=1, totalMiB=81050)")



def test_the_canary_allocates_past_the_expectation_only_when_told_how_far():
    assert canary.allocation_target(10240, 1024) == 11264
    assert canary.allocation_target(10240, 0) is None
    assert canary.allocation_target(None, 1024) is None


def test_a_hami_share_must_see_exactly_its_cap_and_about_its_compute_share():
    """l4-hami (23034 MiB GPUs) at the default corePercent 25: 5758 MiB and 25% of the SMs."""
    promise = promise_of(POOLS["l4-hami"])
    assert (promise.memory_mib, promise.compute_percent) == (5758, 25)
    kept = judge(promise, report(devices=(5758,), allocated=5632, tried=6782, compute=share(0.3)))
    assert kept.outcome is AttestationOutcome.VERIFIED and "computeShare=0.3" in kept.message
    for reading, problem in [
        (report(devices=(5500,), allocated=5120, tried=6782, compute=share(0.25)), "total memory 5500 MiB, 5758 MiB"),
        (report(devices=(5758,), allocated=5632, tried=6782, compute=share(0.9)), "got 90% of the SMs, 25% promised"),
        (report(devices=(5758,), allocated=5632, tried=6782), "the compute share was not measured (no reading)"),
        (report(devices=(5758,), allocated=5632, tried=6782, compute={"error": "cuModuleLoadData: CUDA_ERROR_X"}),
         "not measured (cuModuleLoadData: CUDA_ERROR_X)"),
    ]:
        verdict = judge(promise, reading)
        assert verdict.outcome is AttestationOutcome.FAILED and problem in verdict.message, verdict.message


def test_only_a_hami_canary_measures_compute():
    hami = canary_pod(POOLS["l4-hami"], "ns", "img")["spec"]["containers"][0]["command"]
    mig = canary_pod(POOLS["h100-mig-small"], "ns", "img")["spec"]["containers"][0]["command"]
    assert "--measure-compute" in hami and "--measure-compute" not in mig


def test_a_tenant_on_an_unattested_hami_pool_is_told_its_caps_are_best_effort():
    attestor = Attestor(image="img", namespace="ops", interval=60)
    status, reason, message = tenant_condition(attestor, "l4-hami", "HAMi")
    assert (status, reason) == ("Unknown", "Unattested")
    assert message.startswith("HAMi-core's memory and compute caps are best effort and not yet attested on a GPU")
    assert tenant_condition(attestor, "h100-mig-small", "MIG")[2].startswith(
        "the isolation this tier promises is not verified")
