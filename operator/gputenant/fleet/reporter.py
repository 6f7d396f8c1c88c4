"""A member's capacity report, kept current: every `fleet.pollSeconds` the member computes its pool
report (`gputenant pools`), and writes the report ConfigMap when it changed, or when half of
`fleet.reportMaxAgeSeconds` has passed since the last write, so the hub can tell a live member from
a stopped one by the report's age."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from gputenant import naming
from gputenant.config.models import OperatorConfig
from gputenant.fleet.report import MemberReport, build_report, report_data, same_capacity
from gputenant.kube import ApiError, KubeClient
from gputenant.pools.apply import collect_pool_reports

log = logging.getLogger(__name__)

PACKAGE = "gpu-tenant-operator"


def operator_version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def report_config_map(config: OperatorConfig, report: MemberReport) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": config.fleet.report_config_map, "namespace": config.operator_namespace,
                         "labels": {naming.MANAGED_BY_LABEL: naming.MANAGED_BY,
                                    "app.kubernetes.io/component": "fleet-report"}},
            "data": report_data(report)}


async def report_once(client: KubeClient, config: OperatorConfig, last: MemberReport | None) -> MemberReport | None:
    """The report written this time, or `last` when nothing had to be written."""
    now = datetime.now(UTC)
    report = build_report(config, await collect_pool_reports(client, config, now), now, operator_version())
    fresh_enough = last is not None and (now - last.reported_at).total_seconds() < config.fleet.report_max_age_seconds / 2
    if same_capacity(last, report) and fresh_enough:
        return last
    await client.apply(report_config_map(config, report))
    return report


async def keep_reporting(client: KubeClient, config: OperatorConfig) -> None:
    last: MemberReport | None = None
    while True:
        try:
            last = await report_once(client, config, last)
        except ApiError as error:
            log.warning("fleet: capacity report not written: %s", error)
        await asyncio.sleep(config.fleet.poll_seconds)
