"""The node's images are valid OCI image layouts, byte-for-byte reproducible (so the cache key is
honest), and hold what pods need. That containerd imports and runs them is test_node.py's part."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile

from kubeplane.hami_core_double import DOUBLE_PATH, LIBRARY_IMAGE, build_double, library_image_files, reports
from kubeplane.images import PAUSE_IMAGE, TEST_IMAGE, busybox_image_files, oci_archive, pause_files
from kubeplane.tools import require_tools


def members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def blob(files: dict[str, bytes], descriptor: dict) -> bytes:
    data = files[f"blobs/sha256/{descriptor['digest'].removeprefix('sha256:')}"]
    assert f"sha256:{hashlib.sha256(data).hexdigest()}" == descriptor["digest"]
    assert len(data) == descriptor["size"]
    return data


def test_the_test_image_is_a_reproducible_oci_layout_with_busybox_applets_and_httpsget():
    files = busybox_image_files(require_tools())
    archive = oci_archive(TEST_IMAGE, files, cmd=["sh"])

    assert archive == oci_archive(TEST_IMAGE, files, cmd=["sh"])
    layout = members(archive)
    assert json.loads(layout["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [descriptor] = json.loads(layout["index.json"])["manifests"]
    assert descriptor["annotations"]["io.containerd.image.name"] == TEST_IMAGE
    assert descriptor["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(blob(layout, descriptor))
    config = json.loads(blob(layout, manifest["config"]))
    [layer_descriptor] = manifest["layers"]
    layer = blob(layout, layer_descriptor)
    assert config["rootfs"]["diff_ids"] == [layer_descriptor["digest"]]  # uncompressed layer
    assert config["config"]["Cmd"] == ["sh"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["bin/sh"].issym() and entries["bin/sh"].linkname == "busybox"
    assert entries["bin/busybox"].isfile() and entries["bin/httpsget"].isfile()
    assert entries["tmp"].mode == 0o1777


def test_the_pause_image_runs_the_projects_pause_program():
    archive = oci_archive(PAUSE_IMAGE, pause_files(require_tools()), ["/pause"])

    layout = members(archive)
    [descriptor] = json.loads(layout["index.json"])["manifests"]
    manifest = json.loads(blob(layout, descriptor))
    config = json.loads(blob(layout, manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/pause"]
    assert descriptor["annotations"]["io.containerd.image.name"] == PAUSE_IMAGE


def test_the_hami_core_double_reports_once_in_every_process_it_is_preloaded_into(tmp_path):
    """The TEST DOUBLE of HAMi-core (kubeplane.hami_core_double) as the loader preloads it, here by
    LD_PRELOAD into Debian's python3.11 (the workload image's program) and the child it starts."""
    library = build_double(tmp_path)
    assert build_double(tmp_path) == library and len(list(tmp_path.iterdir())) == 1, "compiled once per source"
    program = "import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'pass']).returncode)"
    env = {"LD_PRELOAD": str(library), "CUDA_DEVICE_MEMORY_LIMIT": "5758m", "CUDA_DEVICE_SM_LIMIT": "25"}
    ran = subprocess.run(["/usr/bin/python3.11", "-c", program], env=env, capture_output=True, text=True, check=True)
    loaded = reports(ran.stderr)
    assert ran.stdout == "0\n"
    assert len(loaded) == 2 and loaded[0]["pid"] != loaded[1]["pid"], ran.stderr
    for report in loaded:
        assert report == {"pid": report["pid"], "exe": "/usr/bin/python3.11", "CUDA_DEVICE_MEMORY_LIMIT": "5758m",
                          "CUDA_DEVICE_SM_LIMIT": "25", "CUDA_DEVICE_MEMORY_SHARED_CACHE": "<unset>"}


def test_the_library_image_holds_what_the_guards_copy_script_runs_and_the_double():
    bin_dir = require_tools()
    library = build_double(bin_dir.parent / "images")
    archive = oci_archive(LIBRARY_IMAGE, library_image_files(bin_dir, library), cmd=["sh"])
    layout = members(archive)
    [descriptor] = json.loads(layout["index.json"])["manifests"]
    manifest = json.loads(blob(layout, descriptor))
    with tarfile.open(fileobj=io.BytesIO(blob(layout, manifest["layers"][0]))) as tar:
        entries = {m.name: m for m in tar.getmembers()}
        double = tar.extractfile(DOUBLE_PATH.lstrip("/")).read()
    for applet in ("sh", "cp", "chmod", "test", "echo"):
        assert entries[f"bin/{applet}"].linkname == "busybox"
    assert double == library.read_bytes() and double.startswith(b"\x7fELF")
