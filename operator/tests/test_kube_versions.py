"""The two Kubernetes versions the harness can run (kubeplane.tools): the pin every test runs by
default and the oldest supported minor that only `make test-compat` runs.

Why: the opt-in check is worth something only if it builds what versions.env says, keeps its
binaries apart from the pinned ones (a compat build must never replace what `make test` runs), and
refuses to start when its binaries are missing or the variable names a version nobody builds,
rather than quietly running the pinned version under the compat name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubeplane.tools import (
    KUBE_BINARIES,
    KUBE_VERSION_VARIABLE,
    ToolsMissing,
    kube_bin_dir,
    kube_version,
    pinned_versions,
    require_kube_tools,
    tools_bin_dir,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULES = {"kube": REPO_ROOT / "tools" / "kube" / "go.mod", "kube-compat": REPO_ROOT / "tools" / "kube-compat" / "go.mod"}


@pytest.mark.parametrize("pin", sorted(MODULES))
def test_each_kubernetes_module_builds_the_version_its_pin_names(pin):
    """k8s.io/kubernetes at the pin, and every staging module replaced by the same release (the
    v0.<minor>.<patch> twin): a staging module of another release would not compile, or worse would."""
    version = pinned_versions()[pin]
    go_mod = MODULES[pin].read_text()
    assert re.search(rf"^\s*k8s\.io/kubernetes {re.escape(version)}\b", go_mod, re.M), f"{MODULES[pin]} builds another version"
    staging = "v0." + version.removeprefix("v1.")
    replaced = re.findall(r"^\s*(k8s\.io/\S+) => k8s\.io/\S+ (\S+)$", go_mod, re.M)
    assert len(replaced) > 25
    assert {module: release for module, release in replaced if release != staging} == {}


def test_the_compat_version_is_an_older_minor_than_the_pin():
    minor = [int(pinned_versions()[pin].split(".")[1]) for pin in ("kube-compat", "kube")]
    assert minor[0] < minor[1]


def test_unset_means_the_pin_and_the_variable_picks_the_compat_version(monkeypatch):
    monkeypatch.delenv(KUBE_VERSION_VARIABLE, raising=False)
    assert kube_version() == pinned_versions()["kube"]
    monkeypatch.setenv(KUBE_VERSION_VARIABLE, pinned_versions()["kube-compat"])
    assert kube_version() == pinned_versions()["kube-compat"]


def test_a_version_nobody_builds_is_refused_naming_the_two_that_are(monkeypatch):
    monkeypatch.setenv(KUBE_VERSION_VARIABLE, "v1.33.0")
    with pytest.raises(ToolsMissing) as refused:
        kube_version()
    assert pinned_versions()["kube"] in str(refused.value) and pinned_versions()["kube-compat"] in str(refused.value)


def test_the_compat_binaries_live_apart_from_the_pinned_ones(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUTENANT_TOOLS_DIR", str(tmp_path))
    assert kube_bin_dir(pinned_versions()["kube"]) == tools_bin_dir() == tmp_path.resolve() / "bin"
    compat = pinned_versions()["kube-compat"]
    assert kube_bin_dir(compat) == tmp_path.resolve() / f"kube-{compat}" / "bin"


def test_missing_compat_binaries_stop_the_harness_naming_make_tools_compat(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUTENANT_TOOLS_DIR", str(tmp_path))
    compat = pinned_versions()["kube-compat"]
    monkeypatch.setenv(KUBE_VERSION_VARIABLE, compat)
    directory = kube_bin_dir(compat)
    directory.mkdir(parents=True)
    (directory / "kube-apiserver").write_text("")
    (directory / ".kube-apiserver.version").write_text(pinned_versions()["kube"])  # built at the pin: not it
    with pytest.raises(ToolsMissing) as refused:
        require_kube_tools()
    message = str(refused.value)
    assert "`make tools-compat`" in message and compat in message and KUBE_VERSION_VARIABLE in message
    assert all(name in message for name in KUBE_BINARIES)


def test_built_compat_binaries_are_found_where_make_tools_compat_puts_them(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUTENANT_TOOLS_DIR", str(tmp_path))
    compat = pinned_versions()["kube-compat"]
    monkeypatch.setenv(KUBE_VERSION_VARIABLE, compat)
    directory = kube_bin_dir(compat)
    directory.mkdir(parents=True)
    for name in KUBE_BINARIES:
        (directory / name).write_text("")
        (directory / f".{name}.version").write_text(compat + "\n")
    assert require_kube_tools() == directory
