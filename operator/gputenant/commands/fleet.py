"""`gputenant fleet`: on a fleet's hub, every member (reachable, cordoned, its report's age, its
pools' GPUs, granted and free) and every tenant (where it is placed, Ready there), read with your
own credentials: the member cluster Secrets in Argo CD's namespace, the members through them
(`fleet.members`), and the hub's tenants."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

HELP = "on a fleet's hub: every member's pools, capacity and tenants, and where each tenant is placed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="the hub's operator configuration YAML (for fleet.argocdNamespace and labels)")
    parser.add_argument("--kubeconfig", help="kubeconfig of the hub (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")


def run(args: argparse.Namespace) -> int:
    from gputenant.commands.cluster import with_cluster
    from gputenant.commands.render import load_config
    from gputenant.fleet.members import TENANTS_API_VERSION, MemberReader
    from gputenant.fleet.table import fleet_tables

    config = load_config(args.config)

    async def read(client):
        reader = MemberReader(client, config)
        try:
            views = await reader.read()
        finally:
            await reader.close()
        return views, await client.list(TENANTS_API_VERSION, "GpuTenant")

    views, tenants = with_cluster(args.kubeconfig, config.field_manager, read)
    print(fleet_tables(views, tenants, datetime.now(UTC)))
    return 0
