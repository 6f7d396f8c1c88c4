"""Install, upgrade and uninstall a tenant's vCluster release through pyhelm3.

Helm is slow (a process per call, a chart render, a release Secret per revision), so the caller
skips it entirely while the values hash it keeps in GpuTenant status still matches
(``state.helm_needed``), and `ensure` upgrades only when the deployed chart version or values
really differ.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pyhelm3 import Client, Command
from pyhelm3 import errors as pyhelm3_errors
from pyhelm3.models import Chart, ReleaseRevisionStatus
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from gputenant.config.models import VClusterChart
from gputenant.helm.errors import (
    ChartVersionMismatchError,
    HelmError,
    PermanentHelmError,
    TransientHelmError,
    from_pyhelm3,
)
from gputenant.helm.versions import check_upgrade_path, parse_version, values_hash
from gputenant.metrics import SUCCESS, OperatorMetrics

DESCRIPTION_PREFIX = "gputenant values "
"""Each revision's Helm description names its values hash, so `helm history` shows what changed."""


def default_helm_path(tools_dir: Path | None = None) -> Path:
    """The helm binary the repository pins: ``<tools_dir>/bin/helm`` (``$GPUTENANT_TOOLS_DIR``, read
    by the operator's settings), by default under ``~/.cache/gputenant-operator/tools`` (where
    tools/build.sh puts it), else ``helm`` on PATH."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    tools_dir = tools_dir or Path(cache, "gputenant-operator", "tools")
    pinned = Path(tools_dir).resolve() / "bin" / "helm"
    if pinned.is_file():
        return pinned
    on_path = shutil.which("helm")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        f"no helm binary at {pinned} nor on PATH; run `make tools`, set GPUTENANT_TOOLS_DIR, or pass helm_path")


@dataclass(frozen=True)
class ChartRef:
    """Where the vcluster chart comes from: a local directory wins over a repository."""

    name: str = "vcluster"
    repository: str | None = "https://charts.loft.sh"
    local_path: Path | None = None

    @classmethod
    def from_config(cls, chart: VClusterChart) -> ChartRef:
        return cls(name=chart.name, repository=chart.repository,
                   local_path=Path(chart.local_path).resolve() if chart.local_path else None)


class HelmAction(str, Enum):
    INSTALLED = "Installed"
    UPGRADED = "Upgraded"
    UNCHANGED = "Unchanged"


OPERATION_OF = {HelmAction.INSTALLED: "install", HelmAction.UPGRADED: "upgrade", HelmAction.UNCHANGED: "unchanged"}
"""The `operation` label of gputenant_helm_operations_total for what an attempt did."""


@dataclass
class _Attempt:
    """What one ensure attempt is doing, so a failure is counted under the operation it broke."""

    operation: str


@dataclass
class HelmCounters:
    """What one VClusterReleases did since it was made; benchmarks and tests read it."""

    invocations: int = 0
    """helm processes started, queries included."""
    installs: int = 0
    upgrades: int = 0
    uninstalls: int = 0


@dataclass(frozen=True)
class HelmOutcome:
    action: HelmAction
    release: str
    namespace: str
    chart_version: str
    """The version in force: ``version``, or a local chart's own version such as 0.36.1-local."""
    values_hash: str
    """Store in status.vcluster.valuesHash and pass back as ``applied_hash`` next time."""
    revision: int
    """The release revision in force."""
    helm_invocations: int


def default_helm_concurrency() -> int:
    """Helm processes are CPU-bound Go start-ups and chart renders: more of them than about twice
    the cores only queue for CPU (50 at once were measured on 2 cores, docs/performance.md)."""
    return 2 * (os.cpu_count() or 1)


class _CountingCommand(Command):
    """pyhelm3's Command, counting every helm process it starts and running at most
    ``max_concurrent`` of them at once."""

    def __init__(self, counters: HelmCounters, max_concurrent: int, **kwargs: Any):
        super().__init__(**kwargs)
        self._counters = counters
        self._slots = asyncio.Semaphore(max_concurrent)

    async def run(self, command: list[str], input: bytes | None = None) -> bytes:
        async with self._slots:
            self._counters.invocations += 1
            return await super().run(command, input)

    def client_version(self):
        self._counters.invocations += 1
        return super().client_version()


