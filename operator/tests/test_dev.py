"""The pure parts of the local demo (`make dev`, `kubeplane.demo`): the status table and its
verdict, and the checks on its inputs. The whole command runs in e2e/tests/test_dev_up.py; the
simulated GPU nodes it creates per pool are checked in e2e/tests/test_gpu_nodes.py."""

from __future__ import annotations

import re

import pytest
import yaml

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from kubeplane.demo.defaults import DEFAULT_CONFIG, DEFAULT_TENANTS, LOCAL_CHART
from kubeplane.demo.inputs import DevError, load_tenant_manifests, local_operator_config, simulated_gpu_nodes
from kubeplane.demo.status import (
    CONVERGING_REASONS,
    assess,
    failure_report,
    format_table,
    pick_demo_tenant,
)

EXAMPLE_CONFIG = OperatorConfig.load(DEFAULT_CONFIG)


# -- status table and verdict ------------------------------------------------------------------

def body(name: str, ready: str | None, reason: str = "", generation: int = 1, observed: int | None = 1,
         mode: str | None = "MIG", pool: str | None = "h100-mig-balanced") -> dict:
    status: dict = {"observedGeneration": observed, "sharing": {"mode": mode, "pool": pool}}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready, "reason": reason, "message": f"{name} says {reason}"}]
    return {"metadata": {"name": name, "generation": generation},
            "spec": {"trust": "Untrusted", "gpu": {"quota": 1, "limit": 2}}, "status": status}


def test_table_has_one_aligned_row_per_expected_tenant_in_order():
    verdict = assess([body("b", "True", "TenantReady"), body("a", "False", "WaitingForControlPlane")], ["a", "b"])
    lines = format_table(verdict.rows).splitlines()
    assert lines[0].split() == ["NAME", "TRUST", "MODE", "POOL", "GPUS", "READY", "REASON"]
    assert lines[1].split() == ["a", "Untrusted", "MIG", "h100-mig-balanced", "1", "(max", "2)", "False",
                                "WaitingForControlPlane"]
    assert lines[2].startswith("b ")
    assert [line.index(word) for line, word in zip(lines, ("READY", "False", "True"), strict=False)] == [lines[0].index("READY")] * 3


def test_all_ready_needs_every_expected_tenant_ready_at_its_current_generation():
    assert assess([body("a", "True", "TenantReady"), body("b", "True", "TenantReady")], ["a", "b"]).all_ready
    missing = assess([body("a", "True", "TenantReady")], ["a", "b"])
    assert not missing.all_ready and missing.missing == ["b"]
    stale = assess([body("a", "True", "TenantReady", generation=2, observed=1)], ["a"])
    assert not stale.all_ready
    assert (stale.rows[0].ready, stale.rows[0].reason) == ("Unknown", "Pending")
    fresh = assess([body("a", None, observed=None, mode=None, pool=None)], ["a"])
    assert (fresh.rows[0].mode, fresh.rows[0].pool, fresh.rows[0].ready) == ("-", "-", "Unknown")


def test_only_reasons_the_operator_does_not_retry_count_as_failed():
    bodies = [body(f"t{i}", "False", reason) for i, reason in enumerate(sorted(CONVERGING_REASONS))]
    bodies.append(body("impossible", "False", "ProfileNotOnGPU"))
    bodies.append(body("pending", "Unknown", "Progressing"))
    verdict = assess(bodies, [b["metadata"]["name"] for b in bodies])
    assert [row.name for row in verdict.failed] == ["impossible"]
    assert failure_report(verdict.failed) == \
        "tenant impossible: Ready=False, reason ProfileNotOnGPU: impossible says ProfileNotOnGPU"


def test_converging_reasons_are_ones_the_operator_actually_sets():
    """A renamed transient reason in the pipeline would make the demo stop early; this notices."""
    from gputenant.api import conditions
    known = {value for name, value in vars(conditions).items() if name.isupper() and isinstance(value, str)}
    assert CONVERGING_REASONS <= known, CONVERGING_REASONS - known


# -- inputs ------------------------------------------------------------------------------------

def test_demo_tenant_issues_a_view_kubeconfig_and_has_no_public_server_url():
    tenants = [GpuTenant.from_body(m) for m in load_tenant_manifests(DEFAULT_TENANTS)]
    assert [t.metadata.name for t in tenants] == ["recsys", "ml-platform", "acme-ai"]
    assert pick_demo_tenant(tenants) == "recsys"
    assert pick_demo_tenant(tenants[2:]) is None  # acme-ai: admin only, and a public serverURL


def test_invalid_tenant_files_are_named_before_anything_starts(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant",
                                   "metadata": {"name": "x"}, "spec": {"trust": "Sometimes"}}))
    with pytest.raises(DevError, match=rf"(?s){re.escape(str(bad))}: invalid GpuTenant.*trust"):
        load_tenant_manifests(tmp_path)
    with pytest.raises(DevError, match="no GpuTenant YAML files"):
        load_tenant_manifests(tmp_path / "missing")
    other = tmp_path / "other"
    other.mkdir()
    (other / "cm.yaml").write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(DevError, match="found no object of kind GpuTenant"):
        load_tenant_manifests(other)


def test_operator_config_uses_the_local_chart_and_bad_configs_name_the_field(tmp_path):
    document = local_operator_config(DEFAULT_CONFIG)
    chart_version = yaml.safe_load((LOCAL_CHART / "Chart.yaml").read_text())["version"]
    assert document["vcluster"]["localPath"] == str(LOCAL_CHART)
    assert document["vcluster"]["version"] == chart_version
    assert OperatorConfig.model_validate(document).pools == EXAMPLE_CONFIG.pools
    broken = tmp_path / "config.yaml"
    broken.write_text("pools:\n  - name: p\n    mode: Magic\n    gpuModel: L4\n    gpuMemoryMiB: 1\n")
    with pytest.raises(DevError, match=r"(?s)--config .*config\.yaml: .*pools\[0\]\.mode"):
        local_operator_config(broken)


def test_a_pool_kwok_cannot_simulate_is_named_with_the_config_file_before_anything_starts(tmp_path):
    config = OperatorConfig.model_validate({
        "pools": [{"name": "odd", "mode": "MIG", "gpuModel": "H100-80GB", "gpuMemoryMiB": 81559, "gpus": 3,
                   "nodeSelector": {"pool": "odd"}, "mig": {"config": "custom-layout", "profiles": ["1g.10gb"]}}],
        "trustModes": {"Trusted": "MIG", "Internal": "MIG", "Untrusted": "MIG"}})
    path = tmp_path / "config.yaml"
    with pytest.raises(DevError, match=rf"--config {re.escape(str(path))}: pools\[odd\]\.mig\.config 'custom-layout'"):
        simulated_gpu_nodes(path, config)
    assert [node.name for node in simulated_gpu_nodes(DEFAULT_CONFIG, EXAMPLE_CONFIG)][:1] == ["gpu-a100-timeslice-1"]
