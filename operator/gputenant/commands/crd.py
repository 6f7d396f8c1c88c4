"""`gputenant crd [--markdown]`: the GpuTenant CRD generated from the API models, or its field
reference; with ``--placement`` the fleet hub's GpuTenantPlacement CRD. `crds/tenant.yaml`,
`crds/placement.yaml` and `docs/reference/gputenant.md` are this command's output."""

from __future__ import annotations

import argparse
import sys

HELP = "print the GpuTenant CRD (YAML) generated from the API models, or its field reference (--markdown)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--placement", action="store_true",
                      help="print the GpuTenantPlacement CRD a fleet's hub writes its decisions to (docs/fleet.md)")
    what.add_argument(
        "--markdown", action="store_true", help="print the field reference (docs/reference/gputenant.md) instead of the CRD"
    )


def run(args: argparse.Namespace) -> int:
    if args.placement:
        from gputenant.fleet.decision import render_placement_crd_yaml

        sys.stdout.write(render_placement_crd_yaml())
    elif args.markdown:
        from gputenant.api.reference import render_reference_markdown

        sys.stdout.write(render_reference_markdown())
    else:
        from gputenant.api.crd import render_crd_yaml

        sys.stdout.write(render_crd_yaml())
    return 0
