"""`gputenant explain -f tenant.yaml [-f DIR] [-f -] [--config config.yaml]`: one table row per tenant saying what
the policy grants and why, then each decision's message and warnings; exit 3 when a tenant cannot be
satisfied (``commands.EXIT_NOT_SATISFIABLE``)."""

from __future__ import annotations

import argparse
import sys

from gputenant.commands import decided_exit_code
from gputenant.commands.render import add_filename_argument, load_and_render
from gputenant.tables import align_columns

HELP = "explain the policy's decision for GpuTenant files: trust, mode, pool, grant, queue, reason"
COLUMNS = ("TENANT", "TRUST", "MODE", "POOL", "GRANTED", "QUEUE QUOTA/LIMIT", "REASON")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_filename_argument(parser)
    parser.add_argument("--config", help="operator configuration YAML (default: built-in defaults, no GPU pools)")


def _number(value: float) -> str:
    return f"{value:g}"


def rows(results) -> list[tuple[str, ...]]:
    table: list[tuple[str, ...]] = []
    for result in results:
        decision = result.decision
        granted = ",".join(f"{resource}={amount}" for resource, amount in decision.quota.items())
        queue = decision.queue
        table.append((
            result.tenant.name,
            decision.trust.value,
            decision.mode.value if decision.mode else "-",
            decision.pool.name if decision.pool else "-",
            granted if decision.possible and granted else "-",
            f"{_number(queue.quota)}/{_number(queue.limit)}" if queue and decision.possible else "-",
            decision.reason,
        ))
    return table


def caps_lines(decision) -> str:
    """What HAMi-core caps a pod of each size at (docs/trust-levels.md: best effort, not yet attested on a GPU)."""
    from gputenant.guard.hami_caps import MEMORY_LIMIT, SM_LIMIT, caps_by_size

    sizes = caps_by_size(decision)
    if not sizes or decision.pool is None:
        return ""
    lines = [f"  HAMi-core caps per pod (pool {decision.pool.name}, {decision.pool.gpu_memory_mi_b} MiB per GPU; "
             "best effort, not yet attested on a GPU):\n"]
    lines += [f"    gpu-fraction {_number(float(caps.fraction))}: {MEMORY_LIMIT}={caps.memory_mib}m "
              f"({caps.memory_mib} MiB), {SM_LIMIT}={caps.sm_percent} ({caps.sm_percent}% of the SMs)\n"
              for caps in sizes]
    return "".join(lines)


def format_table(table: list[tuple[str, ...]]) -> str:
    return align_columns([COLUMNS, *table]) + "\n"


def run(args: argparse.Namespace) -> int:
    results, _ = load_and_render(args.filename, args.config)
    output = format_table(rows(results)) + "\n"
    for result in results:
        output += f"{result.tenant.name}: {result.decision.message}\n"
        output += "".join(f"  warning: {warning}\n" for warning in result.decision.warnings)
        output += caps_lines(result.decision)
    sys.stdout.write(output)
    return decided_exit_code(results)
