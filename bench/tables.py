"""The tables `python -m bench` prints (Markdown) and the JSON it writes, from the runs it measured:
onboarding medians and ratios against the scripts, the steady state, memory, growth with N and the
issue's targets met or missed. A mixin of `bench.__main__.Bench`, which holds the runs."""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

from bench import report
from bench.scenarios import MemoryResult, OnboardingResult, QuotaChangeResult, SteadyResult
from bench.source import Source
from bench.vcluster_shared import LIGHTWEIGHT_VCLUSTER_NOTICE

RSS_AT_REST_GOALS_MIB = {500: 150, 2000: 250}
"""Issue 41's memory targets by tenant count."""


class BenchTables:
    """Printing and serialising the runs a `Bench` holds."""

    args: argparse.Namespace
    onboarding: list[tuple[int, OnboardingResult]]
    steadies: list[SteadyResult]
    quota: QuotaChangeResult | None
    memory: list[MemoryResult]
    webhook: dict | None
    skipped: list[str]
    source: Source

    @property
    def steady(self) -> SteadyResult | None:
        return max(self.steadies, key=lambda s: s.tenants, default=None)

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
                    " / ".join(report.fmt(r.load_average) for r in runs),
                ])
        print(report.table(["variant", "N", "runs", "s to all vc Secrets", "s to all Ready", "API req/tenant",
                            "writes/tenant", "helm/tenant", "max helm at once", "CPU s/tenant",
                            "load avg at each run's end"], rows))
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
        self.print_kubeconfig_waits()

    def print_kubeconfig_waits(self) -> None:
        rows = [[str(result.tenants), str(repeat + 1), str(len(waits)), report.fmt(report.percentile(waits, 0.5)),
                 report.fmt(report.percentile(waits, 0.95)), report.fmt(max(waits))]
                for repeat, result in self.onboarding
                if result.variant == "operator" and (waits := result.kubeconfig_waits)]
        if rows:
            print("### A tenant's wait for its kubeconfig once its control plane serves (operator runs)\n")
            print(report.table(["N", "repeat", "tenants", "p50 s", "p95 s", "max s"], rows))
            print("\nPer tenant, from its control-plane pod's last status write to the operator's first write of "
                  "the owners' kubeconfig Secret (audit log).\n")

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
        for s in sorted(self.steadies, key=lambda s: s.tenants):
            if s.drift_repair_seconds:
                repairs = "; ".join(f"{what}: " + (f"{seconds:.1f} s" if seconds is not None else
                                                   "not repaired within the bound")
                                    for what, seconds in s.drift_repair_seconds.items())
                print(f"Drift repair at N={s.tenants}, after the window (another hand's change to the object "
                      f"back as rendered): {repairs}.")
        if quota:
            print(f"Quota change: Ready at the new generation after {quota.seconds_to_ready:.1f} s; writes by "
                  f"namespace: {quota.write_namespaces or '-'} (the window also holds other tenants' timers).\n")

    def print_memory(self) -> None:
        rows = {m.tenants: m for m in self.memory}
        for _, result in self.onboarding:
            if result.variant == "operator" and result.tenants not in rows and result.rss_peak_mib:
                rows[result.tenants] = MemoryResult(result.tenants, result.rss_steady_mib, result.rss_peak_mib,
                                                    result.ready)
        at_rest = {steady.tenants: steady.rss_at_rest_mib for steady in self.steadies}
        print("## Operator memory (RSS of the `gputenant run` process)\n")
        print(report.table(["tenants", "Ready when read", "10 s after all Ready, MiB", "peak MiB (VmHWM)",
                            "at rest after a resync period, MiB"],
                           [[str(n), "-" if m.ready is None else str(m.ready), report.fmt(m.rss_steady_mib),
                             report.fmt(m.rss_peak_mib), report.fmt(at_rest.get(n))]
                            for n, m in sorted(rows.items())]) + "\n")
        print("At rest: the median of the resync window's last 5 s, the onboarding burst's free memory handed "
              "back (gputenant.loops.memory); the peak is the burst's high-water mark.\n")
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
        for steady in self.steadies:
            goal = RSS_AT_REST_GOALS_MIB.get(steady.tenants)
            if goal is not None and steady.rss_at_rest_mib is not None:
                rows.append(report.target(f"operator RSS at {steady.tenants} tenants, at rest after a resync",
                                          steady.rss_at_rest_mib <= goal, f"{steady.rss_at_rest_mib:.0f} MiB",
                                          f"<= {goal} MiB"))
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
