"""The operator's own image, built here without a container engine or a registry, so the e2e tests
can run the operator in-cluster from its Helm chart (charts/gpu-tenant-operator), and `make
release` (release/) ships the same archive.

It follows the repository's Dockerfile (the production recipe), part for part:

- a root filesystem of Debian packages (`mmdebstrap`, bookworm: python3 and python3-venv, whose
  Python 3.11 the project supports) in place of the `python:3.12-slim-bookworm` base;
- the project's wheel and its pinned dependencies installed from PyPI into the virtual
  environment `/opt/gputenant`, as the Dockerfile's build stage does;
- the pinned `helm` binary tools/build.sh built (the Dockerfile builds it from the same module);
- the same image config: ENTRYPOINT `gputenant`, the same CMD, PATH, PYTHONUNBUFFERED, HOME=/tmp,
  USER 65532:65532, with that user named in /etc/passwd and /etc/group.

One layer, written as an OCI image-layout tarball the way images.py writes the node's images, but
streamed through files (the root filesystem is a few hundred MB). The tarball is cached beside the
other images under a name keyed by the digest of the wheel's contents, the package list, the
requirements and the helm binary: an unchanged operator is built once (minutes), a changed one
again. The image is tagged exactly as the chart's values name it (`image.repository` and the
chart's appVersion), as the kubelet resolves that name (docker.io/library/...), so the Deployment
pulls nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import yaml

from .images import _CONFIG, _LAYER, _MANIFEST, _blob, add_oci_entries
from .tools import REPO_ROOT, tools_bin_dir

CHART = REPO_ROOT / "charts" / "gpu-tenant-operator"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
VENV = "/opt/gputenant"
ENTRYPOINT = ["gputenant"]
CMD = ["run", "--config", "/etc/gputenant/config.yaml", "--liveness", "http://0.0.0.0:8080/healthz"]
ENV = [f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "PYTHONUNBUFFERED=1", "HOME=/tmp"]
USER = "65532:65532"
PASSWD_ENTRY = "nonroot:x:65532:65532:nonroot:/tmp:/usr/sbin/nologin"
GROUP_ENTRY = "nonroot:x:65532:"
"""The user has a name: kopf names the operator's identity after getpass.getuser(), which fails for a
uid /etc/passwd does not know."""
"""The Dockerfile's runtime settings; test_operator_incluster checks the Dockerfile still says so."""
_PRUNED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt",
           "var/lib/apt/lists", "var/log")
_EPOCH = 1700000000
ARCHIVE_FORMAT = "2"
"""Part of the cache key: 2 names the image by digest as well as by tag (write_archive)."""


def operator_image_reference(source: Path = REPO_ROOT) -> str:
    """The image as the chart of the tree `source` names it by default (repository, tag = the
    chart's appVersion), normalised the way the kubelet asks containerd for it."""
    chart = source / CHART.relative_to(REPO_ROOT)
    values = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    tag = values["tag"] or str(yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"])
    repository = values["repository"]
    if "/" not in repository:
        repository = f"docker.io/library/{repository}"
    return f"{repository}:{tag}"


def build_wheel(directory: Path, source: Path = REPO_ROOT) -> Path:
    """The wheel of the project's tree `source` in `directory`. setuptools builds in the tree and
    packs whatever an earlier build left in the git-ignored build/lib, so that goes first."""
    shutil.rmtree(source / "build", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(directory), str(source)], check=True)
    return next(directory.glob("gpu_tenant_operator-*.whl"))


def _fingerprint(wheel: Path, helm: Path) -> str:
    """The digest of what goes into the image: the wheel's members (not its zip bytes, which carry
    timestamps), the packages, the pinned requirements (inside the wheel's METADATA) and helm."""
    digest = hashlib.sha256(f"{ARCHIVE_FORMAT}\0{SUITE}\0{' '.join(PACKAGES)}\0{ENV}\0{CMD}\0{USER}\0{PASSWD_ENTRY}\0"
                            f"{GROUP_ENTRY}".encode())
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            if not name.endswith("/RECORD"):
                digest.update(name.encode() + b"\0" + archive.read(name))
    digest.update(helm.read_bytes())
    return digest.hexdigest()[:16]


def build_rootfs(root: Path, wheel: Path, helm: Path) -> None:
    """Debian's packages, the virtual environment with the wheel and its dependencies, helm. The
    dependencies' wheels come from PyPI through this machine's pip (its index and CA settings);
    the image's own pip installs them offline."""
    subprocess.run(["mmdebstrap", "--quiet", "--mode=root", "--variant=essential",
                    f"--include={','.join(PACKAGES)}", SUITE, str(root)], check=True)
    wheels = root / "tmp" / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), str(wheel)],
                   check=True)
    image_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    subprocess.run(["chroot", str(root), "python3", "-m", "venv", VENV], check=True, env=image_env)
    subprocess.run(["chroot", str(root), f"{VENV}/bin/pip", "install", "--quiet", "--no-cache-dir", "--no-index",
                    "--find-links", "/tmp/wheels", f"/tmp/wheels/{wheel.name}"], check=True, env=image_env)
    shutil.rmtree(wheels)
    with open(root / "etc" / "passwd", "a") as passwd:
        passwd.write(PASSWD_ENTRY + "\n")
    with open(root / "etc" / "group", "a") as group:
        group.write(GROUP_ENTRY + "\n")
    shutil.copy2(helm, root / "usr" / "local" / "bin" / "helm")
    for pruned in _PRUNED:
        shutil.rmtree(root / pruned, ignore_errors=True)
    for leftover in (root / "dev").iterdir():
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:
            leftover.unlink()


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Fixed owners and mtimes (root-owned system files, as in any image); no caches."""
    if "/__pycache__" in info.name:
        return None
    info.mtime, info.uid, info.gid, info.uname, info.gname = _EPOCH, 0, 0, "root", "root"
    if info.name == "tmp":
        info.mode = 0o1777
    return info


def _write_layer(root: Path, path: Path) -> dict:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(os.listdir(root)):
            tar.add(root / entry, arcname=entry, filter=_normalised)
    digest = hashlib.sha256()
    with open(path, "rb") as layer:
        while chunk := layer.read(1 << 20):
            digest.update(chunk)
    return {"mediaType": _LAYER, "digest": f"sha256:{digest.hexdigest()}", "size": path.stat().st_size}


def write_archive(reference: str, layer_path: Path, layer: dict, path: Path) -> None:
    """An OCI image-layout tarball of one linux/amd64 image named `reference`, as `ctr images
    import` reads it; the layer is copied in from its file. The index names the image twice, by
    tag and by its manifest digest (`repository@sha256:...`), so a chart that names it by digest
    (a release's, docs/install.md) finds it imported too."""
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": ENTRYPOINT, "Cmd": CMD, "Env": ENV, "User": USER},
              "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]}}
    config_descriptor, config_blob = _blob(json.dumps(config, sort_keys=True).encode(), _CONFIG)
    manifest = {"schemaVersion": 2, "mediaType": _MANIFEST, "config": config_descriptor, "layers": [layer]}
    manifest_descriptor, manifest_blob = _blob(json.dumps(manifest, sort_keys=True).encode(), _MANIFEST)
    manifest_descriptor.update(platform={"architecture": "amd64", "os": "linux"})
    repository = reference.rsplit(":", 1)[0]
    by_tag = {**manifest_descriptor, "annotations": {"io.containerd.image.name": reference,
                                                     "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1]}}
    by_digest = {**manifest_descriptor, "annotations": {
        "io.containerd.image.name": f"{repository}@{manifest_descriptor['digest']}"}}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [by_tag, by_digest]}
    small = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": json.dumps(index, sort_keys=True).encode(),
             f"blobs/sha256/{config_descriptor['digest'][7:]}": config_blob,
             f"blobs/sha256/{manifest_descriptor['digest'][7:]}": manifest_blob}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        add_oci_entries(tar, small)
        info = tarfile.TarInfo(f"blobs/sha256/{layer['digest'][7:]}")
        info.size, info.mode = layer["size"], 0o644
        with open(layer_path, "rb") as content:
            tar.addfile(info, content)


def manifest_digest(archive: Path) -> str:
    """The image's manifest digest (`sha256:...`), from the archive's index."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        return json.load(member)["manifests"][0]["digest"]


def operator_image(bin_dir: Path | None = None, fresh: bool = False, source: Path = REPO_ROOT) -> tuple[str, Path]:
    """(reference, OCI tarball) of the operator's image from the project's tree `source` (another
    commit's, for an upgrade from it), built if the cache lacks it, or always with `fresh` (what
    shows the build reproducible: the same inputs give the same digest)."""
    bin_dir = bin_dir or tools_bin_dir()
    cache_dir = bin_dir.parent / "images"
    reference = operator_image_reference(source)
    helm = bin_dir / "helm"
    with tempfile.TemporaryDirectory(prefix="gputenant-image-") as scratch:
        work = Path(scratch)
        wheel = build_wheel(work / "wheel", source)
        name = reference.rsplit("/", 1)[1].replace(":", "-")
        path = cache_dir / f"{name}-{_fingerprint(wheel, helm)}.oci.tar"
        if path.is_file() and not fresh:
            return reference, path
        print(f"kubeplane: building the operator image {reference} into {path} (minutes)",
              file=sys.stderr, flush=True)
        root = work / "rootfs"
        try:
            build_rootfs(root, wheel, helm)
            layer_path = work / "layer.tar"
            layer = _write_layer(root, layer_path)
        finally:
            subprocess.run(["umount", "--recursive", "--lazy", str(root / "proc"), str(root / "sys"),
                            str(root / "dev")], capture_output=True)
        shutil.rmtree(root)
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        write_archive(reference, layer_path, layer, partial)
        partial.rename(path)
    return reference, path


if __name__ == "__main__":
    print(*operator_image())
