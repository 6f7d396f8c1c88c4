"""A real Prometheus (Debian's package, installed by tools/prometheus.sh when missing) scraping
targets on loopback every second, and its HTTP query API.

Usage::

    with Prometheus(log_dir, targets=["127.0.0.1:8081"]) as prometheus:
        prometheus.wait_for_target_up()
        prometheus.query('sum(gputenant_tenants{phase="Ready"})')
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from .process import Process, free_ports, wait_for, wait_until_serving

INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "prometheus.sh"
SCRAPE_INTERVAL = "1s"


def prometheus_binary(name: str = "prometheus") -> Path:
    """/usr/bin/prometheus (or promtool, from the same package), installed with apt-get first when
    missing (the script prints the path)."""
    result = subprocess.run(["bash", str(INSTALL_SCRIPT), name], capture_output=True, text=True, timeout=900)
    if result.returncode:
        raise RuntimeError(f"{INSTALL_SCRIPT} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


class Prometheus:
    """One Prometheus server with its TSDB in `work_dir`, listening on a free loopback port."""

    def __init__(self, work_dir: Path, targets: list[str], job: str = "gputenant", rule_files: tuple[Path, ...] = ()):
        self.work_dir = work_dir
        self.targets = targets
        self.job = job
        self.rule_files = list(rule_files)
        """Alerting and recording rule files it loads and evaluates every second."""
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None

    def start(self) -> Prometheus:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}]}],
            **({"rule_files": [str(path) for path in self.rule_files]} if self.rule_files else {}),
        }))
        self.process = Process("prometheus", [
            str(prometheus_binary()), f"--config.file={config}", f"--storage.tsdb.path={self.work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
        ], self.work_dir / "prometheus.log")
        wait_until_serving(self.process, self._ready, "prometheus ready", timeout=60)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, path: str, **params: str) -> dict:
        """GET /api/v1/<path>; the `data` of a successful answer."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        if answer.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {answer}")
        return answer["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant vector: [{"metric": {labels}, "value": [time, "number"]}, ...]."""
        return self.api("query", query=promql)["result"]

    def value(self, promql: str) -> float | None:
        """The number of a query with one series, or None when it has none."""
        result = self.query(promql)
        if len(result) > 1:
            raise AssertionError(f"{promql} has {len(result)} series, expected one: {result}")
        return float(result[0]["value"][1]) if result else None

    def alerts(self, name: str) -> list[dict]:
        """The alerts of rule `name` as Prometheus evaluates them now (state pending or firing)."""
        return [alert for group in self.api("rules", type="alert")["groups"] for rule in group["rules"]
                if rule["name"] == name for alert in rule["alerts"]]

    def wait_for_target_up(self, instances: list[str] | None = None, timeout: float = 60) -> None:
        """Until every target (or those of `instances`, host:port) has been scraped successfully."""
        wanted = set(instances or self.targets)
        def up() -> bool:
            healthy = {t["labels"]["instance"] for t in self.api("targets")["activeTargets"] if t["health"] == "up"}
            return wanted <= healthy
        wait_for(up, timeout=timeout, interval=0.5, what=f"prometheus to scrape {sorted(wanted)}")
