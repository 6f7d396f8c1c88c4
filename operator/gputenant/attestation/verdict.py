"""Judging a canary report against its pool's promise (pure).

Three outcomes, and the line between them: **Unattested** when nothing was measured (no report:
the pod was not scheduled, ran on a simulated node, timed out, or wrote something unreadable);
**Failed** when the canary ran with the pool's pod shape and what it measured breaks the promise,
including seeing no GPU at all (a pod of that shape would get none either); **Verified** when every
measurement keeps it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum

from gputenant.sharing.base import Promise

MEMORY_SLACK = 0.01
"""A reading up to 1% above the promised memory still keeps it (drivers round, MIG names round)."""
COMPUTE_SLACK = 0.5
"""HAMi-core's SM limit is a token bucket refilled from sampled utilisation: a measured share up to 1.5x
the promised one still keeps it; more means the limit did not throttle."""


class AttestationOutcome(str, Enum):
    VERIFIED = "Verified"
    FAILED = "Failed"
    UNATTESTED = "Unattested"


@dataclass(frozen=True)
class Verdict:
    outcome: AttestationOutcome
    message: str
    measured: dict[str, object] = field(default_factory=dict)
    """The numbers behind the verdict: devices, totalMiB, allocatedMiB, refused, forbidden*."""


def unattested(promise: Promise, why: str) -> Verdict:
    return Verdict(AttestationOutcome.UNATTESTED, f"pool {promise.pool} ({promise.mode}) is not attested: {why}")


def parse_report(text: str | None) -> dict | None:
    """The canary's JSON report from a termination message; None when there is none to read."""
    if not text:
        return None
    try:
        report = json.loads(text)
    except json.JSONDecodeError:
        return None
    return report if isinstance(report, dict) and "canary" in report else None


def judge(promise: Promise, report: dict | None, why_missing: str = "the canary left no report") -> Verdict:
    if report is None:
        return unattested(promise, why_missing)
    cuda = report.get("cuda") or {}
    if not cuda.get("ok"):
        nvml = report.get("nvml") or {}
        return Verdict(AttestationOutcome.FAILED, (
            f"pool {promise.pool} promises {promise.description}, but the canary saw no GPU: CUDA: "
            f"{cuda.get('error', 'no answer')}; NVML: {nvml.get('error') or 'ok'}"), {"devices": 0})
    measured = _measure(cuda)
    problems = list(_broken(promise, measured))
    evasion = _widened(promise, measured, report.get("forbidden") or {})
    if evasion and promise.resists_evasion:
        problems.append(evasion)
    numbers = _numbers(measured)
    if problems:
        return Verdict(AttestationOutcome.FAILED, f"pool {promise.pool} does not keep its promise of {promise.description}: "
                       + "; ".join(problems) + f" ({numbers})", measured)
    note = f"; {evasion} (this tier does not promise to resist that)" if evasion else ""
    return Verdict(AttestationOutcome.VERIFIED, f"pool {promise.pool} keeps its promise of {promise.description} "
                   f"({numbers}){note}", measured)


def _measure(cuda: dict) -> dict[str, object]:
    devices = cuda.get("devices") or []
    over = cuda.get("overCap") or {}
    compute = cuda.get("compute") or {}
    return {"devices": len(devices), "totalMiB": devices[0].get("totalMiB") if devices else None,
            "allocatedMiB": over.get("allocatedMiB"), "triedMiB": over.get("targetMiB"),
            "refused": over.get("refused"), "computeShare": compute.get("share"),
            "computeError": compute.get("error")}


def _ceiling(promise: Promise) -> float:
    return promise.memory_mib * (1 + MEMORY_SLACK)


def _broken(promise: Promise, measured: dict) -> list[str]:
    problems = []
    if measured["devices"] != promise.devices:
        problems.append(f"{measured['devices']} devices visible, {promise.devices} promised")
    total = measured["totalMiB"]
    if isinstance(total, int) and not promise.memory_mib * promise.memory_floor <= total <= _ceiling(promise):
        problems.append(f"total memory {total} MiB, {promise.memory_mib} MiB promised")
    problems.extend(_compute_broken(promise, measured))
    if not promise.capped:
        return problems
    if measured["refused"] is None:
        problems.append("the allocation past the promise was not tried")
    elif not measured["refused"]:
        problems.append(f"allocating {measured['allocatedMiB']} MiB, past the promised {promise.memory_mib} MiB, "
                        "was not refused")
    return problems


def _compute_broken(promise: Promise, measured: dict) -> list[str]:
    if promise.compute_percent is None:
        return []
    share = measured["computeShare"]
    if not isinstance(share, (int, float)):
        return [f"the compute share was not measured ({measured['computeError'] or 'no reading'})"]
    if share * 100 > promise.compute_percent * (1 + COMPUTE_SLACK):
        return [f"the process got {share * 100:.0f}% of the SMs, {promise.compute_percent}% promised"]
    return []


def _widened(promise: Promise, measured: dict, forbidden: dict) -> str | None:
    """How changed variables widened access, if they did; also recorded into `measured`."""
    cuda = forbidden.get("cuda") or {}
    if not cuda.get("ok"):
        return None
    changed = _measure(cuda)
    measured.update(forbiddenDevices=changed["devices"], forbiddenTotalMiB=changed["totalMiB"],
                    forbiddenAllocatedMiB=changed["allocatedMiB"], forbiddenComputeShare=changed["computeShare"])
    widened = []
    if changed["devices"] > measured["devices"]:
        widened.append(f"{changed['devices']} devices instead of {measured['devices']}")
    total = changed["totalMiB"]
    if isinstance(total, int) and total > _ceiling(promise):
        widened.append(f"total memory {total} MiB")
    if changed["refused"] is False:
        widened.append(f"{changed['allocatedMiB']} MiB allocated")
    share = changed["computeShare"]
    if promise.compute_percent is not None and isinstance(share, (int, float)) \
            and share * 100 > promise.compute_percent * (1 + COMPUTE_SLACK):
        widened.append(f"{share * 100:.0f}% of the SMs")
    if not widened:
        return None
    return f"a program that changes {', '.join(forbidden.get('changed') or [])} gets " + ", ".join(widened)


def _numbers(measured: dict) -> str:
    parts = [f"devices={measured['devices']}", f"totalMiB={measured['totalMiB']}"]
    if measured["refused"] is not None:
        parts += [f"allocatedMiB={measured['allocatedMiB']} of {measured['triedMiB']} tried",
                  f"refused={'yes' if measured['refused'] else 'no'}"]
    if measured.get("computeShare") is not None:
        parts.append(f"computeShare={measured['computeShare']}")
    if "forbiddenTotalMiB" in measured:
        parts.append(f"with forbidden variables: devices={measured['forbiddenDevices']}, "
                     f"totalMiB={measured['forbiddenTotalMiB']}, allocatedMiB={measured['forbiddenAllocatedMiB']}")
    return ", ".join(parts)
