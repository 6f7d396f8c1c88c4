"""`gputenant run`: the operator, watching GpuTenants in the whole cluster (what the Helm chart's
Deployment runs); with --webhook-host it also serves the admission guard on tenant pods, and with
GPU pools in its config it keeps their nodes labelled (--pools-interval); with --metrics-address it
serves its Prometheus metrics (docs/metrics.md)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid

import prometheus_client

from gputenant.guard.flags import add_webhook_arguments
from gputenant.timefmt import parse_duration

HELP = "run the operator against the current cluster (all namespaces)"
DEFAULT_POOLS_INTERVAL_SECONDS = 300.0
HELM_CONCURRENCY_ENV = "GPUTENANT_HELM_CONCURRENCY"
RECONCILE_CONCURRENCY_ENV = "GPUTENANT_RECONCILE_CONCURRENCY"
METRICS_ADDRESS_ENV = "GPUTENANT_METRICS_ADDRESS"
PROMETHEUS_URL_ENV = "GPUTENANT_PROMETHEUS_URL"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="operator configuration YAML (default: $GPUTENANT_CONFIG, "
                        "else built-in defaults)")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                        "else the in-cluster service account)")
    parser.add_argument("--json-logs", action="store_true", help="log one JSON object per line")
    parser.add_argument("--liveness", metavar="URL",
                        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz (it also reports "
                        "the GPU pools: nodes, GPUs, granted, over-commitment)")
    parser.add_argument("--pools-interval", type=float, default=DEFAULT_POOLS_INTERVAL_SECONDS, metavar="SECONDS",
                        help="apply the config's GPU pools (node labels, device-plugin ConfigMap) at startup "
                        f"and every SECONDS (default {DEFAULT_POOLS_INTERVAL_SECONDS:g}); 0 turns it off")
    parser.add_argument("--helm-concurrency", type=int, metavar="N",
                        default=os.environ.get(HELM_CONCURRENCY_ENV),
                        help=f"helm processes at once, across all tenants (default: ${HELM_CONCURRENCY_ENV}, "
                        "else twice the cores); more only queue for CPU")
    parser.add_argument("--reconcile-concurrency", type=int, metavar="N",
                        default=os.environ.get(RECONCILE_CONCURRENCY_ENV),
                        help=f"tenant reconciles in flight at once (default: ${RECONCILE_CONCURRENCY_ENV}, "
                        "else eight times the cores)")
    parser.add_argument("--metrics-address", metavar="HOST:PORT", default=os.environ.get(METRICS_ADDRESS_ENV),
                        help=f"serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 0.0.0.0:9100 (default: "
                        f"${METRICS_ADDRESS_ENV}, else not served)")
    parser.add_argument("--prometheus-url", metavar="URL", default=os.environ.get(PROMETHEUS_URL_ENV),
                        help="Prometheus scraping the DCGM exporter: publish each tenant's GPUs held against used, "
                        f"idle and busy-but-not-working GPUs as metrics (default: ${PROMETHEUS_URL_ENV}, else off)")
    parser.add_argument("--usage-window", default="1h", metavar="DURATION",
                        help="window of the GPU usage figures, in whole h/m/s (default 1h)")
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    parser.add_argument("--leader-elect", action="store_true",
                        help="reconcile only while holding a coordination.k8s.io Lease in the operator's namespace, so "
                        "several replicas can run: each serves the admission guard, one reconciles (docs/operations.md)")
    parser.add_argument("--leader-elect-lease", default="gpu-tenant-operator", metavar="NAME",
                        help="the Lease's name (default gpu-tenant-operator)")
    parser.add_argument("--leader-elect-identity", metavar="ID",
                        default=f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}",
                        help="this process' name in the Lease (default: $POD_NAME, else the host name, and a random "
                        "suffix: a restarted container must not take over its dead predecessor's Lease unseen)")
    add_webhook_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import kopf

    import gputenant.control_plane_watch  # noqa: F401 (registers the control-plane pod watch with kopf)
    from gputenant.config.models import OperatorConfig
    from gputenant.handlers import CONFIG_ENV, lead, prepare
    from gputenant.metrics import OperatorMetrics

    if args.pools_interval < 0:
        print(f"gputenant run: --pools-interval {args.pools_interval:g} is negative; give seconds, or 0 to "
              "turn the GPU pools loop off", file=sys.stderr)
        return 2
    try:
        metrics_address = parse_metrics_address(args.metrics_address) if args.metrics_address else None
    except ValueError as error:
        print(f"gputenant run: {error}", file=sys.stderr)
        return 2
    if parse_duration(args.usage_window) is None:
        print(f"gputenant run: --usage-window {args.usage_window!r} is not a duration in whole h/m/s units; give e.g. "
              "1h or 30m", file=sys.stderr)
        return 2
    for flag, value in (("--helm-concurrency", args.helm_concurrency),
                        ("--reconcile-concurrency", args.reconcile_concurrency)):
        if value is not None and value < 1:
            print(f"gputenant run: {flag} {value} (or its environment variable) must be 1 or more; leave it "
                  "unset for the default", file=sys.stderr)
            return 2
    config_path = args.config or os.environ.get(CONFIG_ENV)
    config = OperatorConfig.load(config_path) if config_path else OperatorConfig()
    kubeconfig = os.path.abspath(args.kubeconfig) if args.kubeconfig else None
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig  # helm, run by pyhelm3, reads it
    kopf.configure(verbose=args.verbose,
                   log_format=kopf.LogFormat.JSON if args.json_logs else kopf.LogFormat.FULL)
    metrics = OperatorMetrics(process_registry())
    try:
        runtime = prepare(config, kubeconfig, pools_interval_seconds=args.pools_interval, webhook_args=args,
                helm_concurrency=args.helm_concurrency, reconcile_concurrency=args.reconcile_concurrency,
                metrics=metrics, prometheus_url=args.prometheus_url, usage_window=args.usage_window)
    except ValueError as error:  # e.g. --webhook-cert without --webhook-key, two pools with one devicePluginConfig
        print(f"gputenant run: {error}", file=sys.stderr)
        return 2
    if metrics_address is not None:
        host, port = metrics_address
        try:
            prometheus_client.start_http_server(port, host, registry=metrics.registry)
        except OSError as error:
            print(f"gputenant run: cannot serve metrics on {args.metrics_address}: {error.strerror}; choose another "
                  "--metrics-address", file=sys.stderr)
            return 2
    if args.leader_elect:
        lead(runtime, kubeconfig, lease=args.leader_elect_lease, identity=args.leader_elect_identity,
             liveness_url=args.liveness)
    kopf.run(clusterwide=True, standalone=True, liveness_endpoint=args.liveness)
    return 0


def process_registry() -> prometheus_client.CollectorRegistry:
    """A registry with the process' own series (CPU, memory, file descriptors, Python GC) and
    without the ``_created`` twin of every counter, which only doubles what is scraped."""
    prometheus_client.disable_created_metrics()
    registry = prometheus_client.CollectorRegistry()
    for collector in (prometheus_client.ProcessCollector, prometheus_client.PlatformCollector,
                      prometheus_client.GCCollector):
        collector(registry=registry)
    return registry


def parse_metrics_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::]:9100`` for IPv6) -> (host, port); ValueError naming the flag otherwise."""
    host, _, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--metrics-address {address!r} (or ${METRICS_ADDRESS_ENV}) is not HOST:PORT; give e.g. "
                         "0.0.0.0:9100, or 127.0.0.1:9100 to serve only this host")
    return host, int(port)
