"""The ``gputenant run`` flags of the admission guard, apart from the server so that building the
command line parser does not import kopf."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``gputenant run`` flags that turn the admission guard on."""
    group = parser.add_argument_group("admission guard")
    group.add_argument("--webhook-host", help="Host or IP the apiserver dials (put in the webhook URL and the "
                       "generated certificate). Unset: no admission guard.")
    group.add_argument("--webhook-port", type=int, default=9443, help="Port to listen on (default 9443).")
    group.add_argument("--webhook-listen", help="Address to bind (default: --webhook-host; 0.0.0.0 in a Pod).")
    group.add_argument("--webhook-cert", type=Path, help="Serving certificate (PEM); unset: generated and renewed.")
    group.add_argument("--webhook-key", type=Path, help="Private key of --webhook-cert (PEM).")
    group.add_argument("--webhook-ca", type=Path, help="CA bundle for the webhook configurations; default --webhook-cert.")
    group.add_argument("--webhook-client-ca", type=Path, help="CA of the client certificate the API server presents "
                       "(its admission configuration's kubeconfig); set: callers without one get no answer.")
    group.add_argument("--webhook-client-ca-from-cluster", action="store_true",
                       help="Take the client CA from the cluster: requestheader-client-ca-file of ConfigMap "
                       "kube-system/extension-apiserver-authentication (the CA of the API server's front-proxy "
                       "certificate, which its admission configuration presents to webhooks); the guard does not "
                       "start without it.")
    group.add_argument("--webhook-conversion-port", type=int, help="Serve the GpuTenant CRD's conversion webhook on "
                       "this port (same certificate, no client certificate asked: the API server presents none to "
                       "conversion webhooks) and point the CRD at it. Unset: not served (objects read and written "
                       "in their stored version need none).")
    group.add_argument("--webhook-cert-dir", type=Path, help="Where generated certificates live (default: a temp dir).")


CERT_WITHOUT_KEY = "--webhook-cert and --webhook-key go together: pass both, or neither to generate them"
CLIENT_CA_TWICE = "--webhook-client-ca and --webhook-client-ca-from-cluster name the client CA twice: pass one"
ONE_PORT_TWICE = ("--webhook-conversion-port equals --webhook-port: the conversion webhook asks no client certificate "
                  "and needs a port of its own; choose another")


def check_webhook_arguments(args: argparse.Namespace) -> None:
    """Refuse flag combinations the guard cannot serve, before anything starts."""
    if (args.webhook_cert is None) != (args.webhook_key is None):
        raise ValueError(CERT_WITHOUT_KEY)
    if args.webhook_client_ca and args.webhook_client_ca_from_cluster:
        raise ValueError(CLIENT_CA_TWICE)
    if args.webhook_conversion_port is not None and args.webhook_conversion_port == args.webhook_port:
        raise ValueError(ONE_PORT_TWICE)
