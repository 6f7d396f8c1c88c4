"""Measuring instruments: API requests from the apiserver's audit log, Helm processes through a
counting shim, and a process's memory and CPU from /proc.

All three observe from outside the measured program, so the operator and the baseline scripts
are measured the same way and neither needs to report on itself.
"""

from __future__ import annotations

import os
import shlex
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlparse

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


# -- API requests ---------------------------------------------------------------------------------

@dataclass
class RequestTally:
    """Requests of one user, from audit events: totals by verb and by (verb, resource)."""

    by_verb: Counter = field(default_factory=Counter)
    by_resource: Counter = field(default_factory=Counter)
    listed_selectors: Counter = field(default_factory=Counter)
    """labelSelector of each LIST: tells which tenants a resync visited."""

    @property
    def total(self) -> int:
        return sum(self.by_verb.values())

    @property
    def writes(self) -> int:
        return sum(n for verb, n in self.by_verb.items() if verb in WRITE_VERBS)

    @property
    def reads(self) -> int:
        return self.total - self.writes

    def writes_by_resource(self) -> dict[str, int]:
        return {f"{verb} {resource}": n for (verb, resource), n in sorted(self.by_resource.items())
                if verb in WRITE_VERBS}


def tally_requests(events: Iterable[dict], user: str) -> RequestTally:
    """Count the audit events of `user`; watches are counted once when they end, like any request."""
    tally = RequestTally()
    for event in events:
        if event.get("user", {}).get("username") != user:
            continue
        verb = event.get("verb", "")
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", event.get("requestURI", ""))
        if ref.get("subresource"):
            resource = f"{resource}/{ref['subresource']}"
        tally.by_verb[verb] += 1
        tally.by_resource[(verb, resource)] += 1
        if verb == "list":
            selector = parse_qs(urlparse(event.get("requestURI", "")).query).get("labelSelector")
            if selector:
                tally.listed_selectors[selector[0]] += 1
    return tally


def kubeconfig_waits(events: Iterable[dict], user: str, secret_suffix: str) -> list[float]:
    """Seconds each tenant waited for its kubeconfig once its control plane served, sorted: per host
    namespace, from the last status write of a pod there (the control-plane pod turning ready; the
    LIGHTWEIGHT stand-in runs no other pod) before `user` first wrote the Secret named
    ``*<secret_suffix>`` to that write."""
    by_time = sorted(events, key=lambda event: event.get("requestReceivedTimestamp", ""))
    pod_status: dict[str, float] = {}
    waits: dict[str, float] = {}
    for event in by_time:
        ref = event.get("objectRef") or {}
        namespace = ref.get("namespace")
        if not namespace or namespace in waits or event.get("verb") not in WRITE_VERBS:
            continue
        at = audit_time(event["requestReceivedTimestamp"])
        if ref.get("resource") == "pods" and ref.get("subresource") == "status":
            pod_status[namespace] = at
        elif (ref.get("resource") == "secrets" and not ref.get("subresource") and namespace in pod_status
              and (ref.get("name") or "").endswith(secret_suffix)
              and event.get("user", {}).get("username") == user):
            waits[namespace] = at - pod_status[namespace]
    return sorted(waits.values())


