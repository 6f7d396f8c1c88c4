"""A Git repository served the way a Git host serves it, for Argo CD's repo server: a bare
repository under `git daemon` (Debian's git) on a free loopback port, read over git://, and a working
clone beside it that tests commit and push to, as a platform engineer merging a pull request."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from .process import Process, free_ports, wait_until_serving

AUTHOR = ["-c", "user.name=platform-engineer", "-c", "user.email=platform@example.invalid"]


def accepts_connections(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:port (git daemon, redis)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


class GitServer:
    """`GitServer(directory, "platform").start(log_dir)`: `url` for Argo CD, `commit()` to change it."""

    def __init__(self, directory: Path, name: str):
        self.directory = directory
        self.name = name
        self.bare = directory / "served" / f"{name}.git"
        self.clone = directory / "clone"
        self.port = 0
        self._process: Process | None = None

    @property
    def url(self) -> str:
        return f"git://127.0.0.1:{self.port}/{self.name}.git"

    def start(self, log_dir: Path) -> GitServer:
        """An empty bare repository with branch main, its clone, and the daemon serving it."""
        self.bare.parent.mkdir(parents=True, exist_ok=True)
        self._git("init", "--quiet", "--bare", "--initial-branch=main", str(self.bare))
        self._git("clone", "--quiet", str(self.bare), str(self.clone))
        self._git("-C", str(self.clone), "checkout", "--quiet", "-B", "main")
        [self.port] = free_ports(1)
        self._process = Process("git-daemon", [
            "git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1", f"--port={self.port}",
            f"--base-path={self.bare.parent}", str(self.bare.parent)], log_dir / "git-daemon.log")
        wait_until_serving(self._process, lambda: accepts_connections(self.port), f"git daemon on 127.0.0.1:{self.port}")
        return self

    def commit(self, message: str, files: dict[str, str | None]) -> str:
        """Write (text) or delete (None) each path of the clone, commit, push to main and return the
        new commit's hash."""
        for path, text in files.items():
            target = self.clone / path
            if text is None:
                self._git("-C", str(self.clone), "rm", "--quiet", path)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            self._git("-C", str(self.clone), "add", path)
        self._git("-C", str(self.clone), *AUTHOR, "commit", "--quiet", "-m", message)
        self._git("-C", str(self.clone), "push", "--quiet", "origin", "main")
        return self._git("-C", str(self.clone), "rev-parse", "HEAD").strip()

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None

    @staticmethod
    def _git(*args: str) -> str:
        return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout
