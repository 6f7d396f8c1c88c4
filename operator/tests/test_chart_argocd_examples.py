"""examples/argocd: the Applications point at paths that exist, are ordered operator before
tenants, carry the sync options docs/argocd.md promises, and the tenants they sync are accepted by
the chart's schema and by the operator's policy under the operator config the same example sets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from gputenant.render import render_tenant

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "argocd"
MANIFESTS = {path.stem: yaml.safe_load(path.read_text()) for path in sorted((EXAMPLES / "apps").glob("*.yaml"))}
APPS = {name: body for name, body in MANIFESTS.items() if body["kind"] == "Application"}
APPLICATION_SETS = {name: body for name, body in MANIFESTS.items() if body["kind"] == "ApplicationSet"}
ROOT = yaml.safe_load((EXAMPLES / "root.yaml").read_text())
TENANT_FILES = sorted((EXAMPLES / "tenants").glob("*.yaml"))


def wave(application: dict) -> int:
    return int(application["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", "0"))


def test_applications_point_at_paths_in_this_repository():
    assert set(APPS) == {"operator", "tenants"}
    for application in [ROOT, *APPS.values()]:
        assert application["apiVersion"] == "argoproj.io/v1alpha1" and application["kind"] == "Application"
        assert (REPO_ROOT / application["spec"]["source"]["path"]).is_dir(), application["metadata"]["name"]
    assert ROOT["spec"]["source"]["path"] == "examples/argocd/apps"
    assert APPS["operator"]["spec"]["source"]["path"] == "charts/gpu-tenant-operator"
    assert APPS["tenants"]["spec"]["source"]["path"] == "examples/argocd/tenants"


def test_the_workloads_application_set_targets_every_cluster_secret_the_operator_writes():
    assert set(APPLICATION_SETS) == {"workloads"}
    spec = APPLICATION_SETS["workloads"]["spec"]
    [generator] = spec["generators"]
    selector = generator["clusters"]["selector"]["matchLabels"]
    assert selector.items() <= naming.tenant_labels("any-team", "argocd").items()
    assert (REPO_ROOT / spec["template"]["spec"]["source"]["path"]).is_dir()
    assert spec["template"]["spec"]["destination"]["server"] == "{{.server}}"


def test_operator_syncs_before_tenants_and_tenants_tolerate_a_missing_crd():
    assert wave(APPS["operator"]) < wave(APPS["tenants"])
    assert "SkipDryRunOnMissingResource=true" in APPS["tenants"]["spec"]["syncPolicy"]["syncOptions"]
    assert APPS["tenants"]["spec"]["syncPolicy"]["automated"]["allowEmpty"] is True
    assert "ServerSideApply=true" in APPS["operator"]["spec"]["syncPolicy"]["syncOptions"]


def test_every_tenant_needs_confirmation_to_be_deleted_and_is_a_valid_gpu_tenant():
    assert TENANT_FILES
    names = []
    for path in TENANT_FILES:
        body = yaml.safe_load(path.read_text())
        options = body["metadata"]["annotations"]["argocd.argoproj.io/sync-options"].split(",")
        assert {"Prune=confirm", "Delete=confirm"} <= set(options), path.name
        names.append(GpuTenant.model_validate(body).name)
    assert len(names) == len(set(names))


def operator_config() -> OperatorConfig:
    return OperatorConfig.model_validate(APPS["operator"]["spec"]["source"]["helm"]["valuesObject"]["config"])


@pytest.mark.parametrize("path", TENANT_FILES, ids=lambda p: p.stem)
def test_each_tenant_is_possible_under_the_operator_config_of_the_example(path):
    tenant = GpuTenant.model_validate(yaml.safe_load(path.read_text()))
    decision = decide(tenant.name, tenant.spec, operator_config())
    assert decision.possible, f"{path.name}: {decision.reason}: {decision.message}"
    assert render_tenant(tenant, decision, operator_config()).vcluster_values


def test_operator_values_pass_the_chart_schema(tmp_path):
    from kubeplane.tools import tools_bin_dir

    helm = tools_bin_dir() / "helm"
    if not helm.is_file():
        pytest.skip(f"no pinned helm at {helm}; run `make tools`")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(APPS["operator"]["spec"]["source"]["helm"]["valuesObject"]))
    result = subprocess.run([str(helm), "lint", str(REPO_ROOT / "charts" / "gpu-tenant-operator"),
                             "--values", str(values)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
