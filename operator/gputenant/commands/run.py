"""`gputenant run`: the operator, watching GpuTenants in the whole cluster (what the Helm chart's
Deployment runs)."""

from __future__ import annotations

import argparse
import os

HELP = "run the operator against the current cluster (all namespaces)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="operator configuration YAML (default: $GPUTENANT_CONFIG, "
                        "else built-in defaults)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                        "else the in-cluster service account)")
    parser.add_argument("--json-logs", action="store_true", help="log one JSON object per line")
    parser.add_argument("--liveness", metavar="URL",
                        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", action="store_true", help="debug logging")


def run(args: argparse.Namespace) -> int:
    import kopf

    from gputenant.config.models import OperatorConfig
    from gputenant.handlers import CONFIG_ENV, KUBECONFIG_ENV

    if args.config:
        OperatorConfig.load(args.config)  # fail fast with pydantic's field-by-field message
        os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = os.environ[KUBECONFIG_ENV] = os.path.abspath(args.kubeconfig)
    kopf.configure(verbose=args.verbose,
                   log_format=kopf.LogFormat.JSON if args.json_logs else kopf.LogFormat.FULL)
    import gputenant.handlers  # noqa: F401  (registers the handlers)

    kopf.run(clusterwide=True, standalone=True, liveness_endpoint=args.liveness)
    return 0
