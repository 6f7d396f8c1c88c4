"""API versions as packages: the group and versions are written once (api/group.py), each served
version is a package (api/v1alpha1/), and code outside api/ uses the hub (api/hub.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import gputenant
from gputenant.api import group, hub
from gputenant.api import v1alpha1 as served

PACKAGE = Path(gputenant.__file__).parent
REPO_ROOT = PACKAGE.parents[1]


def test_no_module_outside_api_names_a_version():
    versions = re.compile("|".join(re.escape(version) for version in group.SERVED_VERSIONS))
    found = [f"{path.relative_to(PACKAGE)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.relative_to(PACKAGE).parts[0] != "api"
             for number, line in enumerate(path.read_text().splitlines(), 1) if versions.search(line)]
    assert not found, f"import gputenant.api.hub and gputenant.api.group instead: {found}"


def test_the_hub_is_v1alpha1s_shape_and_reads_the_stored_version():
    assert group.STORAGE_VERSION in group.SERVED_VERSIONS
    assert set(hub.__all__) == set(served.__all__) | {"ConversionError", "spec_from_stored"}
    assert all(getattr(hub, name) is getattr(served, name) for name in served.__all__ if name != "GpuTenant")
    assert issubclass(hub.GpuTenant, served.GpuTenant)
    assert hub.GpuTenant.model_validate({"metadata": {"name": "a"}, "spec": {
        "trust": "Trusted", "owners": [{"kind": "User", "name": "a"}]}}).api_version == hub.HUB_API_VERSION
    assert hub.HUB_API_VERSION == f"{group.GROUP}/{group.HUB_VERSION}"


def test_the_crd_serves_and_stores_the_versions_group_names():
    crd = yaml.safe_load((REPO_ROOT / "crds" / "tenant.yaml").read_text())
    assert crd["spec"]["group"] == group.GROUP and crd["spec"]["names"]["kind"] == group.KIND
    assert [v["name"] for v in crd["spec"]["versions"]] == list(group.SERVED_VERSIONS)
    assert [v["name"] for v in crd["spec"]["versions"] if v["storage"]] == [group.STORAGE_VERSION]
    assert gputenant.API_VERSION == f"{group.GROUP}/{group.STORAGE_VERSION}"
