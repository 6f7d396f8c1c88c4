"""`python -m bench --quick` runs end to end: every variant onboards its tenants, the instruments
count something for each, each tenant's wait for its kubeconfig is read from the audit log, the
steady-state and quota-change windows are measured, and the tables print. No figure is asserted
against a time: benchmarks report, tests check that they work.

The benchmark starts its own control planes, one after the other (a fresh one per run is part of
its method), so this test does not use the session `plane`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK_TENANTS = 6


def test_quick_benchmark_runs_every_scenario_but_the_webhook(tmp_path: Path):
    answer = subprocess.run([sys.executable, "-m", "bench", "--quick", "--skip", "webhook",
                             "--workdir", str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=900)
    assert answer.returncode == 0, answer.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    variants = {run["variant"]: run for run in results["onboarding"]}
    assert set(variants) >= {"operator", "serial script"}
    assert any("xargs" in name for name in variants)
    for name, run in variants.items():
        assert run["tenants"] == QUICK_TENANTS
        assert run["seconds_to_secrets"] > 0, name
        assert run["requests"]["writes"] > 0, name
        assert run["helm"]["installs_or_upgrades"] == QUICK_TENANTS, name
    operator = variants["operator"]
    assert operator["seconds_to_ready"] >= operator["seconds_to_secrets"]
    assert operator["cpu"]["own"] > 0 and operator["rss_peak_mib"] > 0
    waits = operator["kubeconfig_waits"]
    assert len(waits) == QUICK_TENANTS and all(wait >= 0 for wait in waits) and waits == sorted(waits)

    [steady] = results["steady"]
    assert steady["tenants_resynced"] == QUICK_TENANTS and steady["apiserver_cpu"] > 0
    assert results["quota_change"]["tenant"] == "bench-0001"
    assert [m["tenants"] for m in results["memory"]] == [0]
    assert {row["target"] for row in results["targets"]} >= {
        "writes on unchanged resync (N=6, most)", "Helm upgrades on unchanged resync (N=6, most)",
        "Helm upgrades on a quota change"}
    for heading in ("## Onboarding", "## Steady state", "### A tenant's wait for its kubeconfig", "## Operator memory",
                    "## Targets"):
        assert heading in answer.stdout
