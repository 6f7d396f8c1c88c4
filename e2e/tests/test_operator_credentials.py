"""No credential touches the operator's disk (issue 17): the operator runs with a TMPDIR of its
own, watched with inotify for the whole module, through create/delete cycles of tenants (each one
loads its virtual cluster's admin kubeconfig, client certificate and EC key inline) and a SIGKILL
mid-onboarding. Before the fix, the `kubernetes` package wrote every such certificate and key
there and removed them only at a clean exit: 100 cycles left 62 private keys of `system:masters`
users of the tenants' virtual clusters.

The virtual clusters are REAL vClusters (the upstream chart on the plane's node, see conftest.py),
each 25-60 s to start: the module runs one batch of CYCLE_BATCH cycles by default (every cycle
loads the credentials the old code wrote, and the watch sees a file that lived for microseconds, so
one batch finds a leak as surely as many), and GPUTENANT_E2E_CREDENTIAL_CYCLES=50 runs the
acceptance's 50 (CYCLE_BATCH tenants at a time). The
operator's own identity is a client certificate inline in its kubeconfig: kopf logs in with the
`kubernetes` package's loader, which would copy that key into TMPDIR once per start (see the report
of issue 17 for the login handler that removes that too).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
import pytest
import yaml

from kubeplane import ControlPlane, builders, wait_for
from kubeplane.operator_process import OperatorProcess, real_vcluster_config

pytestmark = pytest.mark.on_vcluster_node
"""Its `plane` is the plane its real vClusters run on (`vcluster_node`, tests/conftest.py)."""

CYCLE_BATCH = 2
"""Real vClusters alive at once (about 300 MiB each on a 2-core CI machine)."""
CYCLES = int(os.environ.get("GPUTENANT_E2E_CREDENTIAL_CYCLES", CYCLE_BATCH))
KEY_MARKERS = (b"PRIVATE KEY", b"client-key-data")

IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_ISDIR = 0x8, 0x80, 0x100, 0x200, 0x40000000
_EVENT_HEADER = struct.Struct("iIII")


@dataclass
class WatchedFile:
    path: Path
    created: float
    removed: float | None = None
    key_material: bool = False


@dataclass
class DirectoryWatch:
    """Every file created under a folder (and its subfolders) while the watch runs, with whether
    it held key material when it was written and when it was removed, from inotify: a file that
    lives for microseconds is still seen."""

    root: Path
    files: dict[Path, WatchedFile] = field(default_factory=dict)

    def __post_init__(self):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._libc = libc
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._folders: dict[int, Path] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch_folder(self.root)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _watch_folder(self, folder: Path) -> None:
        descriptor = self._libc.inotify_add_watch(
            self._fd, os.fsencode(folder), IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE)
        if descriptor >= 0:
            self._folders[descriptor] = folder
        for entry in os.scandir(folder):
            self._seen(Path(entry.path), entry.is_dir(follow_symlinks=False))

    def _seen(self, path: Path, is_folder: bool) -> None:
        if is_folder:
            self._watch_folder(path)
            return
        with self._lock:
            self.files.setdefault(path, WatchedFile(path, time.monotonic()))
        self._inspect(path)

    def _inspect(self, path: Path) -> None:
        try:
            content = path.read_bytes()
        except OSError:
            return
        if any(marker in content for marker in KEY_MARKERS):
            with self._lock:
                self.files[path].key_material = True

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            offset = 0
            while offset < len(data):
                descriptor, mask, _, length = _EVENT_HEADER.unpack_from(data, offset)
                name = data[offset + _EVENT_HEADER.size: offset + _EVENT_HEADER.size + length].rstrip(b"\0")
                offset += _EVENT_HEADER.size + length
                folder = self._folders.get(descriptor)
                if folder is None or not name:
                    continue
                path = folder / os.fsdecode(name)
                if mask & IN_DELETE:
                    with self._lock:
                        if path in self.files:
                            self.files[path].removed = time.monotonic()
                elif mask & (IN_CREATE | IN_MOVED_TO):
                    self._seen(path, bool(mask & IN_ISDIR))
                elif mask & IN_CLOSE_WRITE and path in self.files:
                    self._inspect(path)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self._fd)

    def with_key_material(self) -> list[WatchedFile]:
        with self._lock:
            return [f for f in self.files.values() if f.key_material]


@pytest.fixture(scope="module")
def operator_tmpdir(tmp_path_factory):
    """The operator's TMPDIR, watched from before the operator starts until the module ends."""
    folder = tmp_path_factory.mktemp("operator-tmpdir")
    watch = DirectoryWatch(folder)
    yield folder, watch
    watch.close()


