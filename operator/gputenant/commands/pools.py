"""`gputenant pools`: per GPU pool, its nodes, GPUs, what tenants are guaranteed and the
over-commitment, and GPU memory held by no one as the operator's sentinel recorded it on the
Nodes; `--apply` first brings node labels and the device-plugin ConfigMap in line."""

from __future__ import annotations

import argparse
import sys

HELP = "show GPU pools (nodes, GPUs, granted, over-commitment); --apply configures their nodes first"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="operator configuration YAML (default: built-in defaults, no GPU pools)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    parser.add_argument("--apply", action="store_true",
                        help="label the pools' nodes and write the device-plugin ConfigMap before reporting")
    parser.add_argument("--metrics", action="store_true", help="print Prometheus text instead of a table")


def run(args: argparse.Namespace) -> int:
    from gputenant.commands.cluster import with_cluster
    from gputenant.commands.render import load_config
    from gputenant.pools import format_metrics, format_table
    from gputenant.pools.apply import apply_pools, collect_pool_reports
    from gputenant.pools.memory_sentinel import format_unheld_memory, reported_on

    config = load_config(args.config)

    async def report(client):
        if args.apply:
            result = await apply_pools(client, config)
            for written in result.written:
                print(f"applied {written}", file=sys.stderr)
            for problem in result.plan.problems:
                print(f"warning: {problem}", file=sys.stderr)
            for blocked in result.blocked:
                print(f"held back: {blocked.message}", file=sys.stderr)
        return await collect_pool_reports(client, config), reported_on(await client.list("v1", "Node"))

    reports, unheld = with_cluster(args.kubeconfig, config.field_manager, report)
    print(format_metrics(reports) if args.metrics else format_table(reports), end="" if args.metrics else "\n")
    if unheld and not args.metrics:
        print(f"\nGPU memory held by no one (drain the node and reset the GPU):\n{format_unheld_memory(unheld)}")
    return 0
