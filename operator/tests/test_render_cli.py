"""`gputenant render` / `explain`: golden files for the examples, and field-named errors.

Golden files in operator/tests/golden/<example>.yaml are reviewed output of
`gputenant render -f examples/tenants/<example>.yaml --config examples/config.yaml`. They change
only through an explicit `UPDATE_GOLDEN=1 pytest operator/tests/test_render_cli.py`; review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gputenant.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))
EXAMPLE_CONFIG = REPO_ROOT / "examples" / "config.yaml"
GOLDEN_DIR = Path(__file__).parent / "golden"

UNTRUSTED_TENANT = """\
apiVersion: gputenant.io/v1alpha1
kind: GpuTenant
metadata: {name: ext-a}
spec:
  trust: Untrusted
  owners: [{kind: User, name: bob}]
  gpu: {quota: 2, limit: 3}
"""


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_render_matches_golden(example: Path, capsys):
    code, out, err = run_cli(capsys, "render", "-f", str(example), "--config", str(EXAMPLE_CONFIG))
    assert code == 0, err
    golden = GOLDEN_DIR / example.name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN_DIR.mkdir(exist_ok=True)
        golden.write_text(out)
    assert golden.is_file(), f"no golden file {golden}; create it with UPDATE_GOLDEN=1 and review it"
    assert out == golden.read_text(), f"render output of {example.name} changed; review, then UPDATE_GOLDEN=1"


def test_every_golden_file_has_its_example():
    if not EXAMPLES:
        pytest.skip("examples/tenants has no tenants yet")
    assert {path.name for path in GOLDEN_DIR.glob("*.yaml")} <= {path.name for path in EXAMPLES}


def test_render_prints_decision_objects_and_values(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT)
    code, out, _ = run_cli(capsys, "render", "-f", str(tenant_file), "--config", str(EXAMPLE_CONFIG))
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    assert documents[0]["kind"] == "Decision" and documents[0]["possible"] is True
    assert documents[0]["mode"] == "MIG"
    assert [doc["kind"] for doc in documents[1:4]] == ["Namespace", "ResourceQuota", "LimitRange"]
    assert documents[-2]["kind"] == "Queue"
    values = documents[-1]
    assert values["kind"] == "VClusterValues"
    assert values["release"] == "ext-a" and values["namespace"] == "tenant-ext-a"
    assert values["chart"] == {"repository": "https://charts.loft.sh", "name": "vcluster", "version": "0.36.1"}
    assert values["values"]["policies"]["podSecurityStandard"] == "restricted"


def test_impossible_tenant_renders_without_values(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT)
    code, out, _ = run_cli(capsys, "render", "-f", str(tenant_file))  # default config: no pools
    assert code == 3, "a tenant the configuration cannot satisfy fails a pre-merge check"
    documents = list(yaml.safe_load_all(out))
    assert documents[0]["possible"] is False
    assert [doc["kind"] for doc in documents[1:]] == ["Namespace", "ResourceQuota", "Role", "Role", "Role", "Role",
                                                     "Role", "RoleBinding", "RoleBinding", "RoleBinding", "ConfigMap"]


def test_explain_prints_a_table(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT)
    code, out, _ = run_cli(capsys, "explain", "-f", str(tenant_file), "--config", str(EXAMPLE_CONFIG))
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split() == ["TENANT", "TRUST", "MODE", "POOL", "GRANTED", "QUEUE", "QUOTA/LIMIT", "REASON"]
    cells = row.split()
    assert cells[:3] == ["ext-a", "Untrusted", "MIG"]
    assert cells[-1] == "ChosenFromTrust"
    assert "ext-a: Untrusted tenants get MIG" in out


def test_explain_shows_the_hami_core_caps_of_each_pod_size(capsys):
    """An Internal tenant at corePercent 25 on l4-hami (23034 MiB GPUs, limit 3): pods of 1, 2 or 3 shares."""
    code, out, _ = run_cli(capsys, "explain", "-f", str(EXAMPLE_CONFIG.parent / "tenants" / "internal.yaml"),
                           "--config", str(EXAMPLE_CONFIG))
    assert code == 0
    assert "gpu-fraction 0.25: CUDA_DEVICE_MEMORY_LIMIT=5758m (5758 MiB), CUDA_DEVICE_SM_LIMIT=25" in out
    assert "gpu-fraction 0.5: CUDA_DEVICE_MEMORY_LIMIT=11517m (11517 MiB), CUDA_DEVICE_SM_LIMIT=50" in out
    assert "gpu-fraction 0.75: CUDA_DEVICE_MEMORY_LIMIT=17275m" in out
    assert "not yet attested" in out


def test_explain_shows_no_caps_for_mechanisms_without_them(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT)
    code, out, _ = run_cli(capsys, "explain", "-f", str(tenant_file), "--config", str(EXAMPLE_CONFIG))
    assert code == 0 and "HAMi-core caps" not in out


@pytest.mark.parametrize("command", ["render", "explain"])
def test_a_tenant_the_configuration_cannot_satisfy_exits_3_after_saying_why(tmp_path, capsys, command):
    """A pre-merge check: the pool has fewer GPUs than the tenant's limit (QuotaAbovePoolCapacity)."""
    impossible = tmp_path / "impossible.yaml"
    impossible.write_text(UNTRUSTED_TENANT.replace("limit: 3", "limit: 500").replace("quota: 2", "quota: 500"))
    possible = tmp_path / "possible.yaml"
    possible.write_text(UNTRUSTED_TENANT.replace("name: ext-a", "name: ext-b"))
    code, out, _ = run_cli(capsys, command, "-f", str(possible), "-f", str(impossible), "--config", str(EXAMPLE_CONFIG))
    assert code == 3
    assert "QuotaAbovePoolCapacity" in out and "ext-b" in out, "every tenant is still printed"
    code, _, _ = run_cli(capsys, command, "-f", str(possible), "--config", str(EXAMPLE_CONFIG))
    assert code == 0