@pytest.fixture(scope="module")
def operator(plane, operator_tmpdir, tmp_path_factory):
    """The operator with a TMPDIR of its own (no admission guard: the module watches files, not pods)."""
    tmpdir, _ = operator_tmpdir
    config = real_vcluster_config(plane, tmp_path_factory.mktemp("operator-credentials") / "config.yaml")
    running = OperatorProcess(plane, config, plane.log_dir / "operator-credentials.log",
                              env={"TMPDIR": str(tmpdir)}).start()
    yield running
    running.stop()


def tenant(plane: ControlPlane, name: str) -> dict | None:
    return plane.cluster_object("gputenant.io", "v1beta1", "gputenants", name)


def kubeconfigs_issued(plane: ControlPlane, name: str) -> bool:
    """KubeconfigReady=True: the operator loaded the virtual cluster's admin kubeconfig."""
    body = tenant(plane, name) or {}
    return any(c["type"] == "KubeconfigReady" and c["status"] == "True"
               for c in (body.get("status") or {}).get("conditions") or [])


def onboard_and_offboard(plane: ControlPlane, operator: OperatorProcess, names: list[str]) -> None:
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump_all([builders.tenant(n) for n in names]))
    for name in names:
        try:
            wait_for(lambda name=name: kubeconfigs_issued(plane, name), timeout=300, interval=0.5, what=f"{name} kubeconfigs")
        except TimeoutError:
            raise AssertionError(f"{name}: {(tenant(plane, name) or {}).get('status')}\n{operator.log_tail()}") from None
    plane.kubectl("delete", "gputenants", *names, "--wait=false")
    try:
        wait_for(lambda: all(tenant(plane, n) is None for n in names), timeout=300, interval=1,
                 what=f"{names} offboarded")
    except TimeoutError:
        raise AssertionError(f"not offboarded: {names}\n{operator.log_tail()}") from None


def key_files_left(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and any(m in p.read_bytes() for m in KEY_MARKERS)]


def test_the_watch_sees_key_files_created_and_removed(operator_tmpdir):
    """The watch would catch what the old code wrote: a key file that stays a moment is read and
    flagged; one unlinked at once is still seen created and removed."""
    folder, watch = operator_tmpdir
    lingering, instant = folder / "lingering.pem", folder / "instant.pem"
    key = b"-----BEGIN EC PRIVATE KEY-----\nprobe\n-----END EC PRIVATE KEY-----\n"
    lingering.write_bytes(key)
    instant.write_bytes(key)
    instant.unlink()
    wait_for(lambda: any(f.path == lingering for f in watch.with_key_material()), timeout=5, interval=0.01,
             what="the watch to flag the lingering key")
    lingering.unlink()
    wait_for(lambda: all(watch.files.get(p) and watch.files[p].removed for p in (lingering, instant)),
             timeout=5, interval=0.01, what="the watch to see both probes created and removed")
    with watch._lock:
        del watch.files[lingering], watch.files[instant]


def test_create_delete_cycles_leave_no_key_material_in_tmpdir(plane, operator, operator_tmpdir):
    folder, watch = operator_tmpdir
    started = time.monotonic()
    for first in range(0, CYCLES, CYCLE_BATCH):
        names = [f"cred-{index}" for index in range(first, min(first + CYCLE_BATCH, CYCLES))]
        onboard_and_offboard(plane, operator, names)
    elapsed = time.monotonic() - started
    print(f"\n{CYCLES} create/delete cycles in {elapsed:.0f} s ({elapsed / max(CYCLES, 1):.1f} s per cycle)")
    assert watch.with_key_material() == [], "key material was written to the operator's TMPDIR"
    assert key_files_left(folder) == []


def test_sigkill_mid_onboarding_leaves_no_key_material(plane, operator, operator_tmpdir):
    folder, watch = operator_tmpdir
    name = "cred-killed"
    plane.kubectl("apply", "--server-side", "--field-manager=platform-engineer", "-f", "-",
                  input=yaml.safe_dump(builders.tenant(name)))
    core = kubernetes.client.CoreV1Api(plane.api_client())

    def admin_kubeconfig_written() -> bool:
        return bool(core.list_namespaced_secret(f"tenant-{name}", field_selector=f"metadata.name=vc-{name}").items)
    # The moment vCluster has written its admin kubeconfig, the operator is about to load it.
    wait_for(admin_kubeconfig_written, timeout=300, interval=0.05, what=f"vc-{name} written")
    operator.kill()
    operator.start()
    wait_for(lambda: kubeconfigs_issued(plane, name), timeout=300, interval=0.5, what=f"{name} kubeconfigs after restart")
    operator.kill()
    assert watch.with_key_material() == [], "key material was written to the operator's TMPDIR"
    assert key_files_left(folder) == []
    operator.start()
    plane.kubectl("delete", "gputenant", name, "--wait=false")
    wait_for(lambda: tenant(plane, name) is None, timeout=240, interval=1, what=f"{name} offboarded")
