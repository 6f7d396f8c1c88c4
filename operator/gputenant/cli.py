"""The ``gputenant`` command: operator, offline renderer, kubeconfig fetcher and pool report."""

from __future__ import annotations

import argparse
import importlib
import sys

from gputenant.commands import CommandError

# subcommand name -> module under gputenant.commands. Command modules keep heavy imports (kopf,
# the kube client) inside run(), so building the parser stays cheap.
COMMANDS: dict[str, str] = {
    "run": "run",
    "kubeconfig": "kubeconfig",
    "render": "render",
    "explain": "explain",
    "crd": "crd",
    "pools": "pools",
    "fleet": "fleet",
    "usage": "usage",
    "status": "status",
    "migrate-storage": "migrate_storage",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gputenant", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"gputenant.commands.{module_name}")
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except CommandError as error:
        print(f"gputenant {args.command}: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
