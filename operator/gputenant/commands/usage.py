"""`gputenant usage`: per tenant, the GPUs its pods held against what they used, from the DCGM
exporter's series in Prometheus; idle GPUs and GPUs "busy but not working" (GPU_UTIL high, SM
activity low) by pod. With `--since PERIOD`: the chargeback, GPU-hours by share and their cost per
tenant and pool over the period (table, or `--csv`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputenant.config.models import OperatorConfig

HELP = "GPUs held against GPUs used per tenant, idle GPUs and busy-but-not-working GPUs, from Prometheus"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url", required=True, metavar="URL",
                        help="Prometheus that scrapes the DCGM exporter, e.g. http://prometheus.monitoring:9090")
    parser.add_argument("--config", help="operator configuration YAML (default: built-in defaults)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    parser.add_argument("--window", default="1h", metavar="DURATION",
                        help="how far back to look, in whole h/m/s (default 1h)")
    parser.add_argument("--step", type=int, metavar="SECONDS",
                        help="resolution of the GPU-hour sums (default: the window in 120 steps)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--since", metavar="PERIOD",
                        help="chargeback over this period (whole h/m/s, e.g. 168h; 7d is read as 168h): GPU-hours by "
                             "share and cost per tenant, priced by the config's accounting.pricePerGpuHour")
    parser.add_argument("--csv", action="store_true", help="with --since: print CSV instead of a table")


def run(args: argparse.Namespace) -> int:
    from gputenant import API_VERSION, KIND
    from gputenant.commands.cluster import with_cluster
    from gputenant.commands.render import load_config
    from gputenant.usage import PrometheusError, UsageQueries, format_usage_table, read_usage, tenant_namespaces

    config = load_config(args.config)
    if args.step is not None and args.step < 1:
        print(f"gputenant usage: --step {args.step} must be 1 or more seconds", file=sys.stderr)
        return 2
    try:
        queries = UsageQueries.over(args.window, f"{config.namespace_prefix}.+", args.step)
    except ValueError as error:
        print(f"gputenant usage: --window: {error}", file=sys.stderr)
        return 2

    async def list_tenants(client) -> list[dict]:
        return await client.list(API_VERSION, KIND)

    namespaces = tenant_namespaces(with_cluster(args.kubeconfig, config.field_manager, list_tenants), config)
    if args.since:
        return chargeback(args, config, namespaces)
    try:
        usage = read_usage(args.prometheus_url, namespaces, queries)
    except PrometheusError as error:
        print(f"gputenant usage: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([{
            "tenant": u.tenant, "namespace": u.namespace, "gpus": u.gpus_held, "heldGpuHours": u.held_gpu_hours,
            "usedGpuHours": u.used_gpu_hours, "idle": [{"pod": s.pod, "gpu": s.gpu} for s in u.idle],
            "busyNotWorking": [{"pod": s.pod, "gpu": s.gpu, "gpuUtil": s.gpu_util, "smActive": s.sm_active}
                               for s in u.busy_not_working],
        } for u in usage], indent=2))
    else:
        print(format_usage_table(usage))
    return 0


def period_of(text: str) -> str:
    """A period as Prometheus and `timefmt` read it: days (``7d``) become hours."""
    return f"{int(text[:-1]) * 24}h" if text.endswith("d") and text[:-1].isdigit() else text


def chargeback(args: argparse.Namespace, config: OperatorConfig, namespaces: dict[str, str]) -> int:
    from gputenant.usage import PrometheusError
    from gputenant.usage.accounting import chargeback_csv, format_chargeback
    from gputenant.usage.prometheus import chargeback_step, read_chargeback

    period = period_of(args.since)
    try:
        step = args.step or chargeback_step(period)
    except ValueError as error:
        print(f"gputenant usage: --since: {error}", file=sys.stderr)
        return 2
    try:
        rows = read_chargeback(args.prometheus_url, namespaces, period, step, config.accounting)
    except PrometheusError as error:
        print(f"gputenant usage: {error}", file=sys.stderr)
        return 1
    currency = config.accounting.currency
    print(chargeback_csv(args.since, rows, currency) if args.csv else format_chargeback(args.since, rows, currency),
          end="" if args.csv else "\n")
    return 0
