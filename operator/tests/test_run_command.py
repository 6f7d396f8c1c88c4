"""`gputenant run`'s own flags: what they accept and how bad input is refused before the operator
starts (the guard and GPU pools wiring itself runs against a real apiserver in
e2e/tests/test_guard_operator.py and e2e/tests/test_chart_install.py)."""

from __future__ import annotations

import yaml

from gputenant.cli import build_parser, main

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


def test_concurrency_flags_default_to_their_environment_variables(monkeypatch):
    assert build_parser().parse_args(["run"]).helm_concurrency is None
    monkeypatch.setenv("GPUTENANT_HELM_CONCURRENCY", "3")
    monkeypatch.setenv("GPUTENANT_RECONCILE_CONCURRENCY", "7")
    args = build_parser().parse_args(["run"])
    assert (args.helm_concurrency, args.reconcile_concurrency) == (3, 7)
    assert build_parser().parse_args(["run", "--helm-concurrency", "5"]).helm_concurrency == 5


def test_a_concurrency_below_one_is_refused(capsys):
    assert main(["run", "--helm-concurrency", "0"]) == 2
    assert "--helm-concurrency 0 (or its environment variable) must be 1 or more" in capsys.readouterr().err
