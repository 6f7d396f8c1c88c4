"""The CLI as a new user meets it: `-f` takes several files, a directory and `-` (standard input);
a command that needs a cluster and has none says so in one line, naming the kubeconfig it tried,
and exits non-zero without a traceback (no cluster is needed for these tests)."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gputenant.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))
EXAMPLE_CONFIG = str(REPO_ROOT / "examples" / "config.yaml")
CLUSTER_COMMANDS = [
    ["pools"],
    ["pools", "--apply"],
    ["usage", "--prometheus-url", "http://127.0.0.1:9"],
    ["kubeconfig", "some-tenant"],
    ["run"],
]


def tenant_names(capsys, *argv: str) -> list[str]:
    assert main(["render", *argv, "--config", EXAMPLE_CONFIG]) == 0
    return [d["tenant"] for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "Decision"]


def example_names() -> list[str]:
    return [yaml.safe_load(path.read_text())["metadata"]["name"] for path in EXAMPLES]


def test_several_files_after_one_f_as_a_shell_glob_gives_them(capsys):
    assert len(EXAMPLES) >= 2
    assert tenant_names(capsys, "-f", *map(str, EXAMPLES)) == example_names()


def test_a_repeated_f_keeps_every_file(capsys):
    argv = [arg for path in EXAMPLES for arg in ("-f", str(path))]
    assert tenant_names(capsys, *argv) == example_names()


def test_a_directory_gives_its_manifests_in_name_order(tmp_path, capsys):
    assert tenant_names(capsys, "-f", str(EXAMPLES[0].parent)) == example_names()
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "b.yml").write_text(EXAMPLES[0].read_text())
    (tmp_path / "a.json").write_text(yaml.safe_load(EXAMPLES[1].read_text()).__repr__().replace("'", '"')
                                     .replace("True", "true").replace("False", "false"))
    assert tenant_names(capsys, "-f", str(tmp_path)) == [example_names()[1], example_names()[0]]


def test_dash_reads_standard_input_beside_files(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLES[0].read_text()))
    assert tenant_names(capsys, "-f", "-", "-f", str(EXAMPLES[1])) == example_names()[:2]


def test_explain_takes_the_same_f(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(EXAMPLES[0].read_text()))
    assert main(["explain", "-f", "-", str(EXAMPLES[0].parent), "--config", EXAMPLE_CONFIG]) == 0
    rows = capsys.readouterr().out.split("\n\n")[0].splitlines()[1:]
    assert [row.split()[0] for row in rows] == [example_names()[0], *example_names()]


@pytest.mark.parametrize("command", ["render", "explain"])
def test_an_empty_directory_or_input_exits_2_naming_it(tmp_path, monkeypatch, capsys, command):
    assert main([command, "-f", str(tmp_path)]) == 2
    assert f"gputenant {command}: {tmp_path}: no .yaml, .yml, .json file in the directory" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main([command, "-f", "-"]) == 2
    assert f"gputenant {command}: standard input: no GpuTenant document in it" in capsys.readouterr().err


def test_a_bad_document_names_its_file_among_several(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ConfigMap\n")
    assert main(["render", "-f", str(EXAMPLES[0]), str(bad)]) == 2
    assert capsys.readouterr().err == f"gputenant render: {bad}: kind: expected GpuTenant, got 'ConfigMap'\n"


def cli(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gputenant.cli", *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture
def no_cluster_env(tmp_path) -> dict[str, str]:
    """A user with no kubeconfig anywhere, outside any pod."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("KUBERNETES_")}
    return {**env, "HOME": str(tmp_path)}


def assert_one_line_failure(result: subprocess.CompletedProcess, command: str, *parts: str) -> None:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"gputenant {command}: "), result.stderr
    for part in parts:
        assert part in result.stderr, result.stderr


@pytest.mark.parametrize("argv", CLUSTER_COMMANDS, ids=" ".join)
def test_no_kubeconfig_anywhere_says_what_was_tried_in_one_line(argv, no_cluster_env, tmp_path):
    result = cli(argv, no_cluster_env)
    assert_one_line_failure(result, argv[0], "no cluster: $KUBECONFIG is unset",
                            f"{tmp_path}/.kube/config does not exist", "pass --kubeconfig FILE or set KUBECONFIG")


def test_a_kubeconfig_variable_naming_no_file_is_named(no_cluster_env, tmp_path):
    result = cli(["pools"], {**no_cluster_env, "KUBECONFIG": str(tmp_path / "missing")})
    assert_one_line_failure(result, "pools", f"$KUBECONFIG={tmp_path}/missing names no existing file")


def test_a_file_that_is_no_kubeconfig_is_named(no_cluster_env, tmp_path):
    not_kubeconfig = tmp_path / "notes"
    not_kubeconfig.write_text("just words\n")
    result = cli(["kubeconfig", "t", "--kubeconfig", str(not_kubeconfig)], no_cluster_env)
    assert_one_line_failure(result, "kubeconfig", f"cannot load the kubeconfig (--kubeconfig {not_kubeconfig})",
                            "is not a kubeconfig")
    result = cli(["pools", "--kubeconfig", str(tmp_path / "absent")], no_cluster_env)
    assert_one_line_failure(result, "pools", f"{tmp_path}/absent is not a file")


@pytest.fixture
def refusing_server() -> Iterator[str]:
    """An address on loopback that refuses connections: a port bound but never listened on."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"https://127.0.0.1:{bound.getsockname()[1]}"


@pytest.mark.parametrize("argv", CLUSTER_COMMANDS, ids=" ".join)
def test_an_unreachable_cluster_is_named_with_its_kubeconfig(argv, refusing_server, no_cluster_env, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": refusing_server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    result = cli(argv, {**no_cluster_env, "KUBECONFIG": str(kubeconfig)})
    assert_one_line_failure(result, argv[0], f"cannot reach the cluster at {refusing_server} ($KUBECONFIG={kubeconfig})",
                            "check that the cluster runs")


def test_a_config_that_cannot_be_read_exits_2_in_one_line(no_cluster_env, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("pools: {not: [a list\n")
    result = cli(["pools", "--config", str(config)], no_cluster_env)
    assert_one_line_failure(result, "pools", f"{config}: while parsing")
    assert result.returncode == 2
