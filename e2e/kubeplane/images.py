"""The node's container images, written by the project as OCI image-layout tarballs (no registry is
reachable here) and imported into the node's containerd at start.

- the pause image, from the project's own static `pause` program (tools/pause), which containerd
  runs in every pod sandbox;
- a test image: Debian's static busybox with one symlink per applet (sh, sleep, nc, ...), and the
  project's `httpsget` (tools/httpsget), because that busybox's wget crashes on https URLs, and
  `spoofudp` (tools/spoofudp), which sends a datagram with a forged source address.

Each tarball is reproducible (fixed mtimes and owners) and cached beside the tools, named after
the digest of what went into it, so a changed binary gives a new file and an unchanged one is
written once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .tools import tools_bin_dir

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "localhost/kubeplane/pause:1.0"
"""Fully qualified, so containerd never tries to pull it (it is also containerd's sandbox_image)."""
TEST_IMAGE = "localhost/kubeplane/testbox:1.35.0"
"""A tag other than `latest`, so the default imagePullPolicy is IfNotPresent and nothing is pulled."""

_LAYER = "application/vnd.oci.image.layer.v1.tar"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class ImageFile:
    """A file of the image's root filesystem: content from `source`, or a symlink to `link`."""

    path: str
    source: Path | None = None
    link: str | None = None
    mode: int = 0o755


def _layer(files: list[ImageFile]) -> bytes:
    """An uncompressed layer tar with its parent directories, reproducible byte for byte."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        directories = sorted({str(Path(f.path).parent) for f in files} - {"."} | {"tmp"})
        for directory in directories:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        for file in sorted(files, key=lambda f: f.path):
            info = tarfile.TarInfo(file.path)
            info.mode = file.mode
            if file.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, file.link
                tar.addfile(info)
            elif file.source is None:
                raise ValueError(f"{file.path}: neither a link nor a source file")
            else:
                content = file.source.read_bytes()
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def _blob(data: bytes, media_type: str) -> tuple[dict, bytes]:
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    return {"mediaType": media_type, "digest": digest, "size": len(data)}, data


def oci_archive(reference: str, files: list[ImageFile], entrypoint: list[str] | None = None,
                cmd: list[str] | None = None) -> bytes:
    """An OCI image-layout tarball of one linux/amd64 image called `reference`, as
    `ctr images import` reads it (the name comes from the `io.containerd.image.name` annotation)."""
    layer_descriptor, layer = _blob(_layer(files), _LAYER)
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Cmd": cmd,
                   "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer_descriptor["digest"]]},
    }
    config_descriptor, config_blob = _blob(json.dumps(config, sort_keys=True).encode(), _CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": _MANIFEST, "config": config_descriptor,
                "layers": [layer_descriptor]}
    manifest_descriptor, manifest_blob = _blob(json.dumps(manifest, sort_keys=True).encode(), _MANIFEST)
    tag = reference.rsplit(":", 1)[1]
    manifest_descriptor.update(
        platform={"architecture": "amd64", "os": "linux"},
        annotations={"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": tag})
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_descriptor]}
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    for descriptor, blob in ((layer_descriptor, layer), (config_descriptor, config_blob),
                             (manifest_descriptor, manifest_blob)):
        entries[f"blobs/sha256/{descriptor['digest'].removeprefix('sha256:')}"] = blob
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add_oci_entries(tar, entries)
    return buffer.getvalue()


def add_oci_entries(tar: tarfile.TarFile, entries: dict[str, bytes]) -> None:
    """An OCI image layout's blob directories and `entries` (path in the layout -> bytes) into `tar`."""
    for directory in ("blobs", "blobs/sha256"):
        info = tarfile.TarInfo(directory)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    for name, data in entries.items():
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))


def pause_files(bin_dir: Path) -> list[ImageFile]:
    return [ImageFile("pause", bin_dir / "pause")]


def busybox_image_files(bin_dir: Path, busybox: Path = BUSYBOX) -> list[ImageFile]:
    applets = subprocess.run([str(busybox), "--list"], check=True, capture_output=True,
                             text=True).stdout.split()
    return [ImageFile("bin/busybox", busybox), ImageFile("bin/httpsget", bin_dir / "httpsget"),
            ImageFile("bin/spoofudp", bin_dir / "spoofudp")] + [
        ImageFile(f"bin/{applet}", link="busybox") for applet in applets if applet != "busybox"]


def _cached(cache_dir: Path, reference: str, files: list[ImageFile], build) -> Path:
    """The archive for `reference` made from `files`, written once per content of its sources."""
    fingerprint = hashlib.sha256(reference.encode())
    for file in files:
        fingerprint.update(f"{file.path}\0{file.link}\0".encode())
        if file.source is not None:
            fingerprint.update(file.source.read_bytes())
    name = reference.rsplit("/", 1)[1].replace(":", "-")
    path = cache_dir / f"{name}-{fingerprint.hexdigest()[:16]}.oci.tar"
    if not path.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_bytes(build())
        partial.rename(path)
    return path


def node_images(bin_dir: Path | None = None) -> dict[str, Path]:
    """Image reference -> OCI tarball, for every image the node needs, written if missing."""
    bin_dir = bin_dir or tools_bin_dir()
    cache_dir = bin_dir.parent / "images"
    pause, test = pause_files(bin_dir), busybox_image_files(bin_dir)
    return {
        PAUSE_IMAGE: _cached(cache_dir, PAUSE_IMAGE, pause,
                             lambda: oci_archive(PAUSE_IMAGE, pause, ["/pause"])),
        TEST_IMAGE: _cached(cache_dir, TEST_IMAGE, test,
                            lambda: oci_archive(TEST_IMAGE, test, cmd=["sh"])),
    }
