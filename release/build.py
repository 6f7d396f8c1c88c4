"""The release's steps in order: the image (cached by its inputs unless fresh), the chart naming it by
digest, the SBOM read from the image, and the checksums of the three."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from kubeplane.operator_image import manifest_digest, operator_image
from kubeplane.tools import pinned_versions, tools_bin_dir
from release import chart, sbom

REPO_ROOT = Path(__file__).resolve().parents[1]
IMAGE_NAME = "gpu-tenant-operator"
CHECKSUMS = "SHA256SUMS"
RELEASE_FILE = re.compile(rf"^({IMAGE_NAME}-[^/]+\.(oci\.tar|tgz|spdx\.json)|{CHECKSUMS})$")
"""What a release writes into its directory: the only files `build` removes from it."""


PREVIOUS_RELEASE = "21b878887605290d4b05af7d996bf83cf9a484bf"
"""0.2.0 as the upgrade e2e builds it (`git archive`, then `build(source=...)`): none was tagged; this
is the last commit of 0.2.0, which serves v1beta1 and still stores v1alpha1. (0.1.0, e1b505b, was
the last commit before release artifacts existed.)"""


def project_version(source: Path = REPO_ROOT) -> str:
    """The one version: pyproject.toml's. The packaged chart's version and appVersion are set from
    it; the source tree's Chart.yaml must agree (operator/tests/test_release_parts.py)."""
    return tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"]


def source_time(commit: str = "HEAD") -> int:
    """The time every packed file carries: the commit's (SOURCE_DATE_EPOCH's convention)."""
    return int(subprocess.run(["git", "log", "-1", "--format=%ct", commit], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout)


def checkout(commit: str, directory: Path) -> Path:
    """The project's tree at `commit` in `directory` (git archive: no .git, as a release tarball)."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO_ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def uncommitted_changes() -> list[str]:
    """`git status --porcelain` of the repository: a release of a tree with changes matches no commit."""
    return subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def checksums(paths: list[Path]) -> str:
    return "".join(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n" for path in sorted(paths))


def build(dist: Path, fresh: bool = False, bin_dir: Path | None = None, image_repository: str | None = None,
          source: Path = REPO_ROOT, commit: str = "HEAD") -> dict[str, Path]:
    """Write the artifacts of the tree `source` (at `commit`) into `dist` (emptied first); returns
    them by kind. `image_repository` is where the image will be pushed (the packaged chart names it
    there); default: the chart's. A tree whose chart cannot name its image by digest (before 0.2.0)
    gets its chart packaged naming it by tag."""
    bin_dir = bin_dir or tools_bin_dir()
    version, mtime = project_version(source), source_time(commit)
    if dist.exists():
        others = [path.name for path in dist.iterdir() if not RELEASE_FILE.match(path.name)]
        if others:
            raise ValueError(f"{dist} holds files no release writes ({', '.join(sorted(others)[:5])}): "
                             "name an empty or new directory")
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    _, cached = operator_image(bin_dir, fresh=fresh, source=source)
    image = dist / f"{IMAGE_NAME}-{version}.oci.tar"
    shutil.copyfile(cached, image)
    digest = manifest_digest(image)
    packaged = chart.package(bin_dir / "helm", version, digest, mtime, dist, image_repository, source=source)
    bom = dist / f"{IMAGE_NAME}-{version}.spdx.json"
    with open(image, "rb") as archive:
        document = sbom.document(archive, IMAGE_NAME, version, digest, pinned_versions()["helm"], mtime)
    bom.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    sums = dist / CHECKSUMS
    sums.write_text(checksums([image, packaged, bom]))
    return {"image": image, "chart": packaged, "sbom": bom, "checksums": sums}
