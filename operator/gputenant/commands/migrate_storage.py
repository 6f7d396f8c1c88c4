"""`gputenant migrate-storage`: every GpuTenant rewritten in the CRD's storage version and
`status.storedVersions` trimmed to it, after an upgrade that moved the storage version
(docs/api-versions.md). Safe to run again; says so when there is nothing to do."""

from __future__ import annotations

import argparse

HELP = "rewrite every GpuTenant in the CRD's storage version, then trim the CRD's status.storedVersions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")


def run(args: argparse.Namespace) -> int:
    from gputenant.api.group import GROUP, PLURAL
    from gputenant.commands.cluster import with_cluster
    from gputenant.config.models import OperatorConfig
    from gputenant.kube.storage_migration import migrate_storage

    async def migrate(client):
        return await migrate_storage(client, f"{PLURAL}.{GROUP}")

    print(with_cluster(args.kubeconfig, OperatorConfig().field_manager, migrate).summary())
    return 0
