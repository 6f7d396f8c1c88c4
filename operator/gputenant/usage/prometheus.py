"""Read DCGM exporter series from Prometheus' HTTP query API, for `model.judge_usage`.

The series are the dcgm-exporter's with its pod mapping on (``namespace``, ``pod`` labels on the GPUs
pods hold) and ``UUID`` naming each GPU. GPU-hours come from subqueries at a fixed resolution, so
they do not depend on the scrape interval.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from gputenant.config.models import Accounting
from gputenant.timefmt import parse_duration
from gputenant.usage.accounting import Charge, charges
from gputenant.usage.model import GpuSample, TenantUsage, judge_usage
from gputenant.usage.sentinel import DeviceMemory, merge_devices

SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
GPU_KEY = ("namespace", "pod", "UUID")
DEVICE_KEY = ("Hostname", "UUID", "GPU_I_ID", "namespace", "pod")
"""A GPU (or MIG instance: GPU_I_ID) on its node and the pod the exporter says holds it."""
POINTS_PER_WINDOW = 120
"""Default resolution of the GPU-hour sums: the window in this many steps."""


class PrometheusError(RuntimeError):
    """Prometheus could not be asked or refused the query; the message names the URL."""


@dataclass(frozen=True)
class UsageQueries:
    """The PromQL behind the usage report, over `window` (a Prometheus duration)."""

    window: str = "1h"
    step_seconds: int = 60
    """Resolution of the GPU-hour subqueries."""
    namespace_regex: str = ".+"
    """Only series of these namespaces (the tenants' prefix, e.g. ``tenant-.*``)."""

    @classmethod
    def over(cls, window: str, namespace_regex: str, step_seconds: int | None = None) -> UsageQueries:
        """Queries over `window` (whole h/m/s, e.g. 1h or 30m) at `step_seconds`, by default the window
        in POINTS_PER_WINDOW steps; ValueError naming the fix for another duration."""
        duration = parse_duration(window)
        if duration is None or not duration.total_seconds():
            raise ValueError(f"usage window {window!r} is not a duration in whole h/m/s units; give e.g. 1h or 30m")
        step = step_seconds or max(1, int(duration.total_seconds()) // POINTS_PER_WINDOW)
        return cls(window=window, step_seconds=step, namespace_regex=namespace_regex)

    def _selector(self, metric: str) -> str:
        return f'{metric}{{namespace=~"{self.namespace_regex}"}}'

    def per_gpu(self, metric: str) -> str:
        """The metric's mean over the window, per (namespace, pod, GPU)."""
        return f"max by ({', '.join(GPU_KEY)}) (avg_over_time({self._selector(metric)}[{self.window}]))"

    def held_hours(self) -> str:
        """GPU-hours held per namespace: each GPU some pod of it held, for as long as it was held."""
        held = f"count by (namespace, UUID) ({self._selector(SM_ACTIVE)})"
        return (f"sum by (namespace) (count_over_time(({held})[{self.window}:{self.step_seconds}s])) "
                f"* {self.step_seconds} / 3600")

    def used_hours(self) -> str:
        """GPU-hours of SM activity per namespace."""
        active = f"max by (namespace, UUID) ({self._selector(SM_ACTIVE)})"
        return (f"sum by (namespace) (sum_over_time(({active})[{self.window}:{self.step_seconds}s])) "
                f"* {self.step_seconds} / 3600")


def query(url: str, promql: str, timeout: float = 10) -> list[dict]:
    """An instant query's result vector."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:500]
        raise PrometheusError(f"Prometheus at {url} refused {promql!r}: HTTP {error.code} {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise PrometheusError(f"cannot query Prometheus at {url} ({error}); check --prometheus-url") from None
    if answer.get("status") != "success":
        raise PrometheusError(f"Prometheus at {url} answered {answer.get('error')!r} to {promql!r}")
    return answer["data"]["result"]


def _by_gpu(result: list[dict]) -> dict[tuple[str, ...], float]:
    return {tuple(series["metric"].get(key, "") for key in GPU_KEY): float(series["value"][1]) for series in result}


def _by_namespace(result: list[dict]) -> dict[str, float]:
    return {series["metric"].get("namespace", ""): float(series["value"][1]) for series in result}


def read_usage(url: str, namespaces: dict[str, str], queries: UsageQueries) -> list[TenantUsage]:
    """Usage per tenant (`namespaces`: tenant -> host namespace) from the Prometheus at `url`."""
    sm_active = _by_gpu(query(url, queries.per_gpu(SM_ACTIVE)))
    gpu_util = _by_gpu(query(url, queries.per_gpu(GPU_UTIL)))
    fb_used = _by_gpu(query(url, queries.per_gpu(FB_USED)))
    samples = [GpuSample(namespace=key[0], pod=key[1], gpu=key[2], sm_active=active, gpu_util=gpu_util.get(key),
                         fb_used_mib=fb_used.get(key))
               for key, active in sorted(sm_active.items())]
    return judge_usage(namespaces, samples, _by_namespace(query(url, queries.held_hours())),
                       _by_namespace(query(url, queries.used_hours())))


def read_device_memory(url: str) -> list[DeviceMemory]:
    """FB_USED per GPU and MIG instance, with the pods the exporter names on it, for the sentinel."""
    result = query(url, f"max by ({', '.join(DEVICE_KEY)}) ({FB_USED})")
    return merge_devices([(series["metric"].get("Hostname", ""), series["metric"].get("UUID", ""),
                           series["metric"].get("GPU_I_ID", ""), float(series["value"][1]),
                           series["metric"].get("namespace", ""), series["metric"].get("pod", ""))
                          for series in result])


SHARES = "gputenant_tenant_gpu_shares"
"""The operator's own series: GPUs each tenant holds by share (pools/shares.py)."""
CHARGEBACK_POINTS = 2016
"""Default resolution of a chargeback period: 7 days in 5-minute steps."""


def chargeback_step(period: str) -> int:
    """The default step of a chargeback over `period`: a minute at least, CHARGEBACK_POINTS in all."""
    duration = parse_duration(period)
    if duration is None or not duration.total_seconds():
        raise ValueError(f"period {period!r} is not a duration in whole h/m/s units; give e.g. 168h or 24h")
    return max(60, int(duration.total_seconds()) // CHARGEBACK_POINTS)


def read_share_hours(url: str, period: str, step_seconds: int) -> dict[tuple[str, str], float]:
    """(tenant, pool) -> GPU-hours held by share over `period`."""
    return {(series["metric"].get("tenant", ""), series["metric"].get("pool", "")): float(series["value"][1])
            for series in query(url, f"sum by (tenant, pool) (sum_over_time({SHARES}[{period}:{step_seconds}s])) "
                                     f"* {step_seconds} / 3600")}


def read_chargeback(url: str, namespaces: dict[str, str], period: str, step_seconds: int,
                    accounting: Accounting) -> list[Charge]:
    """GPU-hours by share per tenant and pool over `period`, priced; used hours apportioned from the
    DCGM SM activity of the GPUs each tenant's namespace held."""
    held = read_share_hours(url, period, step_seconds)
    queries = UsageQueries.over(period, "|".join(sorted(namespaces.values())) or ".+", step_seconds)
    held_by_namespace = _by_namespace(query(url, queries.held_hours()))
    used_by_namespace = _by_namespace(query(url, queries.used_hours()))
    ratio = {tenant: used_by_namespace.get(namespace, 0.0) / held_by_namespace[namespace]
             for tenant, namespace in namespaces.items() if held_by_namespace.get(namespace)}
    return charges(held, ratio, accounting)