class VClusterReleases:
    """vCluster Helm releases on the host cluster.

    ``kubeconfig`` None lets helm find the cluster itself (in-cluster config in the operator pod).
    Transient failures are retried ``retry_attempts`` times with exponential backoff inside one call
    (kopf would otherwise wait a whole handler backoff for a brief API hiccup); what is still
    failing after that is raised for the pipeline to retry later. At most ``max_concurrent`` helm
    processes run at once (default: twice the cores); the others wait their turn.
    """

    def __init__(self, kubeconfig: str | Path | None = None, *, helm_path: str | Path | None = None,
                 timeout: str = "5m", retry_attempts: int = 3, retry_max_wait_seconds: float = 8.0,
                 max_concurrent: int | None = None, metrics: OperatorMetrics | None = None):
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent helm processes is {max_concurrent}; give 1 or more")
        self.counters = HelmCounters()
        self.metrics = metrics or OperatorMetrics()
        self.helm_path = Path(helm_path) if helm_path else default_helm_path()
        self.timeout = timeout
        self._retry_attempts = retry_attempts
        self._retry_max_wait = retry_max_wait_seconds
        self._command = _CountingCommand(
            self.counters, max_concurrent or default_helm_concurrency(),
            executable=str(self.helm_path), default_timeout=timeout,
            kubeconfig=str(kubeconfig) if kubeconfig else None)
        self._client = Client(self._command, executable=str(self.helm_path))

    async def ensure(self, release: str, namespace: str, chart_ref: ChartRef, version: str,
                     values: Mapping[str, Any], *, known_absent: bool = False) -> HelmOutcome:
        """Make the release run chart ``version`` with exactly ``values``.

        Whether to call this at all is the caller's, by the one skip rule (``helm_needed``). It
        reads the release: installs it when absent, upgrades it when its chart version or values differ
        or its last revision failed, and does nothing when it already matches. A stuck release
        (pending after a crash) is rolled back or removed first. The namespace must exist.

        ``known_absent``: the caller has just seen that no revision of the release exists (e.g. no
        Helm release Secret), so the first attempt skips ``helm status`` and runs ``helm upgrade
        --install`` alone: one helm process for a new tenant. A retry reads the release again, as
        the failed attempt may have left a revision behind.

        Raises UpgradePathError for an unsupported version jump, ChartVersionMismatchError when a
        local chart has another version, InvalidValuesError when the chart refuses the values
        (all PermanentHelmError), and TransientHelmError when retries ran out.
        """
        wanted_hash = values_hash(values, version)
        started_with = self.counters.invocations
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransientHelmError), stop=stop_after_attempt(self._retry_attempts),
            wait=wait_exponential(multiplier=0.5, max=self._retry_max_wait), reraise=True)
        async for attempt in retrying:
            with attempt:
                first_attempt = attempt.retry_state.attempt_number == 1
                action, revision, chart_version = await self._ensure_once(
                    release, namespace, chart_ref, version, values, wanted_hash,
                    read_release=not (known_absent and first_attempt))
        return HelmOutcome(action, release, namespace, chart_version, wanted_hash, revision,
                           self.counters.invocations - started_with)

    async def uninstall(self, release: str, namespace: str) -> bool:
        """Remove the release and the objects its chart made; False when there was none. Data
        the vCluster wrote itself (``vc-<release>``, PVCs) is left to namespace deletion."""
        started = time.perf_counter()
        try:
            await self._command.uninstall(release, namespace=namespace, timeout=self.timeout)
        except pyhelm3_errors.ReleaseNotFoundError:
            self.metrics.helm_operation("uninstall", "ReleaseNotFound", time.perf_counter() - started)
            return False
        except pyhelm3_errors.Error as error:
            failure = from_pyhelm3(error)
            self.metrics.helm_operation("uninstall", failure.reason, time.perf_counter() - started)
            raise failure from None
        self.metrics.helm_operation("uninstall", SUCCESS, time.perf_counter() - started)
        self.counters.uninstalls += 1
        return True

    async def _ensure_once(self, release: str, namespace: str, chart_ref: ChartRef, version: str,
                           values: Mapping[str, Any], wanted_hash: str,
                           read_release: bool = True) -> tuple[HelmAction, int, str]:
        """One attempt, timed and counted under what it did, or under what it tried and the reason
        it failed (``read``: reading the release before deciding)."""
        attempt = _Attempt("read" if read_release else "install")
        started = time.perf_counter()
        try:
            action, revision, chart_version = await self._install_or_upgrade(
                release, namespace, chart_ref, version, values, wanted_hash, read_release, attempt)
        except HelmError as error:
            self.metrics.helm_operation(attempt.operation, error.reason, time.perf_counter() - started)
            raise
        self.metrics.helm_operation(OPERATION_OF[action], SUCCESS, time.perf_counter() - started)
        return action, revision, chart_version

    async def _install_or_upgrade(self, release: str, namespace: str, chart_ref: ChartRef, version: str,
                                  values: Mapping[str, Any], wanted_hash: str, read_release: bool,
                                  attempt: _Attempt) -> tuple[HelmAction, int, str]:
        try:
            parse_version(version)
        except ValueError as error:
            raise PermanentHelmError(str(error), values_hash=wanted_hash) from None
        local_chart = self._local_chart(chart_ref, version, wanted_hash) if chart_ref.local_path else None
        chart_version = str(local_chart.metadata.version) if local_chart else version
        wanted_values = json.loads(json.dumps(values))
        try:
            current = (await self._client.get_proceedable_revision(release, namespace=namespace, timeout=self.timeout)
                       if read_release else None)
            attempt.operation = "install" if current is None else "upgrade"
            if current is not None:
                installed = str((await current.chart_metadata()).version)
                try:
                    check_upgrade_path(installed, chart_version)
                except HelmError as error:
                    error.values_hash = wanted_hash
                    raise
                if (current.status == ReleaseRevisionStatus.DEPLOYED
                        and parse_version(installed) == parse_version(chart_version)
                        and await current.values() == wanted_values):
                    return HelmAction.UNCHANGED, current.revision, installed
            chart = local_chart or await self._client.get_chart(
                chart_ref.name, repo=chart_ref.repository, version=version)
            revision = await self._client.install_or_upgrade_release(
                release, chart, wanted_values, namespace=namespace, create_namespace=False,
                description=DESCRIPTION_PREFIX + wanted_hash, timeout=self.timeout)
        except pyhelm3_errors.Error as error:
            raise from_pyhelm3(error, values_hash=wanted_hash) from None
        if current is None:
            self.counters.installs += 1
            return HelmAction.INSTALLED, revision.revision, chart_version
        self.counters.upgrades += 1
        return HelmAction.UPGRADED, revision.revision, chart_version

    def _local_chart(self, chart_ref: ChartRef, version: str, wanted_hash: str) -> Chart:
        """The chart in a local directory, read without running helm.

        A stand-in chart may mark itself with a pre-release or build suffix (``0.36.1-local``); it
        serves the request for ``0.36.1``, but not for another major.minor.patch.
        """
        assert chart_ref.local_path is not None, "only called for a chart in a local directory"
        chart_yaml = chart_ref.local_path / "Chart.yaml"
        try:
            metadata = yaml.safe_load(chart_yaml.read_text())
        except OSError as error:
            raise PermanentHelmError(
                f"cannot read {chart_yaml} ({error.strerror}); fix the operator's vcluster.localPath",
                values_hash=wanted_hash) from None
        local_version = str((metadata or {}).get("version", "")) if isinstance(metadata, dict) else ""
        try:
            local_release = parse_version(local_version)[:3]
        except ValueError:
            raise PermanentHelmError(f"{chart_yaml} has no SemVer version (found {local_version!r}); fix the chart",
                                     values_hash=wanted_hash) from None
        if local_release != parse_version(version)[:3]:
            raise ChartVersionMismatchError(
                f"the local chart {chart_ref.local_path} is version {local_version}, not {version}; set "
                f"spec.vcluster.chartVersion (or the operator's vcluster.version) to {local_version}, or point "
                f"vcluster.localPath at a chart of version {version}", values_hash=wanted_hash)
        return Chart(self._command, ref=chart_ref.local_path, metadata=metadata)
