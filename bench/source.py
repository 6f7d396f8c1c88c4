"""The operator under test, frozen: a snapshot of one commit, so that engineers editing the shared
working tree during a long benchmark cannot change the code halfway through it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.tenants import REPO_ROOT
from kubeplane.fixtures import REAL_VCLUSTER_CHART


@dataclass(frozen=True)
class Source:
    """Where the measured operator and renderer are read from (the vCluster chart is always the
    real upstream one in ../shared/third_party, never part of a snapshot)."""

    root: Path
    commit: str
    """The commit, or "working tree" when measuring uncommitted code."""

    @property
    def local_chart(self) -> Path:
        return REAL_VCLUSTER_CHART

    def gputenant(self, *args: str) -> list[str]:
        """The `gputenant` command line running this source's package."""
        return [sys.executable, "-m", "gputenant.cli", *args]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """`base` with this source's package first on the import path."""
        return {**base, "PYTHONPATH": os.pathsep.join(filter(None, [str(self.root / "operator"),
                                                                    base.get("PYTHONPATH")]))}


def snapshot(ref: str, directory: Path) -> Source:
    """`git archive` of `ref` into `directory`; ref "WORKTREE" measures the working tree as it is,
    and a directory holding ``operator/gputenant`` (e.g. a copy with a candidate fix) is used as is."""
    if ref == "WORKTREE":
        return Source(REPO_ROOT, "working tree")
    if (Path(ref) / "operator" / "gputenant").is_dir():
        return Source(Path(ref).resolve(), f"directory {Path(ref).resolve()}")
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            capture_output=True, text=True)
    if commit.returncode:
        raise ValueError(f"--source {ref}: not a commit in {REPO_ROOT} ({commit.stderr.strip()}); "
                         "pass a commit, a branch, WORKTREE, or a source directory")
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.Popen(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", commit.stdout.strip()],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout, check=True)
    if archive.wait():
        raise RuntimeError(f"git archive {ref} failed")
    return Source(directory, commit.stdout.strip())
