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
import dataclasses
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
    measure_quota_change,
    measure_resync,
    onboard_with_operator,
    onboard_with_script,
)
from bench.source import Source, snapshot
from bench.tenants import REPO_ROOT, tenant_name
from bench.vcluster_shared import LIGHTWEIGHT_VCLUSTER_NOTICE

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


class Bench:
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

    @property
    def steady(self) -> SteadyResult | None:
        return max(self.steadies, key=lambda s: s.tenants, default=None)

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
        self.log(f"  -> vc Secrets after {report.fmt(result.seconds_to_secrets)}s"
                 + (f", Ready after {result.seconds_to_ready:.1f}s" if result.seconds_to_ready else "")
                 + f", {result.requests.total} API requests, {result.helm.invocations} helm")
        if memory_only:
            self.memory.append(MemoryResult(size, result.rss_steady_mib, result.rss_peak_mib, result.ready))
            for note in result.notes:
                self.log(f"  note: {note}")
        self.onboarding.append((repeat, result))
        self.save()

    def steady_state(self, plane, operator, shim, _sampler, result: OnboardingResult, with_quota: bool) -> None:
        self.log(f"  steady state: waiting one resync period ({operator.resync_seconds:.0f}s + 5s)")
        steady = measure_resync(plane, operator, shim, result.tenants)
        self.steadies.append(steady)
        self.log(f"  -> {steady.tenants_resynced} tenants resynced, {steady.requests.writes} writes, "
                 f"{steady.helm.invocations} helm")
        if not with_quota:
            return
        self.quota = measure_quota_change(plane, shim, tenant_name("bench-", 1))
        self.log(f"  quota change -> {self.quota.requests.writes} writes, {self.quota.helm.invocations} helm")

    # -- output -----------------------------------------------------------------------------------

    def print_report(self) -> None:
        print(f"# gpu-tenant-operator benchmark ({time.strftime('%Y-%m-%d %H:%M')})\n")
        print(machine_line())
        print(f"Measured source: {self.source.commit} (operator, renderer, CRD); the real vCluster chart "
              f"{self.source.local_chart}\n")
        print(LIGHTWEIGHT_VCLUSTER_NOTICE + "\n")
        if self.onboarding:
            self.print_onboarding()
        if self.steady:
            self.print_steady()
        if self.memory or any(r.rss_peak_mib for _, r in self.onboarding):
            self.print_memory()
        if self.webhook:
            print("## Guard webhook latency (bench/webhook_latency.py)\n")
            print(self.webhook["output"].rstrip() + "\n")
        self.print_growth()
        self.print_targets()
        if self.skipped:
            print(f"\nNot run (time budget of {self.args.budget_minutes:.0f} min spent): {'; '.join(self.skipped)}")

    def runs(self, size: int, variant: str) -> list[OnboardingResult]:
        return [r for _, r in self.onboarding if r.tenants == size and r.variant == variant]

    def best_parallel(self, size: int) -> str | None:
        parallel = {r.variant for _, r in self.onboarding if r.tenants == size and "xargs" in r.variant}
        return min(parallel, key=lambda v: report.median(r.seconds_to_secrets for r in self.runs(size, v)),
                   default=None)

    def paired(self, size: int, variant: str, field: str = "seconds_to_secrets") -> list[tuple]:
        by_repeat = {}
        for repeat, result in self.onboarding:
            if result.tenants == size:
                by_repeat.setdefault(repeat, {})[result.variant] = result
        return [(getattr(runs["operator"], field), runs[variant].seconds_to_secrets)
                for runs in by_repeat.values() if "operator" in runs and variant in runs]

    def print_onboarding(self) -> None:
        print("## Onboarding: N tenants applied at once (medians over repeats)\n")
        rows = []
        for size in sorted({r.tenants for _, r in self.onboarding}):
            for variant in sorted({r.variant for _, r in self.onboarding if r.tenants == size},
                                  key=lambda v: (v != "operator", v)):
                runs = self.runs(size, variant)
                rows.append([
                    variant, str(size), str(len(runs)),
                    report.fmt(report.median(r.seconds_to_secrets for r in runs)),
                    report.fmt(report.median(r.seconds_to_ready for r in runs)),
                    report.fmt(report.median(r.requests.total / size for r in runs)),
                    report.fmt(report.median(r.requests.writes / size for r in runs)),
                    report.fmt(report.median(r.helm.invocations / size for r in runs), 2),
                    report.fmt(report.median(r.helm.max_concurrent for r in runs)),
                    report.fmt(report.median(r.cpu.total / size if r.cpu else None for r in runs), 3),
                ])
        print(report.table(["variant", "N", "runs", "s to all vc Secrets", "s to all Ready", "API req/tenant",
                            "writes/tenant", "helm/tenant", "max helm at once", "CPU s/tenant"], rows))
        print("\n'vc Secrets' is the baseline's ready criterion (every vCluster up); 'Ready' additionally "
              "includes the operator issuing kubeconfigs and writing status. CPU: the operator process and the "
              "helm processes it ran; for scripts, every kubectl and helm they ran.\n")
        rows = []
        for size in sorted({r.tenants for _, r in self.onboarding}):
            if not self.runs(size, "serial script"):
                continue
            best = self.best_parallel(size)
            rows.append([str(size),
                         report.fmt(report.paired_ratio_median(self.paired(size, "serial script")), 2),
                         report.fmt(report.paired_ratio_median(self.paired(size, "serial script", "seconds_to_ready")), 2),
                         best or "-",
                         report.fmt(report.paired_ratio_median(self.paired(size, best)) if best else None, 2),
                         report.fmt(report.paired_ratio_median(self.paired(size, best, "seconds_to_ready")) if best else None, 2)])
        if rows:
            print("### Operator / baseline wall-time ratios (median of per-repeat ratios; < 1 = operator faster)\n")
            print(report.table(["N", "vs serial (vc Secrets)", "vs serial (Ready)", "best parallel",
                                "vs parallel (vc Secrets)", "vs parallel (Ready)"], rows) + "\n")

    def print_steady(self) -> None:
        steady, quota = self.steady, self.quota
        print(f"## Steady state: one resync period ({steady.window_seconds:.0f} s) with every tenant Ready\n")
        rows = [[f"unchanged resync, N={s.tenants}", str(s.tenants_resynced), str(s.requests.total),
                 str(s.requests.writes), str(s.helm.invocations), str(s.helm.installs_or_upgrades),
                 report.fmt(s.cpu.total, 2), report.fmt(s.apiserver_cpu, 2),
                 "; ".join(f"{k}: {v}" for k, v in s.requests.writes_by_resource().items()) or "-"]
                for s in sorted(self.steadies, key=lambda s: s.tenants)]
        if quota:
            rows.append([f"quota change on {quota.tenant}", "1", str(quota.requests.total), str(quota.requests.writes),
                         str(quota.helm.invocations), str(quota.helm.installs_or_upgrades), "-", "-",
                         "; ".join(f"{k}: {v}" for k, v in quota.requests.writes_by_resource().items()) or "-"])
        print(report.table(["window", "tenants visited", "API requests", "writes", "helm invocations",
                            "helm upgrades", "operator CPU s", "apiserver CPU s", "writes by verb and resource"], rows))
        reads = ", ".join(f"{verb} {n}" for verb, n in sorted(steady.requests.by_verb.items()))
        print(f"\nUnchanged resync at N={steady.tenants}, requests by verb: {reads}; per tenant visited: "
              f"{steady.requests.total / max(1, steady.tenants_resynced):.1f}.")
        if quota:
            print(f"Quota change: Ready at the new generation after {quota.seconds_to_ready:.1f} s; writes by "
                  f"namespace: {quota.write_namespaces or '-'} (the window also holds other tenants' timers).\n")

    def print_memory(self) -> None:
        rows = {m.tenants: m for m in self.memory}
        for _, result in self.onboarding:
            if result.variant == "operator" and result.tenants not in rows and result.rss_peak_mib:
                rows[result.tenants] = MemoryResult(result.tenants, result.rss_steady_mib, result.rss_peak_mib,
                                                    result.ready)
        print("## Operator memory (RSS of the `gputenant run` process)\n")
        print(report.table(["tenants", "Ready when read", "steady MiB", "peak MiB (VmHWM)"],
                           [[str(n), "-" if m.ready is None else str(m.ready), report.fmt(m.rss_steady_mib),
                             report.fmt(m.rss_peak_mib)] for n, m in sorted(rows.items())]) + "\n")
        notes = [f"- N={r.tenants} {r.variant}: {note}" for _, r in self.onboarding for note in r.notes]
        if notes:
            print("\n".join(notes) + "\n")

    def growth_rows(self) -> tuple[list[list[str]], list[int]]:
        operator_runs = [r for _, r in self.onboarding if r.variant == "operator" and r.seconds_to_ready is not None]
        sizes = sorted({r.tenants for r in operator_runs})
        metrics = {
            "operator s to all Ready": lambda r: r.seconds_to_ready,
            "operator API requests": lambda r: r.requests.total,
            "operator helm invocations": lambda r: r.helm.invocations,
            "operator CPU s": lambda r: r.cpu.total if r.cpu else None,
            "operator peak RSS MiB": lambda r: r.rss_peak_mib,
            "serial script s to vc Secrets": None,
            "onboarding apiserver CPU s (operator run)": lambda r: r.apiserver_cpu,
        }
        rows = []
        for name, metric in metrics.items():
            if metric is None:
                points = [(n, report.median(r.seconds_to_secrets for r in self.runs(n, "serial script"))) for n in sizes]
            else:
                points = [(n, report.median(metric(r) for r in operator_runs if r.tenants == n)) for n in sizes]
            points = [(n, value) for n, value in points if value is not None]
            if points:
                rows.append([name, *[report.fmt(dict(points).get(n)) for n in sizes],
                             report.growth_verdict(report.growth_exponent(points))])
        steady = {s.tenants: s for s in self.steadies}
        for name, metric in {"resync API requests": lambda s: float(s.requests.total),
                             "resync operator CPU s": lambda s: s.cpu.total,
                             "resync apiserver CPU s": lambda s: s.apiserver_cpu}.items():
            points = [(n, metric(steady[n])) for n in sizes if n in steady]
            if len(points) > 1:
                rows.append([name, *[report.fmt(dict(points).get(n), 2) for n in sizes],
                             report.growth_verdict(report.growth_exponent(points))])
        return rows, sizes

    def print_growth(self) -> None:
        rows, sizes = self.growth_rows()
        if len(sizes) < 2:
            return
        print("## How cost grows with N (medians; exponent k of a fit cost ~ N^k)\n")
        print(report.table(["cost", *[f"N={n}" for n in sizes], "growth"], rows) + "\n")

    def targets(self) -> list[tuple[str, str, str, str]]:
        rows = []
        sizes = sorted({r.tenants for _, r in self.onboarding if r.variant == "serial script"})
        if sizes:
            size = max(sizes)
            serial = report.paired_ratio_median(self.paired(size, "serial script", "seconds_to_ready"))
            rows.append(report.target(f"{size} tenants to Ready vs serial script", serial is not None and serial <= 0.5,
                                      f"{report.fmt(serial, 2)}x", "<= 0.5x"))
            best = self.best_parallel(size)
            if best:
                parallel = report.paired_ratio_median(self.paired(size, best, "seconds_to_ready"))
                rows.append(report.target(f"{size} tenants to Ready vs {best}", parallel is not None and parallel <= 1.0,
                                          f"{report.fmt(parallel, 2)}x", "<= 1.0x"))
        if self.steadies:
            writes = max(s.requests.writes for s in self.steadies)
            upgrades = max(s.helm.installs_or_upgrades for s in self.steadies)
            sizes = "/".join(str(s.tenants) for s in self.steadies)
            rows.append(report.target(f"writes on unchanged resync (N={sizes}, most)", writes == 0, str(writes), "0"))
            rows.append(report.target(f"Helm upgrades on unchanged resync (N={sizes}, most)", upgrades == 0,
                                      str(upgrades), "0"))
        if self.quota:
            rows.append(report.target("Helm upgrades on a quota change", self.quota.helm.installs_or_upgrades == 0,
                                      str(self.quota.helm.installs_or_upgrades), "0"))
        largest = max((m for m in self.memory), key=lambda m: m.tenants, default=None)
        if largest and largest.tenants:
            partial = largest.ready is not None and largest.ready < largest.tenants
            within = largest.rss_peak_mib <= 150
            measured = f"{largest.rss_peak_mib:.0f} MiB" + (
                f" (only {largest.ready}/{largest.tenants} Ready: a lower bound)" if partial else "")
            rows.append(report.target(f"operator RSS at {largest.tenants} tenants (peak)",
                                      None if partial and within else within, measured, "<= 150 MiB"))
        if self.webhook and self.webhook.get("p99_ms_at_50") is not None:
            p99 = self.webhook["p99_ms_at_50"]
            rows.append(report.target("webhook p99 at 50 pods/s", p99 <= 20, f"{p99:.1f} ms", "<= 20 ms"))
        return rows

    def print_targets(self) -> None:
        rows = self.targets()
        if rows:
            print("## Targets\n")
            print(report.table(["target", "goal", "measured", "verdict"], rows))

    def to_json(self) -> dict:
        def plain(value):
            """dataclasses.asdict would rebuild a Counter from its (key, count) pairs; walk by hand."""
            if dataclasses.is_dataclass(value):
                data = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
                for name in ("total", "writes", "reads", "invocations", "installs_or_upgrades"):
                    if hasattr(value, name):
                        data[name] = getattr(value, name)
                return data
            if isinstance(value, dict):
                return {" ".join(k) if isinstance(k, tuple) else str(k): plain(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            return value
        return {"machine": machine_facts(), "source": self.source.commit, "arguments": {k: (sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v)
                                                          for k, v in vars(self.args).items()},
                "onboarding": [{"repeat": repeat, **plain(result)} for repeat, result in self.onboarding],
                "steady": plain(self.steadies), "quota_change": plain(self.quota),
                "memory": plain(self.memory), "webhook": self.webhook,
                "targets": [dict(zip(("target", "goal", "measured", "verdict"), row, strict=True)) for row in self.targets()],
                "skipped": self.skipped}


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


def machine_facts() -> dict:
    memory_kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:"))
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    return {"nproc": os.cpu_count(), "memory_gib": round(memory_kib / 1024 ** 2, 1), "cpu": model,
            "load_average": os.getloadavg()}


def machine_line() -> str:
    facts = machine_facts()
    load = ", ".join(f"{value:.1f}" for value in facts["load_average"])
    return (f"Machine: {facts['nproc']} cores ({facts['cpu']}), {facts['memory_gib']} GiB; load average at the "
            f"end {load} (shared machine: compare ratios, not absolute times)")


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
