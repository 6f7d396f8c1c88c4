"""The isolation canary's image, written by the project as an OCI tarball (images.py's writer):
Debian's Python 3.11 as this machine has it installed, laid out merged-/usr as Debian does (the files of its python3.11-minimal,
libpython3.11-minimal and libpython3.11-stdlib packages, and the shared libraries they load) and
the project's canary program at /canary/canary.py. No driver library is in it: on a GPU node
NVIDIA's container runtime mounts libcuda and libnvidia-ml into the container, as for any CUDA
image; without them the canary reports that it sees no GPU.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .images import ImageFile, _cached, oci_archive
from .tools import REPO_ROOT, tools_bin_dir

CANARY_IMAGE = "localhost/gputenant/isolation-canary:1"
CANARY_SOURCE = REPO_ROOT / "operator" / "gputenant" / "attestation" / "canary.py"
PYTHON_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib")
LEFT_OUT = ("/test/", "/__pycache__/", "/idlelib/", "/tkinter/", "/ensurepip/", "/lib2to3/", "/pydoc_data/",
            "/usr/share/", "_test.cpython", "_testcapi", "_testbuffer", "_testinternalcapi", "_testmultiphase")


def _package_paths(package: str) -> list[Path]:
    listed = subprocess.run(["dpkg", "-L", package], check=True, capture_output=True, text=True).stdout
    return [Path(line) for line in listed.splitlines()
            if line.startswith("/") and not any(part in line for part in LEFT_OUT)]


def _shared_libraries(binaries: list[Path]) -> set[Path]:
    """What the loader maps for `binaries` (ldd), the loader itself included."""
    libraries: set[Path] = set()
    for binary in binaries:
        listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
            if path.startswith("/"):
                libraries.add(Path(path))
    return libraries


def _merged(path: Path) -> Path:
    """The path under /usr of a Debian merged-/usr system (/lib is a link to /usr/lib there)."""
    return path.parent.resolve() / path.name


def _file(path: Path) -> ImageFile:
    relative = str(_merged(path)).lstrip("/")
    if path.is_symlink():
        return ImageFile(relative, link=str(path.readlink()))
    return ImageFile(relative, path, mode=path.stat().st_mode & 0o777)


def canary_files(source: Path = CANARY_SOURCE) -> list[ImageFile]:
    paths = {path for package in PYTHON_PACKAGES for path in _package_paths(package)
             if path.is_file() or path.is_symlink()}
    binaries = [path for path in paths if path.suffix == ".so" or path.name == "python3.11"]
    for library in _shared_libraries(binaries):
        paths.add(library)
        if library.is_symlink():
            paths.add(library.resolve())
    files = {str(_merged(path)): _file(path) for path in paths}
    files["lib"] = ImageFile("lib", link="usr/lib")
    files["lib64"] = ImageFile("lib64", link="usr/lib64")
    files["usr/bin/python3"] = ImageFile("usr/bin/python3", link="python3.11")
    files["canary"] = ImageFile("canary/canary.py", source, mode=0o644)
    return sorted(files.values(), key=lambda f: f.path)


def canary_image(bin_dir: Path | None = None) -> dict[str, Path]:
    """Image reference -> OCI tarball of the canary, written if missing."""
    cache_dir = (bin_dir or tools_bin_dir()).parent / "images"
    files = canary_files()
    return {CANARY_IMAGE: _cached(cache_dir, CANARY_IMAGE, files,
                                  lambda: oci_archive(CANARY_IMAGE, files, cmd=["python3", "/canary/canary.py"]))}
