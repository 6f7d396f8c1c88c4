"""The packaged chart: `helm package` of a copy of charts/gpu-tenant-operator whose values name the
release's image by digest, then packed again with fixed times and owners so the same input gives
the same bytes (helm stamps each entry with the time it packs)."""

from __future__ import annotations

import gzip
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DIGEST_VALUE = re.compile(r"^  digest: ", re.MULTILINE)
"""values.yaml's `image.digest`, absent from charts before 0.2.0."""


def with_image(values: str, repository: str | None, digest: str) -> str:
    """values.yaml's text with `image.digest` (and `image.repository` when given) set, its comments
    and everything else kept."""
    if not DIGEST.match(digest):
        raise ValueError(f"not an image digest: {digest!r}")
    match = re.search(r"^image:\n((?:  .*\n|\s*\n)+)", values, flags=re.MULTILINE)
    if not match:
        raise ValueError("values.yaml has no top-level `image:` block: the chart changed, change this too")
    block, count = re.subn(r'^(  digest: )""$', rf'\g<1>"{digest}"', match.group(1), count=1, flags=re.MULTILINE)
    if count != 1:
        raise ValueError('values.yaml has no `  digest: ""` under image: the chart changed, change this too')
    if repository:
        block = re.sub(r"^(  repository: ).*$", lambda m: m.group(1) + repository, block, count=1, flags=re.MULTILINE)
    return values[:match.start(1)] + block + values[match.end(1):]


def normalised(package: bytes, mtime: int) -> bytes:
    """The chart archive with every entry's time `mtime`, owned by root, in name order; gzip's own
    header time and name zeroed."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(package), mode="r:gz") as source, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as target:
        for member in sorted(source.getmembers(), key=lambda m: m.name):
            content = source.extractfile(member) if member.isfile() else None
            member.mtime, member.uid, member.gid, member.uname, member.gname = mtime, 0, 0, "", ""
            member.pax_headers = {}
            target.addfile(member, content)
    return gzip.compress(out.getvalue(), compresslevel=9, mtime=0)


def package(helm: Path, version: str, digest: str, mtime: int, destination: Path, repository: str | None = None,
            source: Path = REPO_ROOT) -> Path:
    """dist/gpu-tenant-operator-<version>.tgz of the chart in the tree `source`, naming the image
    `repository` (default: the chart's) at `digest`; by tag when that chart has no `image.digest`."""
    with tempfile.TemporaryDirectory(prefix="gputenant-chart-") as scratch:
        copy = Path(scratch) / CHART.name
        shutil.copytree(source / CHART.relative_to(REPO_ROOT), copy)  # the CRD symlink copied as its file
        values = copy / "values.yaml"
        if DIGEST_VALUE.search(values.read_text()):
            values.write_text(with_image(values.read_text(), repository, digest))
        elif repository:
            raise ValueError(f"the chart of {source} has no image.digest value to name {repository} by digest")
        subprocess.run([str(helm), "package", str(copy), "--version", version, "--app-version", version,
                        "--destination", scratch], check=True, capture_output=True, text=True)
        packed = Path(scratch) / f"{CHART.name}-{version}.tgz"
        target = destination / packed.name
        target.write_bytes(normalised(packed.read_bytes(), mtime))
    return target
