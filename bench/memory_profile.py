"""`python -m bench.memory_profile`: what holds the operator's memory after onboarding N tenants.

The same run as the benchmark's operator onboarding (fresh audited plane, LIGHTWEIGHT shared
vCluster, helm through the counting shim), with the operator started under tracemalloc. A
``sitecustomize`` module on the operator's import path dumps a snapshot, after a full garbage
collection, when the operator receives SIGUSR1; this process reads it and prints the top
allocators by source line and by file. The operator's own code is unchanged.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.scenarios import bench_plane, onboard_with_operator
from bench.source import snapshot

SITECUSTOMIZE = '''
import gc, os, signal, tracemalloc

def _dump_tracemalloc(signum, frame):
    gc.collect()
    tracemalloc.take_snapshot().dump(os.environ["BENCH_TRACEMALLOC_DUMP"])

signal.signal(signal.SIGUSR1, _dump_tracemalloc)
'''


def read_snapshot(operator_pid: int, dump: Path, timeout: float = 120) -> tracemalloc.Snapshot:
    os.kill(operator_pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    previous = -1
    while time.monotonic() < deadline:
        size = dump.stat().st_size if dump.exists() else -1
        if size > 0 and size == previous:
            return tracemalloc.Snapshot.load(str(dump))
        previous = size
        time.sleep(1)
    raise TimeoutError(f"the operator wrote no tracemalloc snapshot to {dump} in {timeout}s")


def report(snap: tracemalloc.Snapshot, top: int) -> str:
    snap = snap.filter_traces([tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
                               tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(stat.size for stat in snap.statistics("filename"))
    lines = [f"traced total {total / 2**20:.1f} MiB", "", f"top {top} by line:"]
    lines += [f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks  {stat.traceback[0]}"
              for stat in snap.statistics("lineno")[:top]]
    lines += ["", f"top {top} by file:"]
    lines += [f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks  {stat.traceback[0].filename}"
              for stat in snap.statistics("filename")[:top]]
    lines += ["", "top 8 by call stack (innermost last):"]
    for stat in snap.statistics("traceback")[:8]:
        lines.append(f"  {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks")
        lines += [f"      {frame}" for frame in stat.traceback.format()[-12:] if frame.strip().startswith("File")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=150, help="tenants onboarded before the snapshot (default 150)")
    parser.add_argument("--source", default="HEAD", help="commit, WORKTREE or a source directory (default HEAD)")
    parser.add_argument("--frames", type=int, default=10, help="frames kept per allocation (default 10)")
    parser.add_argument("--top", type=int, default=25, help="lines per table (default 25)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for all Ready (default 900)")
    parser.add_argument("--workdir", type=Path, help="default: a new temporary directory, kept")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gputenant-memprofile-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = snapshot(args.source, workdir / "source")
    hooks = workdir / "tracemalloc-hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    dump = workdir / "operator.tracemalloc"
    os.environ.update({"PYTHONTRACEMALLOC": str(args.frames), "BENCH_TRACEMALLOC_DUMP": str(dump),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))})
    printed: list[str] = []

    def profile(plane, operator, shim, sampler, result) -> None:
        printed.append(f"{args.tenants} tenants ({result.ready} Ready), source {source.commit}, "
                       f"RSS peak {sampler.peak:.1f} MiB (tracemalloc itself adds to it)")
        printed.append(report(read_snapshot(operator.pid, dump), args.top))

    with bench_plane(workdir / "run", source) as plane:
        onboard_with_operator(plane, workdir / "run", source, args.tenants, resync_seconds=600,
                              timeout=args.timeout, then=profile, partial_ok=True)
    print("\n".join(printed))
    print(f"\nsnapshot kept at {dump}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
