"""The chart's alerts (charts/gpu-tenant-operator/files/alerts.yaml, shipped as a PrometheusRule)
under `promtool test rules` (Debian's prometheus package; installed by tools/prometheus.sh when
missing, as the e2e harness installs Prometheus): every alert fires in one case and stays quiet in
one close to it, and names only series the operator exports. A real Prometheus evaluates them in
e2e/tests/test_gpu_truth.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from test_metrics_dashboard import exported_series, metric_names

from kubeplane.prometheus import prometheus_binary

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = REPO_ROOT / "charts" / "gpu-tenant-operator" / "files" / "alerts.yaml"
UNIT_TESTS = Path(__file__).parent / "promtool" / "alerts_test.yaml"
SCRAPE_SERIES = {"up"}
"""Series Prometheus itself writes for every target."""


def alerts() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(prometheus_binary("promtool")), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_rules_pass_promtool_check_and_their_unit_tests(tmp_path):
    shutil.copy(RULES, tmp_path / "alerts.yaml")
    shutil.copy(UNIT_TESTS, tmp_path / "alerts_test.yaml")
    checked = promtool("check", "rules", "alerts.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_has_a_firing_and_a_quiet_case():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    for rule in alerts():
        assert cases.get(rule["alert"]) == {True, False}, f"{rule['alert']}: needs a firing and a non-firing case"


def test_a_broken_rule_fails_its_unit_test(tmp_path):
    """The unit tests can fail: the not-Ready alert without its sleep exception fires for a sleeping tenant."""
    broken = RULES.read_text().replace('gputenant_tenant_ready{reason!="Asleep"} == 0', "gputenant_tenant_ready == 0")
    assert broken != RULES.read_text()
    (tmp_path / "alerts.yaml").write_text(broken)
    shutil.copy(UNIT_TESTS, tmp_path / "alerts_test.yaml")
    tested = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode != 0 and 'tenant="sleeping"' in tested.stdout + tested.stderr


def test_alerts_name_only_series_the_operator_exports_and_say_what_to_do():
    exported = exported_series() | SCRAPE_SERIES
    documented = (REPO_ROOT / "docs" / "metrics.md").read_text()
    for rule in alerts():
        names = metric_names(rule["expr"])
        assert names and names <= exported, f"{rule['alert']}: {sorted(names - exported)} are not exported"
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        anchor = rule["annotations"]["runbook"].removeprefix("docs/metrics.md#")
        assert anchor == rule["alert"].lower() and f"### {rule['alert']}" in documented, rule["alert"]
