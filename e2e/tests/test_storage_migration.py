"""`gputenant migrate-storage` on the real API server: GpuTenants stored as v1alpha1 are rewritten
once the CRD's storage version is v1beta1, and `status.storedVersions` is trimmed, so that v1alpha1
can then be dropped from the CRD. This release still stores v1alpha1 (docs/api-versions.md, "Why
storage moves a release later"); the test applies the next release's storage choice to show the
step that release needs. The proof that every object moved: with v1alpha1 gone from the CRD, each
reads back as v1beta1 with its fields, which an object still stored as v1alpha1 would not.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest
import yaml

from gputenant.api.crd import build_crd
from gputenant.guard.conversion import CRD_NAME
from kubeplane.fixtures import install_crds

REPO_ROOT = Path(__file__).resolve().parents[2]
GPUTENANT = Path(sys.executable).parent / "gputenant"
GROUP, PLURAL = "gputenant.io", "gputenants"
OWNERS = [{"kind": "User", "name": "a"}]
WRITTEN = {
    "mig-alpha": ("v1alpha1", {"trust": "Internal", "owners": OWNERS,
                               "sharing": {"mode": "HAMi", "hami": {"memoryMiB": 20480}}}),
    "mig-beta": ("v1beta1", {"trust": "Internal", "owners": OWNERS,
                             "sharing": {"mode": "HAMi", "hami": {"memory": "10240Mi"}}}),
    "mig-plain": ("v1alpha1", {"trust": "Untrusted", "owners": OWNERS, "gpu": {"quota": 2}}),
}
EXPECTED_MEMORY = {"mig-alpha": "20Gi", "mig-beta": "10240Mi", "mig-plain": None}


def crd_file(tmp_path: Path, name: str, storage: str, served: tuple[str, ...]) -> Path:
    crd = build_crd()
    crd["spec"]["versions"] = [{**version, "storage": version["name"] == storage}
                               for version in crd["spec"]["versions"] if version["name"] in served]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(crd))
    return path


def stored_versions(plane) -> list[str]:
    with plane.api_client() as client:
        crd = kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition(CRD_NAME)
        return list(crd.status.stored_versions or [])


def migrate(plane) -> str:
    result = subprocess.run([str(GPUTENANT), "migrate-storage", "--kubeconfig", str(plane.kubeconfig_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def stored_as_v1alpha1(plane, crds, tmp_path):
    install_crds(plane, crd_file(tmp_path, "stores-v1alpha1", "v1alpha1", ("v1alpha1", "v1beta1")))
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        for name, (version, spec) in WRITTEN.items():
            custom.create_cluster_custom_object(GROUP, version, PLURAL, {
                "apiVersion": f"{GROUP}/{version}", "kind": "GpuTenant", "metadata": {"name": name}, "spec": spec})
    try:
        yield
    finally:
        install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
        plane.kubectl("delete", f"{PLURAL}.v1beta1.{GROUP}", *WRITTEN, "--ignore-not-found")


def test_objects_stored_as_v1alpha1_are_migrated_and_v1alpha1_can_then_go(plane, stored_as_v1alpha1, tmp_path):
    assert "v1alpha1" in stored_versions(plane)
    install_crds(plane, crd_file(tmp_path, "stores-v1beta1", "v1beta1", ("v1alpha1", "v1beta1")))
    assert set(stored_versions(plane)) == {"v1alpha1", "v1beta1"}

    said = migrate(plane)
    assert said.startswith(f"{CRD_NAME}: {len(WRITTEN)} objects rewritten as v1beta1;"), said
    assert "-> [v1beta1]" in said
    assert stored_versions(plane) == ["v1beta1"]
    assert migrate(plane) == f"{CRD_NAME}: every object is stored as v1beta1; nothing to do"

    install_crds(plane, crd_file(tmp_path, "only-v1beta1", "v1beta1", ("v1beta1",)))
    for name, memory in EXPECTED_MEMORY.items():
        body = plane.cluster_object(GROUP, "v1beta1", PLURAL, name)
        assert body is not None and body["spec"]["trust"] == WRITTEN[name][1]["trust"]
        assert (body["spec"]["sharing"].get("hami") or {}).get("memory") == memory, body["spec"]
