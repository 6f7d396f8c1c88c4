"""`gputenant run`'s own flags: what they accept and how bad input is refused before the operator
starts (the guard and GPU pools wiring itself runs against a real apiserver in
e2e/tests/test_guard_operator.py and e2e/tests/test_chart_install.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

import gputenant
from gputenant.cli import build_parser, main
from gputenant.commands.run import settings_from
from gputenant.config.settings import OperatorSettings, env_name

TIME_SLICING_POOL = {"mode": "TimeSlicing", "gpuModel": "A100-80GB", "gpuMemoryMiB": 81920,
                     "timeSlicing": {"replicas": 2}}


def test_defaults_keep_the_guard_off_and_apply_pools_every_five_minutes():
    args = build_parser().parse_args(["run"])
    assert args.webhook_host is None and args.pools_interval == 300


def test_a_negative_pools_interval_is_refused(capsys):
    assert main(["run", "--pools-interval", "-5"]) == 2
    assert "--pools-interval -5 is negative; give seconds, or 0 to turn the GPU pools loop off" in capsys.readouterr().err


def test_two_pools_sharing_one_device_plugin_config_are_refused_at_start(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"pools": [
        {"name": name, "nodeSelector": {"pool": name}, "devicePluginConfig": "shared", **TIME_SLICING_POOL}
        for name in ("a", "b")]}))
    assert main(["run", "--config", str(config)]) == 2
    assert "pools[b].devicePluginConfig 'shared' is used by two pools" in capsys.readouterr().err


def test_a_webhook_certificate_without_its_key_is_refused(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    assert main(["run", "--kubeconfig", str(kubeconfig), "--webhook-host", "127.0.0.1",
                 "--webhook-cert", str(tmp_path / "tls.crt")]) == 2
    assert "--webhook-cert and --webhook-key go together" in capsys.readouterr().err


def test_a_flag_wins_over_its_variable_and_the_variable_over_the_default(monkeypatch):
    assert settings_from(build_parser().parse_args(["run"])).helm_concurrency is None
    monkeypatch.setenv("GPUTENANT_HELM_CONCURRENCY", "3")
    monkeypatch.setenv("GPUTENANT_RECONCILE_CONCURRENCY", "7")
    settings = settings_from(build_parser().parse_args(["run"]))
    assert (settings.helm_concurrency, settings.reconcile_concurrency) == (3, 7)
    assert settings_from(build_parser().parse_args(["run", "--helm-concurrency", "5"])).helm_concurrency == 5


def test_a_concurrency_below_one_is_refused(capsys):
    assert main(["run", "--helm-concurrency", "0"]) == 2
    assert capsys.readouterr().err == (
        "gputenant run: --helm-concurrency (or $GPUTENANT_HELM_CONCURRENCY): Input should be greater than or equal to 1\n")


def test_every_bad_variable_is_named_before_any_client_is_built(monkeypatch, capsys):
    """No kubeconfig exists here: the settings are refused first, each naming its variable."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent")
    monkeypatch.setenv("GPUTENANT_RESYNC_SECONDS", "soon")
    monkeypatch.setenv("GPUTENANT_ATTESTATION_INTERVAL_SECONDS", "-1")
    assert main(["run"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "gputenant run: $GPUTENANT_RESYNC_SECONDS: Input should be a valid number, unable to parse string as a number",
        "$GPUTENANT_ATTESTATION_INTERVAL_SECONDS: Input should be greater than 0"]


def test_an_empty_variable_counts_as_unset(monkeypatch):
    monkeypatch.setenv("GPUTENANT_ATTESTATION_QUEUE", "")
    monkeypatch.setenv("GPUTENANT_HELM_CONCURRENCY", "")
    settings = OperatorSettings()
    assert (settings.attestation_queue, settings.helm_concurrency) == (None, None)


def test_run_help_shows_every_variable_with_its_meaning(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for name, field in OperatorSettings.model_fields.items():
        line = next((line for line in out.splitlines() if line.split()[:1] == [env_name(name)]), None)
        assert line is not None and field.description in " ".join(out.split()), f"{env_name(name)} missing"
    assert len(OperatorSettings.model_fields) == 15


def test_the_package_names_no_gputenant_variable_outside_the_settings():
    """A string that is a whole variable name ("GPUTENANT_RESYNC_SECONDS") is one read beside the
    settings object; messages that mention one are fine."""
    package = Path(gputenant.__file__).parent
    names = {(str(path.relative_to(package)), node.value) for path in package.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and re.fullmatch(r"GPUTENANT_[A-Z_]+", node.value)}
    assert names == set()
