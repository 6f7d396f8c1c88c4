"""`python -m bench.churn_memory`: does the operator's memory come back after tenants come and go?

One operator (fresh audited plane, the benchmark's LIGHTWEIGHT shared vCluster stand-in, helm through the
counting shim) onboards and offboards tenants, `--batch` at a time, each with a name of its own,
until `--cycles` tenants have been created and deleted; no tenant is left at the end. It prints
the operator's RSS before the first tenant, after the first `--baseline` cycles and after all of
them (each the median of 5 s of samples, after 10 s of rest), and the growth per cycle in
between. Issue 17's target: RSS after 200 cycles within 3 MiB of RSS after the first 20.

With `--tracemalloc N` the operator runs under tracemalloc (N frames; it costs memory and time, so
its RSS figures are not the ones to quote) and the script prints what grew between the baseline
and the end, by line and by call stack, from snapshots taken after a full garbage collection.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

from bench.measure import HelmShim, RssSampler
from bench.memory_profile import SITECUSTOMIZE, read_snapshot
from bench.scenarios import apply_tenants, bench_plane, start_operator, tenant_bodies, wait_until
from bench.source import snapshot
from bench.tenants import generate_tenants
from bench.vcluster_shared import SharedVirtualCluster
from kubeplane.operator_process import OperatorProcess

CHURN_PREFIX = "churn-"
REST_SECONDS = 10
SAMPLE_SECONDS = 5


def resting_rss(sampler: RssSampler) -> float:
    """Median RSS over SAMPLE_SECONDS, after REST_SECONDS with nothing to do."""
    time.sleep(REST_SECONDS)
    since = time.monotonic()
    time.sleep(SAMPLE_SECONDS)
    return sampler.steady(since)


def churn(plane, operator: OperatorProcess, names: list[str], timeout: float) -> None:
    """Create these tenants, wait until all are Ready, delete them, wait until all are gone."""
    tenants = generate_tenants(len(names), CHURN_PREFIX)
    for body, name in zip(tenants, names, strict=True):
        body["metadata"]["name"] = name
        body["spec"]["owners"] = [{"kind": "Group", "name": f"{name}-owners"}]
        if "serverURL" in body["spec"].get("vcluster", {}):
            body["spec"]["vcluster"]["serverURL"] = f"https://{name}.gpu.example.com"
    apply_tenants(plane, tenants)
    wanted = set(names)

    def ready() -> bool:
        if operator.process.poll() is not None:
            raise RuntimeError(f"the operator exited:\n{operator.log_tail()}")
        bodies = {b["metadata"]["name"]: b for b in tenant_bodies(plane)}
        return all(name in bodies and any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in (bodies[name].get("status") or {}).get("conditions") or [])
                   for name in wanted)
    wait_until(ready, timeout, f"tenants {names} Ready", interval=0.5)
    plane.kubectl("delete", "gputenants", *names, "--wait=false")
    wait_until(lambda: not wanted & {b["metadata"]["name"] for b in tenant_bodies(plane)}, timeout,
               f"tenants {names} deleted", interval=0.5)


def growth_report(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int) -> str:
    ignore = [tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"), tracemalloc.Filter(False, tracemalloc.__file__)]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    totals = [sum(stat.size for stat in snap.statistics("filename")) / 1024 for snap in (before, after)]
    lines = [f"traced by Python: {totals[0]:.0f} KiB at the baseline, {totals[1]:.0f} KiB at the end "
             f"({totals[1] - totals[0]:+.0f} KiB)", "", f"top {top} growth by line (after - baseline):"]
    lines += [f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  {stat.traceback[0]}"
              for stat in after.compare_to(before, "lineno")[:top]]
    lines += ["", "top 8 growth by call stack (innermost last):"]
    for stat in after.compare_to(before, "traceback")[:8]:
        lines.append(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks")
        lines += [f"      {frame}" for frame in stat.traceback.format()[-16:] if frame.strip().startswith("File")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.churn_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200, help="tenants created and deleted in all (default 200)")
    parser.add_argument("--baseline", type=int, default=20, help="cycles before the baseline reading (default 20)")
    parser.add_argument("--batch", type=int, default=5, help="tenants created at once (default 5)")
    parser.add_argument("--source", default="HEAD", help="commit, WORKTREE or a source directory (default HEAD)")
    parser.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                        help="run the operator under tracemalloc and print what grew (default: off)")
    parser.add_argument("--top", type=int, default=25, help="lines per growth table (default 25)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per batch to be Ready or gone (default 300)")
    parser.add_argument("--workdir", type=Path, help="default: a new temporary directory, kept")
    args = parser.parse_args(argv)
    if not 0 < args.baseline < args.cycles or args.baseline % args.batch or args.cycles % args.batch:
        parser.error("give 0 < --baseline < --cycles, both multiples of --batch")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gputenant-churn-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = snapshot(args.source, workdir / "source")
    dump = workdir / "operator.tracemalloc"
    if args.tracemalloc:
        hooks = workdir / "tracemalloc-hooks"
        hooks.mkdir(exist_ok=True)
        (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
        os.environ.update({"PYTHONTRACEMALLOC": str(args.tracemalloc), "BENCH_TRACEMALLOC_DUMP": str(dump),
                           "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))})
    readings: list[tuple[int, float, float]] = []
    snapshots: dict[int, tracemalloc.Snapshot] = {}
    with bench_plane(workdir / "run", source) as plane:
        shim = HelmShim(workdir / "helm-shim", plane.bin_dir / "helm")
        with SharedVirtualCluster(plane):
            operator = start_operator(plane, workdir, source, shim, resync_seconds=600)
            try:
                with RssSampler(operator.pid) as sampler:
                    started = time.monotonic()
                    readings.append((0, 0.0, resting_rss(sampler)))
                    for first in range(0, args.cycles, args.batch):
                        names = [f"{CHURN_PREFIX}{index}" for index in range(first, first + args.batch)]
                        churn(plane, operator, names, args.timeout)
                        done = first + args.batch
                        if done in (args.baseline, args.cycles):
                            elapsed = time.monotonic() - started
                            readings.append((done, elapsed, resting_rss(sampler)))
                            if args.tracemalloc:
                                snapshots[done] = read_snapshot(operator.pid, dump)
                                dump.unlink()
                            print(f"{done} cycles after {elapsed:.0f} s: RSS {readings[-1][2]:.1f} MiB", flush=True)
            finally:
                operator.stop()
    (_, _, before), (baseline, baseline_at, at_baseline), (cycles, ended_at, at_end) = readings
    per_cycle = (at_end - at_baseline) * 1024 / (cycles - baseline)
    print(f"\nchurn: {cycles} tenants created and deleted, {args.batch} at a time, source {source.commit}"
          f"{', under tracemalloc (RSS inflated)' if args.tracemalloc else ''}")
    print(f"  RSS before any tenant     {before:7.1f} MiB")
    print(f"  RSS after {baseline:4d} cycles     {at_baseline:7.1f} MiB  ({baseline_at:.0f} s)")
    print(f"  RSS after {cycles:4d} cycles     {at_end:7.1f} MiB  ({ended_at:.0f} s)")
    print(f"  growth after the baseline {at_end - at_baseline:+7.2f} MiB  ({per_cycle:+.1f} KiB per cycle; "
          f"target: within 3 MiB)")
    if args.tracemalloc:
        print()
        print(growth_report(snapshots[baseline], snapshots[cycles], args.top))
    (workdir / "churn.yaml").write_text(yaml.safe_dump({"readings": [
        {"cycles": c, "seconds": round(s, 1), "rss_mib": round(r, 2)} for c, s, r in readings]}))
    print(f"\nworkdir kept at {workdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
