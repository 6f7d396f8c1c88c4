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
from pydantic import ValidationError

from gputenant.commands import EXIT_BAD_INPUT, CommandError
from gputenant.config.settings import OperatorSettings, env_name, environment_help, settings_problems
from gputenant.guard.flags import add_webhook_arguments, check_webhook_arguments
from gputenant.timefmt import parse_duration

HELP = "run the operator against the current cluster (all namespaces)"
DEFAULT_POOLS_INTERVAL_SECONDS = 300.0
SETTING_FLAGS = {"config": "--config", "helm_concurrency": "--helm-concurrency",
                 "reconcile_concurrency": "--reconcile-concurrency", "metrics_address": "--metrics-address",
                 "prometheus_url": "--prometheus-url"}
"""Settings (gputenant.config.settings) a flag can give; the flag wins over the variable."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = environment_help()
    parser.add_argument("--config", help=f"operator configuration YAML (default: ${env_name('config')}, "
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
                        help=f"helm processes at once, across all tenants (default: ${env_name('helm_concurrency')}, "
                        "else twice the cores); more only queue for CPU")
    parser.add_argument("--reconcile-concurrency", type=int, metavar="N",
                        help="tenant reconciles in flight at once (default: "
                        f"${env_name('reconcile_concurrency')}, else eight times the cores)")
    parser.add_argument("--metrics-address", metavar="HOST:PORT",
                        help="serve Prometheus metrics at http://HOST:PORT/metrics, e.g. 0.0.0.0:9100 (default: "
                        f"${env_name('metrics_address')}, else not served)")
    parser.add_argument("--prometheus-url", metavar="URL",
                        help="Prometheus scraping the DCGM exporter: publish each tenant's GPUs held against used, "
                        f"idle and busy-but-not-working GPUs as metrics (default: ${env_name('prometheus_url')}, "
                        "else off)")
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


def settings_from(args: argparse.Namespace) -> OperatorSettings:
    """The environment's settings with the flags given on top, validated; CommandError naming the
    flag and variable of every invalid one."""
    given = {name: getattr(args, name) for name in SETTING_FLAGS if getattr(args, name) is not None}
    try:
        return OperatorSettings(**given)
    except ValidationError as error:
        raise CommandError(settings_problems(error, SETTING_FLAGS), EXIT_BAD_INPUT) from None


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)  # before anything is built, and before handlers reads the resync period
    if args.pools_interval < 0:
        print(f"gputenant run: --pools-interval {args.pools_interval:g} is negative; give seconds, or 0 to "
              "turn the GPU pools loop off", file=sys.stderr)
        return 2
    if parse_duration(args.usage_window) is None:
        print(f"gputenant run: --usage-window {args.usage_window!r} is not a duration in whole h/m/s units; give e.g. "
              "1h or 30m", file=sys.stderr)
        return 2

    import kopf

    from gputenant.commands.cluster import with_cluster
    from gputenant.commands.render import load_config
    from gputenant.handlers import lead, prepare, register
    from gputenant.loops.memory import limit_malloc_arenas
    from gputenant.metrics import OperatorMetrics
    from gputenant.pools import device_plugin_config_data

    limit_malloc_arenas()  # before any thread starts
    config = load_config(str(settings.config) if settings.config else None)
    try:  # what needs no cluster is refused before one is asked
        device_plugin_config_data(config)
        if args.webhook_host:
            check_webhook_arguments(args)
    except ValueError as error:  # e.g. --webhook-cert without --webhook-key, two pools with one devicePluginConfig
        print(f"gputenant run: {error}", file=sys.stderr)
        return 2
    kubeconfig = os.path.abspath(args.kubeconfig) if args.kubeconfig else None
    with_cluster(kubeconfig, config.field_manager, api_server_version)  # one line now, not kopf's retries
    kopf.configure(verbose=args.verbose,
                   log_format=kopf.LogFormat.JSON if args.json_logs else kopf.LogFormat.FULL)
    metrics = OperatorMetrics(process_registry())
    try:
        cell = prepare(config, kubeconfig, settings, pools_interval_seconds=args.pools_interval, webhook_args=args,
                          metrics=metrics, usage_window=args.usage_window)
    except ValueError as error:
        print(f"gputenant run: {error}", file=sys.stderr)
        return 2
    except FileNotFoundError as error:  # no helm binary
        raise CommandError(str(error)) from None
    if settings.metrics_host_and_port is not None:
        host, port = settings.metrics_host_and_port
        try:
            prometheus_client.start_http_server(port, host, registry=metrics.registry)
        except OSError as error:
            print(f"gputenant run: cannot serve metrics on {settings.metrics_address}: {error.strerror}; choose "
                  f"another --metrics-address (or ${env_name('metrics_address')})", file=sys.stderr)
            return 2
    if args.leader_elect:
        lead(cell, lease=args.leader_elect_lease, identity=args.leader_elect_identity, liveness_url=args.liveness)
    registry = kopf.OperatorRegistry()
    register(registry, cell)
    kopf.run(registry=registry, clusterwide=True, standalone=True, liveness_endpoint=args.liveness)
    return 0


async def api_server_version(client) -> dict:
    """The API server's /version: proof that the cluster answers before anything is started."""
    return await client.request("GET", "/version")


def process_registry() -> prometheus_client.CollectorRegistry:
    """A registry with the process' own series (CPU, memory, file descriptors, Python GC) and
    without the ``_created`` twin of every counter, which only doubles what is scraped."""
    prometheus_client.disable_created_metrics()
    registry = prometheus_client.CollectorRegistry()
    for collector in (prometheus_client.ProcessCollector, prometheus_client.PlatformCollector,
                      prometheus_client.GCCollector):
        collector(registry=registry)
    return registry
