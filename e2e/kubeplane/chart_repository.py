"""A Helm chart repository served over HTTP from the host, as charts.loft.sh serves the vCluster
chart: the chart packaged by the plane's helm, `helm repo index`, and a threaded HTTP server on an
address the plane's pods reach (the host's end of the node's link). An operator running in a pod
installs from it with `config.vcluster.repository`, the way a production operator pulls the chart."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .plane import ControlPlane


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        """Requests are not logged to the test's output."""


class ChartRepository:
    """`ChartRepository(directory).start(plane, chart_dir, address)`: `url` for config.vcluster.repository."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self, plane: ControlPlane, chart_dir: Path, address: str) -> ChartRepository:
        self.directory.mkdir(parents=True, exist_ok=True)
        plane.helm("package", str(chart_dir), "--destination", str(self.directory))
        plane.helm("repo", "index", str(self.directory))
        handler = functools.partial(_QuietHandler, directory=str(self.directory))
        self._server = ThreadingHTTPServer((address, 0), handler)
        threading.Thread(target=self._server.serve_forever, name="chart-repository", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
