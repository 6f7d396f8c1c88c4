"""The images a real vCluster pod needs, written by the project as OCI tarballs (images.py's writer)
from binaries tools/build.sh builds from Go modules, and named exactly as the chart and the
operator's values name them, so the kubelet finds them imported and pulls nothing:

- the syncer (`vcluster start`, the image's entrypoint as in vCluster's Dockerfile), named by the
  operator's `controlPlane.statefulSet.image.repository` (loft-sh/vcluster-oss), the chart's
  registry (ghcr.io) and the chart's version as tag;
- the Kubernetes distro image the chart's init container copies `/kubernetes/.` from into
  `/binaries` with `cp`: kube-apiserver, kube-controller-manager and kube-scheduler at the pinned
  Kubernetes version, and kine for the embedded SQLite store; Debian's static busybox gives `cp`.
  Tagged with the pinned Kubernetes version (ghcr.io/loft-sh/kubernetes:v1.35.4): a tenant names
  that version in `spec.vcluster.kubernetesVersion`, which the chart turns into this tag;
- CoreDNS, which vCluster deploys inside a v1.35 virtual cluster as `coredns/coredns:1.14.1`
  (vCluster's pkg/constants/coredns.go).
"""

from __future__ import annotations

from pathlib import Path

from .images import BUSYBOX, ImageFile, _cached, oci_archive
from .tools import pinned_versions, tools_bin_dir

VCLUSTER_REPOSITORY = "ghcr.io/loft-sh/vcluster-oss"
DISTRO_REPOSITORY = "ghcr.io/loft-sh/kubernetes"
COREDNS_REPOSITORY = "docker.io/coredns/coredns"


def vcluster_image() -> str:
    return f"{VCLUSTER_REPOSITORY}:{pinned_versions()['vcluster'].removeprefix('v')}"


def distro_image() -> str:
    return f"{DISTRO_REPOSITORY}:{pinned_versions()['kube']}"


def coredns_image() -> str:
    return f"{COREDNS_REPOSITORY}:{pinned_versions()['coredns'].removeprefix('v')}"


def distro_files(bin_dir: Path, busybox: Path = BUSYBOX) -> list[ImageFile]:
    binaries = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kine")
    return [ImageFile(f"kubernetes/{name}", bin_dir / name) for name in binaries] + [
        ImageFile("bin/busybox", busybox), ImageFile("bin/cp", link="busybox"),
        ImageFile("bin/sh", link="busybox")]


def vcluster_images(bin_dir: Path | None = None) -> dict[str, Path]:
    """Image reference -> OCI tarball for the vCluster pod and its CoreDNS, written if missing."""
    bin_dir = bin_dir or tools_bin_dir()
    cache_dir = bin_dir.parent / "images"
    syncer, distro, coredns = vcluster_image(), distro_image(), coredns_image()
    syncer_files = [ImageFile("vcluster", bin_dir / "vcluster")]
    kubernetes_files = distro_files(bin_dir)
    coredns_files = [ImageFile("coredns", bin_dir / "coredns")]
    return {
        syncer: _cached(cache_dir, syncer, syncer_files,
                        lambda: oci_archive(syncer, syncer_files, ["/vcluster", "start"])),
        distro: _cached(cache_dir, distro, kubernetes_files,
                        lambda: oci_archive(distro, kubernetes_files, cmd=["sh"])),
        coredns: _cached(cache_dir, coredns, coredns_files,
                         lambda: oci_archive(coredns, coredns_files, ["/coredns"])),
    }