def audit_time(stamp: str) -> float:
    """An audit event's RFC 3339 timestamp (microseconds, ``Z``) as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# -- Helm invocations -----------------------------------------------------------------------------

SHIM_TEMPLATE = """#!/bin/sh
# Counting shim written by bench/measure.py: logs each helm start and end, then runs the real helm.
printf 'start %s %s %s\\n' "$$" "$(date +%s.%N)" "$1" >> {log}
{real} "$@"
status=$?
printf 'end %s %s %s\\n' "$$" "$(date +%s.%N)" "$status" >> {log}
exit $status
"""


@dataclass
class HelmTally:
    by_subcommand: Counter
    max_concurrent: int

    @property
    def invocations(self) -> int:
        return sum(self.by_subcommand.values())

    @property
    def installs_or_upgrades(self) -> int:
        """`helm upgrade --install` and `helm install`: the calls that render and write a release."""
        return self.by_subcommand["upgrade"] + self.by_subcommand["install"]


class HelmShim:
    """A directory whose ``bin/helm`` logs every invocation and then runs the real helm.

    Put ``bin_dir`` first on PATH for scripts, and pass ``tools_dir`` as GPUTENANT_TOOLS_DIR to the
    operator, which looks for ``$GPUTENANT_TOOLS_DIR/bin/helm`` before PATH.
    """

    def __init__(self, directory: Path, real_helm: Path):
        self.tools_dir = directory
        self.bin_dir = directory / "bin"
        self.log_path = directory / "helm-invocations.log"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        shim = self.bin_dir / "helm"
        shim.write_text(SHIM_TEMPLATE.format(log=shlex.quote(str(self.log_path)),
                                             real=shlex.quote(str(real_helm))))
        shim.chmod(0o755)

    def offset(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def tally(self, since_offset: int = 0) -> HelmTally:
        return tally_helm_log(self._lines(since_offset))

    def _lines(self, since_offset: int) -> list[str]:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(since_offset)
                return log.read().decode().splitlines()
        except FileNotFoundError:
            return []


def tally_helm_log(lines: Iterable[str]) -> HelmTally:
    """Invocations by subcommand and the most helm processes that ran at the same moment."""
    by_subcommand: Counter = Counter()
    edges: list[tuple[float, int]] = []
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        kind, _pid, stamp = parts[:3]
        if kind == "start":
            by_subcommand[parts[3] if len(parts) > 3 else ""] += 1
            edges.append((float(stamp), 1))
        elif kind == "end":
            edges.append((float(stamp), -1))
    running = peak = 0
    for _, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        running += step
        peak = max(peak, running)
    return HelmTally(by_subcommand, peak)


# -- a process's memory and CPU -------------------------------------------------------------------

@dataclass(frozen=True)
class CpuSeconds:
    own: float
    """user + system time of the process itself."""
    children: float
    """user + system time of its children it has waited for (the helm processes it ran)."""

    @property
    def total(self) -> float:
        return self.own + self.children

    def __sub__(self, other: CpuSeconds) -> CpuSeconds:
        return CpuSeconds(self.own - other.own, self.children - other.children)


def cpu_seconds(pid: int, thread: int | None = None) -> CpuSeconds:
    """From /proc/<pid>/stat fields utime, stime, cutime, cstime (14-17, in clock ticks); with
    `thread`, that thread's own (/proc/<pid>/task/<thread>/stat)."""
    text = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return CpuSeconds((utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS)


def rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB from /proc/<pid>/status (VmRSS, VmHWM)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class RssSampler:
    """Samples a process's RSS in a thread; `peak` is the kernel's high-water mark (VmHWM), so a
    spike between samples is not missed."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                current, _ = rss_mib(self.pid)
            except (FileNotFoundError, ProcessLookupError, KeyError):
                return
            self.samples.append((time.monotonic(), current))
            self._stop.wait(self.interval)

    @property
    def peak(self) -> float:
        return rss_mib(self.pid)[1]

    def steady(self, since: float) -> float:
        """Median RSS of the samples taken at or after monotonic time `since`."""
        values = [rss for stamp, rss in self.samples if stamp >= since]
        if not values:
            return rss_mib(self.pid)[0]
        return statistics.median(values)


def paced(rate: float, count: int, call: Callable[[int], float]) -> tuple[list[float], float]:
    """`call(index)` for `count` indexes, started at `rate` per second from up to 32 threads; what
    each call returned (its latency) and the rate achieved."""
    start = time.monotonic()

    def one(index: int) -> float:
        delay = start + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return call(index)

    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(one, range(count)))
    return results, count / (time.monotonic() - start)
