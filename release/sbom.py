"""An SPDX 2.3 software bill of materials of the operator's image, read from the image archive
itself (what is in it, not what was asked for): its Debian packages (`var/lib/dpkg/status`), the
Python distributions of its virtual environment (their `METADATA`) and the helm binary."""

from __future__ import annotations

import email.parser
import json
import re
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import IO
from urllib.parse import quote

DPKG_STATUS = "var/lib/dpkg/status"
SITE_PACKAGES_METADATA = re.compile(r"^opt/gputenant/lib/python3\.\d+/site-packages/[^/]+\.dist-info/METADATA$")
DEBIAN_SUITE = "bookworm"


def debian_packages(status: str) -> Iterator[tuple[str, str, str]]:
    """(name, version, architecture) of every installed package in a dpkg status file."""
    for stanza in status.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): (.*)$", stanza, flags=re.MULTILINE))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            yield fields["Package"], fields["Version"], fields.get("Architecture", "all")


def python_distribution(metadata: str) -> tuple[str, str]:
    message = email.parser.Parser().parsestr(metadata, headersonly=True)
    return message["Name"], message["Version"]


def image_contents(layer: IO[bytes]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(Debian packages, Python distributions) in one image layer."""
    debian: list[tuple[str, str, str]] = []
    python: list[tuple[str, str]] = []
    with tarfile.open(fileobj=layer, mode="r|") as tar:
        for member in tar:
            if not member.isfile():
                continue
            name = member.name.lstrip("./")
            if name == DPKG_STATUS or SITE_PACKAGES_METADATA.match(name):
                content = tar.extractfile(member)
                assert content is not None
                text = content.read().decode()
                if name == DPKG_STATUS:
                    debian.extend(debian_packages(text))
                else:
                    python.append(python_distribution(text))
    return sorted(debian), sorted(python)


def package(spdx_id: str, name: str, version: str, purl: str) -> dict:
    return {"SPDXID": spdx_id, "name": name, "versionInfo": version, "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False, "externalRefs": [
                {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl", "referenceLocator": purl}]}


def spdx_id(kind: str, name: str) -> str:
    return f"SPDXRef-{kind}-" + re.sub(r"[^A-Za-z0-9.-]", "-", name)


def document(image_archive: IO[bytes], image_name: str, version: str, digest: str, helm_version: str,
             created: int) -> dict:
    """The SPDX document for the image in `image_archive` (an OCI image-layout tarball)."""
    with tarfile.open(fileobj=image_archive) as archive:
        index = json.load(archive.extractfile("index.json"))  # type: ignore[arg-type]
        manifest_path = "blobs/sha256/" + index["manifests"][0]["digest"].removeprefix("sha256:")
        manifest = json.load(archive.extractfile(manifest_path))  # type: ignore[arg-type]
        [layer] = manifest["layers"]
        layer_file = archive.extractfile("blobs/sha256/" + layer["digest"].removeprefix("sha256:"))
        assert layer_file is not None
        debian, python = image_contents(layer_file)
    image_id = "SPDXRef-image"
    packages = [package(image_id, image_name, version, f"pkg:oci/{image_name}@{quote(digest)}")]
    packages += [package(spdx_id("deb", name), name, deb_version,
                         f"pkg:deb/debian/{name}@{quote(deb_version)}?arch={arch}&distro={DEBIAN_SUITE}")
                 for name, deb_version, arch in debian]
    packages += [package(spdx_id("pypi", name), name, py_version,
                         f"pkg:pypi/{re.sub(r'[-_.]+', '-', name).lower()}@{quote(py_version)}")
                 for name, py_version in python]
    packages.append(package("SPDXRef-helm", "helm", helm_version, f"pkg:golang/helm.sh/helm/v3@{helm_version}"))
    contained = [p["SPDXID"] for p in packages[1:]]
    return {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"{image_name}-{version}",
        "documentNamespace": f"https://gputenant.io/spdx/{image_name}/{version}/{digest}",
        "creationInfo": {"created": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         "creators": ["Tool: gpu-tenant-operator release (python -m release)"]},
        "documentDescribes": [image_id],
        "packages": packages,
        "relationships": [{"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": element}
                          for element in contained],
    }
