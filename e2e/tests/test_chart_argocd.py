"""docs/argocd.md against a real kube-apiserver: the example tenants are accepted by the GpuTenant
CRD (server-side dry-run), and the documented command that installs the health check adds its key
to argocd-cm without touching the others."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes
from kubernetes.client.rest import ApiException

REPO_ROOT = Path(__file__).resolve().parents[2]
ARGOCD_DOC = REPO_ROOT / "docs" / "argocd.md"
HEALTH_LUA = REPO_ROOT / "operator" / "gputenant" / "argocd" / "health.lua"
HEALTH_KEY = "resource.customizations.health.gputenant.io_GpuTenant"
TESTED_MARKER = "<!-- tested: e2e/tests/test_chart_argocd.py"


def documented_commands() -> str:
    text = ARGOCD_DOC.read_text()
    after_marker = text[text.index(TESTED_MARKER):]
    start = after_marker.index("```sh\n") + len("```sh\n")
    return after_marker[start:after_marker.index("```", start)]


def test_example_tenants_pass_server_side_dry_run_against_the_crd(plane, crds):
    result = plane.kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=argocd-controller",
                           "-f", str(REPO_ROOT / "examples" / "argocd" / "tenants"))
    tenants = sorted((REPO_ROOT / "examples" / "argocd" / "tenants").glob("*.yaml"))
    assert result.stdout.count("serverside-applied (server dry run)") == len(tenants), result.stdout


def test_documented_health_check_install_keeps_the_other_argocd_cm_keys(plane):
    with plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        try:
            plane.create_namespace("argocd")
        except ApiException as error:
            if error.status != 409:
                raise
        core.create_namespaced_config_map("argocd", {"metadata": {"name": "argocd-cm"},
                                                     "data": {"url": "https://argocd.example.com"}})
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_commands()], cwd=REPO_ROOT,
                                env=plane.env(), capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        data = core.read_namespaced_config_map("argocd-cm", "argocd").data
    assert data["url"] == "https://argocd.example.com"
    assert data[HEALTH_KEY] == HEALTH_LUA.read_text()
