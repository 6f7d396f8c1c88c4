"""`python -m bench` (or `make bench`): the operator against the scripts a user would write.

    python -m bench                      # sizes 50,100,200, 3 repeats, memory at 0/100/500, webhook
    python -m bench --sizes 50,100 --repeats 2 --skip webhook
    python -m bench --quick              # 6 tenants, 1 repeat, 10 s resync: a few minutes, end to end

Every onboarding run starts a fresh local control plane (kubeplane, audited), so no run sees
another's objects; variants alternate order between repeats so drift in machine load does not
favour one. The vCluster pod is SIMULATED by bench/vcluster_shared.py (see its docstring). Prints
tables (Markdown) and writes every figure to a JSON file. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import report
from bench.scenarios import (
    MemoryResult,
    OnboardingResult,
    QuotaChangeResult,
    SteadyResult,
    bench_plane,
    idle_memory,
    measure_drift_repair,
    measure_quota_change,
    measure_resync,
    onboard_with_operator,
    onboard_with_script,
)
from bench.source import Source, snapshot
from bench.tables import BenchTables
from bench.tenants import REPO_ROOT, tenant_name

SCENARIOS = ("onboarding", "steady", "memory", "webhook")
SECONDS_PER_TENANT_LIMIT = 10.0
"""Bound on one onboarding run (with a 180 s floor): far above what is measured, so a hang fails
instead of running forever."""


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write sizes as comma-separated integers, e.g. 50,100,200") from None
    if not sizes or sizes[0] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be non-negative integers, e.g. 50,100,200")
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[50, 100, 200], help="tenants per onboarding run (default 50,100,200)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per size and variant; medians are reported (default 3)")
    parser.add_argument("--parallelism", type=_sizes, default=[os.cpu_count() or 2],
                        help="xargs -P values for the parallel baseline; the best is reported (default: core count)")
    parser.add_argument("--memory-sizes", type=_sizes, default=[0, 100, 500],
                        help="tenant counts for operator RSS (default 0,100,500)")
    parser.add_argument("--memory-bound-seconds", type=float, default=600,
                        help="a memory-only onboarding (a size no onboarding run had, e.g. 500) reads RSS when all "
                        "tenants are Ready or after this long, whichever is first (default 600)")
    parser.add_argument("--resync-seconds", type=float, default=60, help="the operator's drift-timer interval (default 60)")
    parser.add_argument("--webhook-seconds", type=float, default=3, help="burst length per webhook rate (default 3)")
    parser.add_argument("--budget-minutes", type=float, default=60,
                        help="start no new run after this long; what is left is reported as skipped (default 60)")
    parser.add_argument("--skip", default="", help=f"comma-separated scenarios to skip: {', '.join(SCENARIOS)}")
    parser.add_argument("--quick", action="store_true",
                        help="6 tenants, 1 repeat, memory at 0 and 6, 10 s resync, 1 s webhook bursts")
    parser.add_argument("--workdir", type=Path, help="where plane logs, audit logs and results go "
                        "(default: a new temporary directory, kept for reading)")
    parser.add_argument("--source", default="HEAD",
                        help="commit whose operator, renderer and charts are measured, snapshot with git archive "
                        "(default HEAD); WORKTREE measures the working tree as it is; a directory with operator/gputenant is used as is")
    parser.add_argument("--json", type=Path, help="write all figures here (default: <workdir>/results.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.repeats, args.memory_sizes = [6], 1, [0, 6]
        args.resync_seconds, args.webhook_seconds = 10, 1
    unknown = set(filter(None, args.skip.split(","))) - set(SCENARIOS)
    if unknown:
        parser.error(f"--skip: unknown scenario(s) {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    args.skip = set(filter(None, args.skip.split(",")))
    return args


class Bench(BenchTables):
    def __init__(self, args: argparse.Namespace, workdir: Path, source: Source):
        self.args = args
        self.workdir = workdir
        self.source = source
        self.onboarding: list[tuple[int, OnboardingResult]] = []
        """(repeat, result) of every onboarding run."""
        self.steadies: list[SteadyResult] = []
        """One unchanged resync per size (the last repeat's operator run)."""
        self.quota: QuotaChangeResult | None = None
        self.memory: list[MemoryResult] = []
        self.webhook: dict | None = None
        self.skipped: list[str] = []
        self.started = time.monotonic()
        self.json_path = args.json or workdir / "results.json"

    def log(self, message: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def run_dir(self, *parts) -> Path:
        directory = self.workdir.joinpath(*map(str, parts))
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    # -- scenarios --------------------------------------------------------------------------------

    def run(self) -> None:
        """Repeat-major, so that when the time budget runs out every scenario has been measured once:
        the first pass covers every size (with its steady state), memory and the webhook; later
        passes add repeats of the onboarding runs."""
        args = self.args
        measure_steady = "steady" not in args.skip
        largest = max(args.sizes)
        for repeat in range(args.repeats):
            for size in args.sizes:
                variants = ["operator", *[p for p in [1, *args.parallelism]]]
                if "onboarding" in args.skip:
                    variants = ["operator"] if measure_steady and repeat == 0 else []
                rotate = repeat % len(variants) if variants else 0
                for variant in variants[rotate:] + variants[:rotate]:
                    with_steady = variant == "operator" and measure_steady and repeat == 0
                    if self.within_budget(f"N={size} repeat {repeat + 1} {variant}"):
                        self.onboard(size, repeat, variant, with_steady, with_quota=size == largest)
            if repeat == 0:
                self.run_memory_and_webhook()

    def within_budget(self, what: str) -> bool:
        """Whether to start `what`; runs past --budget-minutes are listed as skipped instead."""
        if time.monotonic() - self.started < self.args.budget_minutes * 60:
            return True
        self.skipped.append(what)
        return False

    def run_memory_and_webhook(self) -> None:
        """Idle memory and the webhook first (minutes), then memory at sizes no onboarding run had
        (an operator-only onboarding each, the most expensive runs)."""
        args = self.args
        if "memory" not in args.skip and 0 in args.memory_sizes and self.within_budget("memory with 0 tenants"):
            self.log("operator RSS with no tenants")
            with bench_plane(self.run_dir("memory-0"), self.source) as plane:
                self.memory.append(idle_memory(plane, self.run_dir("memory-0"), self.source))
            self.save()
        if "webhook" not in args.skip and self.within_budget("webhook latency"):
            self.webhook = run_webhook_benchmark(args.webhook_seconds, self.log)
            self.save()
        if "memory" not in args.skip:
            measured = {r.tenants for _, r in self.onboarding if r.variant == "operator"}
            for size in args.memory_sizes:
                if size and size not in measured and self.within_budget(f"memory with {size} tenants"):
                    self.onboard(size, 0, "operator", False, memory_only=True)

    def save(self) -> None:
        """Write every figure so far, so an interrupted run still leaves its measurements."""
        self.json_path.write_text(json.dumps(self.to_json(), indent=2, default=str))

    def onboard(self, size: int, repeat: int, variant, with_steady: bool, memory_only: bool = False,
                with_quota: bool = False) -> None:
        """One onboarding run on a fresh plane. A memory-only run is bounded by --memory-bound-seconds
        and reports RSS with however many tenants got Ready by then."""
        name = "operator" if variant == "operator" else f"script-p{variant}"
        workdir = self.run_dir(f"n{size}", f"r{repeat}", name)
        timeout = self.args.memory_bound_seconds if memory_only else max(180.0, SECONDS_PER_TENANT_LIMIT * size)
        self.log(f"N={size} repeat {repeat + 1}: {name}{' + steady state' if with_steady else ''}")
        with bench_plane(workdir, self.source) as plane:
            if variant == "operator":
                then = (lambda *parts: self.steady_state(*parts, with_quota=with_quota)) if with_steady else None
                result = onboard_with_operator(plane, workdir, self.source, size,
                                               resync_seconds=self.args.resync_seconds, timeout=timeout, then=then,
                                               partial_ok=memory_only)
            else:
                result = onboard_with_script(plane, workdir, self.source, size, variant, timeout)
            result.load_average = os.getloadavg()[0]
        self.log(f"  -> vc Secrets after {report.fmt(result.seconds_to_secrets)}s"
                 + (f", Ready after {result.seconds_to_ready:.1f}s" if result.seconds_to_ready else "")
                 + f", {result.requests.total} API requests, {result.helm.invocations} helm, "
                 f"load average {result.load_average:.1f}")
        if memory_only:
            self.memory.append(MemoryResult(size, result.rss_steady_mib, result.rss_peak_mib, result.ready))
            for note in result.notes:
                self.log(f"  note: {note}")
        self.onboarding.append((repeat, result))
        self.save()

    def steady_state(self, plane, operator, shim, sampler, result: OnboardingResult, with_quota: bool) -> None:
        self.log(f"  steady state: waiting one resync period ({operator.resync_seconds:.0f}s + 5s)")
        steady = measure_resync(plane, operator, shim, result.tenants)
        steady.rss_at_rest_mib = sampler.steady(time.monotonic() - 5)
        self.steadies.append(steady)
        self.log(f"  -> {steady.tenants_resynced} tenants resynced, {steady.requests.writes} writes, "
                 f"{steady.helm.invocations} helm")
        steady.drift_repair_seconds = measure_drift_repair(plane, tenant_name("bench-", 2))
        self.log(f"  drift repair: {steady.drift_repair_seconds}")
        if not with_quota:
            return
        self.quota = measure_quota_change(plane, shim, tenant_name("bench-", 1))
        self.log(f"  quota change -> {self.quota.requests.writes} writes, {self.quota.helm.invocations} helm")

    # -- output -----------------------------------------------------------------------------------


def run_webhook_benchmark(seconds: float, log) -> dict:
    """bench/webhook_latency.py (the admission guard's own benchmark) at 10, 50 and 100 pods/s."""
    log(f"guard webhook latency at 10/50/100 pods/s ({seconds:.0f} s bursts)")
    answer = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "webhook_latency.py"),
                             "--rates", "10", "50", "100", "--seconds", str(seconds)],
                            capture_output=True, text=True, timeout=900, cwd=REPO_ROOT,
                            env={k: v for k, v in os.environ.items() if k != "KUBEPLANE_DIR"})
    if answer.returncode:
        raise RuntimeError(f"bench/webhook_latency.py failed ({answer.returncode}):\n{answer.stderr[-2000:]}")
    result = {"output": answer.stdout, "p50_ms_at_50": None, "p99_ms_at_50": None}
    for line in answer.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[0] == "50" and re.fullmatch(r"[\d.]+", cells[3]):
            result["p50_ms_at_50"], result["p99_ms_at_50"] = float(cells[3]), float(cells[4])
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gputenant-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        source = snapshot(args.source, workdir / "source")
    except ValueError as error:
        print(f"python -m bench: {error}", file=sys.stderr)
        return 2
    bench = Bench(args, workdir, source)
    failed = False
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        bench.run()
    except (RuntimeError, TimeoutError, KeyboardInterrupt) as error:
        failed = True
        bench.log(f"STOPPED: {error!r}; reporting what was measured")
    bench.print_report()
    bench.save()
    bench.log(f"figures written to {bench.json_path}; logs in {workdir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