@pytest.mark.parametrize("command", ["render", "explain"])
def test_bad_field_exits_2_naming_the_field(tmp_path, capsys, command):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT.replace("limit: 3", "limit: -1"))
    code, out, err = run_cli(capsys, command, "-f", str(tenant_file))
    assert code == 2 and out == ""
    assert f"{tenant_file}: spec.gpu.limit: " in err


def test_bad_config_exits_2_naming_the_field(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT)
    config_file = tmp_path / "config.yaml"
    config_file.write_text("pools:\n  - name: p\n    mode: Sharing\n    gpuModel: L4\n    gpuMemoryMiB: 1\n")
    code, _, err = run_cli(capsys, "render", "-f", str(tenant_file), "--config", str(config_file))
    assert code == 2
    assert f"{config_file}: pools[0].mode: " in err


def test_wrong_kind_exits_2(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    code, _, err = run_cli(capsys, "render", "-f", str(tenant_file))
    assert code == 2 and "kind: expected GpuTenant, got 'ConfigMap'" in err


@pytest.mark.parametrize("command", ["render", "explain"])
def test_both_served_versions_are_read_and_decided_alike(tmp_path, capsys, command):
    hami = {"mode": "HAMi", "hami": {"corePercent": 25}}
    alpha, beta = tmp_path / "alpha.yaml", tmp_path / "beta.yaml"
    alpha.write_text(yaml.safe_dump({"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": "a"},
                                     "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": "x"}],
                                              "sharing": {**hami, "hami": {"corePercent": 25, "memoryMiB": 20480}}}}))
    beta.write_text(yaml.safe_dump({"apiVersion": "gputenant.io/v1beta1", "kind": "GpuTenant", "metadata": {"name": "a"},
                                    "spec": {"trust": "Internal", "owners": [{"kind": "User", "name": "x"}],
                                             "sharing": {**hami, "hami": {"corePercent": 25, "memory": "20Gi"}}}}))
    outputs = [run_cli(capsys, command, "-f", str(path), "--config", str(EXAMPLE_CONFIG)) for path in (alpha, beta)]
    assert outputs[0] == outputs[1] and outputs[0][0] == 0


def test_a_v1beta1_error_names_the_v1beta1_field(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT.replace("v1alpha1", "v1beta1").replace(
        "gpu: {quota: 2, limit: 3}", "sharing: {mode: HAMi, hami: {memory: 10.5Mi}}"))
    code, _, err = run_cli(capsys, "render", "-f", str(tenant_file))
    assert code == 2 and f"{tenant_file}: spec.sharing.hami.memory: " in err


def test_an_apiversion_the_api_does_not_have_exits_2_naming_the_served_ones(tmp_path, capsys):
    tenant_file = tmp_path / "tenant.yaml"
    tenant_file.write_text(UNTRUSTED_TENANT.replace("v1alpha1", "v2"))
    code, _, err = run_cli(capsys, "explain", "-f", str(tenant_file))
    assert code == 2 and "gputenant.io/v2" in err and "gputenant.io/v1beta1" in err
