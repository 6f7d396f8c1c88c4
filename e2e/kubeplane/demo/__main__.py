"""`python -m kubeplane.demo up`: the local demo's command line (what `make dev` runs). See docs/local-demo.md."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from kubeplane.demo import defaults

HELP = "local demo: control plane, kwok-simulated GPU nodes, operator, example tenants; status until Ready"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kubeplane.demo", description=HELP)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help=HELP, description=defaults.SIMULATION_NOTICE,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--dir", type=Path, default=defaults.default_directory(),
                    help="directory for the plane's data, kubeconfigs and logs (default: %(default)s)")
    up.add_argument("--config", type=Path, default=defaults.DEFAULT_CONFIG,
                    help="operator configuration whose GPU pools get simulated nodes (default: examples/config.yaml)")
    up.add_argument("--tenants", type=Path, default=defaults.DEFAULT_TENANTS,
                    help="GpuTenant YAML file or directory to apply (default: examples/tenants)")
    up.add_argument("--exit-when-ready", action="store_true",
                    help="stop everything and exit 0 once all tenants are Ready (for CI and tests); "
                         "exit 1 as soon as one fails for a reason the operator does not retry")
    up.add_argument("--timeout", type=float, default=600, metavar="S",
                    help="give up (exit 1) if the tenants are not all Ready after S seconds (default: 600)")
    up.add_argument("--argocd", action="store_true",
                    help="also run Argo CD (built by `make tools` with the other tools) with a local Git repository, and print "
                         "how to use it")
    return parser


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kubeplane.demo.inputs import DevOptions
    from kubeplane.demo.session import Session

    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    options = DevOptions(directory=args.dir.resolve(), config_path=args.config.resolve(),
                         tenants_path=args.tenants.resolve(), timeout_seconds=args.timeout,
                         exit_when_ready=args.exit_when_ready, argocd=args.argocd)
    return Session(options).run()


if __name__ == "__main__":
    sys.exit(main())
