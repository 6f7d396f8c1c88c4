"""The release's pure parts (release/): one version, the chart's digest value, deterministic
packing, and the SBOM read from an image archive. The build against real tools, and the install
from its artifacts, are e2e/tests/test_release.py's."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time

import pytest
import yaml

from release import chart, sbom
from release.build import REPO_ROOT, build, checksums, project_version

DIGEST = "sha256:" + "ab" * 32


def test_the_charts_version_and_app_version_are_the_projects():
    chart_yaml = yaml.safe_load((REPO_ROOT / "charts" / "gpu-tenant-operator" / "Chart.yaml").read_text())
    assert chart_yaml["version"] == chart_yaml["appVersion"] == project_version(), (
        "charts/gpu-tenant-operator/Chart.yaml's version and appVersion must be pyproject.toml's version")


def test_the_image_is_written_into_the_values_and_nothing_else_changes():
    values = (REPO_ROOT / "charts" / "gpu-tenant-operator" / "values.yaml").read_text()
    written = chart.with_image(values, None, DIGEST)
    assert yaml.safe_load(written)["image"]["digest"] == DIGEST
    assert written.replace(f'"{DIGEST}"', '""') == values
    pushed = yaml.safe_load(chart.with_image(values, "ghcr.io/example/gpu-tenant-operator", DIGEST))
    original = yaml.safe_load(values)
    assert pushed["image"] == {**original["image"], "repository": "ghcr.io/example/gpu-tenant-operator", "digest": DIGEST}
    assert {key: value for key, value in pushed.items() if key != "image"} == \
        {key: value for key, value in original.items() if key != "image"}


@pytest.mark.parametrize("digest", ["", "sha256:short", "latest", "sha512:" + "ab" * 64])
def test_what_is_not_a_digest_is_refused(digest):
    with pytest.raises(ValueError, match="not an image digest"):
        chart.with_image('image:\n  digest: ""\n', None, digest)


def _tgz(entries: dict[str, bytes], mtime: float) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.uid, info.uname = len(data), mtime, 1000, "builder"
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(out.getvalue(), mtime=mtime)


def test_packing_is_deterministic_whatever_the_times_and_order_helm_wrote():
    entries = {"c/Chart.yaml": b"name: c\n", "c/values.yaml": b"a: 1\n"}
    first = chart.normalised(_tgz(entries, time.time()), 1_700_000_000)
    second = chart.normalised(_tgz(dict(reversed(entries.items())), time.time() + 60), 1_700_000_000)
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(entries)
        assert {(m.mtime, m.uid, m.uname) for m in members} == {(1_700_000_000, 0, "")}
        assert tar.extractfile("c/values.yaml").read() == b"a: 1\n"  # type: ignore[union-attr]


DPKG_STATUS = """Package: python3
Status: install ok installed
Architecture: amd64
Version: 3.11.2-1+b1

Package: removed-one
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9+deb12u10
"""
METADATA = "Metadata-Version: 2.1\nName: typing_extensions\nVersion: 4.15.0+local\nSummary: types\n"


def _image_archive() -> bytes:
    """An OCI layout whose one layer holds a dpkg status file and one dist-info METADATA."""
    layer_bytes = io.BytesIO()
    with tarfile.open(fileobj=layer_bytes, mode="w") as layer:
        for name, text in ((sbom.DPKG_STATUS, DPKG_STATUS),
                           ("opt/gputenant/lib/python3.11/site-packages/typing_extensions-4.15.0.dist-info/METADATA",
                            METADATA),
                           ("opt/gputenant/lib/python3.11/site-packages/kopf/__init__.py", "")):
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            layer.addfile(info, io.BytesIO(text.encode()))
    layer_data = layer_bytes.getvalue()
    manifest = json.dumps({"layers": [{"digest": "sha256:layer"}]}).encode()
    index = json.dumps({"manifests": [{"digest": "sha256:manifest"}]}).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("index.json", index), ("blobs/sha256/manifest", manifest), ("blobs/sha256/layer", layer_data)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_sbom_lists_what_the_image_holds():
    document = sbom.document(io.BytesIO(_image_archive()), "gpu-tenant-operator", "0.1.0", DIGEST, "v3.22.0", 0)
    purls = [ref["referenceLocator"] for package in document["packages"] for ref in package["externalRefs"]]
    assert purls == ["pkg:oci/gpu-tenant-operator@sha256%3A" + "ab" * 32,
                     "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=bookworm",
                     "pkg:deb/debian/python3@3.11.2-1%2Bb1?arch=amd64&distro=bookworm",
                     "pkg:pypi/typing-extensions@4.15.0%2Blocal", "pkg:golang/helm.sh/helm/v3@v3.22.0"]
    assert document["documentDescribes"] == ["SPDXRef-image"]
    assert len(document["relationships"]) == len(document["packages"]) - 1
    assert document["creationInfo"]["created"] == "1970-01-01T00:00:00Z"


def test_checksums_are_in_sha256sums_format(tmp_path):
    (tmp_path / "b").write_bytes(b"b")
    (tmp_path / "a").write_bytes(b"")
    assert checksums([tmp_path / "b", tmp_path / "a"]) == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  a\n"
        "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d  b\n")


def test_a_release_never_empties_a_directory_holding_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files no release writes \\(notes.txt\\)"):
        build(tmp_path, bin_dir=tmp_path / "no-tools")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_chart_that_cannot_name_its_image_by_digest_refuses_a_repository(tmp_path):
    old_chart = tmp_path / "tree" / "charts" / "gpu-tenant-operator"
    old_chart.mkdir(parents=True)
    (old_chart / "values.yaml").write_text('image:\n  repository: gpu-tenant-operator\n  tag: ""\n')
    with pytest.raises(ValueError, match="no image.digest value"):
        chart.package(tmp_path / "no-helm", "0.1.0", DIGEST, 0, tmp_path, "registry.example.com/gto",
                      source=tmp_path / "tree")
