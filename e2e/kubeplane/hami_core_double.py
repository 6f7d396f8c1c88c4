"""A TEST DOUBLE of HAMi-core for the real node: the project's own preload library
(e2e/fixtures/hami_core_double/libvgpu_double.c), compiled with gcc, in a library image the admission
guard's init container copies it from.

HAMi-core's source is no registry package, so the real ``libvgpu.so`` cannot be built here. The double
caps nothing and proves nothing about a GPU: its constructor writes one line per process image to
stderr with the process's pid, executable and the three cap variables the guard writes
(``CUDA_DEVICE_MEMORY_LIMIT``, ``CUDA_DEVICE_SM_LIMIT``, ``CUDA_DEVICE_MEMORY_SHARED_CACHE``). What it
shows is the delivery on a real node: the library reaches the pod, the loader preloads it through the
read-only ``/etc/ld.so.preload`` into every dynamically linked process, and the caps reach them.

- the library image: the test image's static busybox (``sh``, ``cp``, ``chmod``, ``test``: what the
  guard's copy script runs) and the double at DOUBLE_PATH, a pool's ``hami.library``;
- the workload runs in the canary image (Debian's dynamically linked python3): static busybox ignores
  ``/etc/ld.so.preload``.

Both the compiled library and the image are cached beside the tools, named after the digest of what
went into them (images.py), so an unchanged source is compiled and packed once.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from .images import ImageFile, _cached, busybox_image_files, oci_archive
from .tools import REPO_ROOT, tools_bin_dir

DOUBLE_SOURCE = REPO_ROOT / "e2e" / "fixtures" / "hami_core_double" / "libvgpu_double.c"
LIBRARY_IMAGE = "localhost/gputenant/hami-core-double:1"
DOUBLE_PATH = "/usr/lib/hami-core-double/libvgpu-double.so"
"""Where the library image carries the double: the pool's ``hami.library.path``."""
LINE_PREFIX = "hami-core-double:"
COMPILE = ("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror")


def build_double(cache_dir: Path, source: Path = DOUBLE_SOURCE) -> Path:
    """The compiled double, from gcc once per content of `source` (and of the flags)."""
    fingerprint = hashlib.sha256(" ".join(COMPILE).encode() + b"\0" + source.read_bytes()).hexdigest()[:16]
    library = cache_dir / f"libvgpu-double-{fingerprint}.so"
    if not library.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = library.with_name(f"{library.name}.{os.getpid()}.partial")
        subprocess.run([*COMPILE, "-o", str(partial), str(source)], check=True, capture_output=True, text=True)
        partial.rename(library)
    return library


def library_image_files(bin_dir: Path, library: Path) -> list[ImageFile]:
    return [*busybox_image_files(bin_dir), ImageFile(DOUBLE_PATH.lstrip("/"), library, mode=0o644)]


def library_image(bin_dir: Path | None = None) -> dict[str, Path]:
    """Image reference -> OCI tarball of the library image, written if missing."""
    bin_dir = bin_dir or tools_bin_dir()
    cache_dir = bin_dir.parent / "images"
    files = library_image_files(bin_dir, build_double(cache_dir))
    return {LIBRARY_IMAGE: _cached(cache_dir, LIBRARY_IMAGE, files,
                                   lambda: oci_archive(LIBRARY_IMAGE, files, cmd=["sh"]))}


def reports(log: str) -> list[dict[str, str]]:
    """The double's lines in a container's log, each as its fields (pid, exe and the three variables)."""
    return [dict(field.split("=", 1) for field in line.removeprefix(LINE_PREFIX).split())
            for line in log.splitlines() if line.startswith(LINE_PREFIX)]
