"""`gputenant kubeconfig <tenant> [--role view]`: print a tenant's kubeconfig from its Secret, read
with the caller's own credentials (only the tenant's owners may read it)."""

from __future__ import annotations

import argparse
import base64
import sys

HELP = "print a tenant's kubeconfig (admin or view) using your own credentials"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tenant", help="GpuTenant name")
    parser.add_argument("--role", choices=("admin", "view"), default="view", help="which kubeconfig (default: view)")
    parser.add_argument("--kubeconfig", help="your kubeconfig for the host cluster (default: $KUBECONFIG)")
    parser.add_argument("--config", help="operator configuration YAML, for its namespace prefix")


def run(args: argparse.Namespace) -> int:
    import kubernetes

    from gputenant import naming
    from gputenant.config.models import OperatorConfig

    config = OperatorConfig.load(args.config) if args.config else OperatorConfig()
    namespace = naming.host_namespace(args.tenant, config)
    name = naming.kubeconfig_secret_name(args.tenant, args.role)
    client = kubernetes.config.new_client_from_config(config_file=args.kubeconfig)
    try:
        secret = kubernetes.client.CoreV1Api(client).read_namespaced_secret(name, namespace)
    except kubernetes.client.ApiException as error:
        if error.status == 403:
            print(f"gputenant: you may not read Secret {namespace}/{name}: only owners of tenant "
                  f"{args.tenant} (spec.owners) can read its kubeconfigs", file=sys.stderr)
        elif error.status == 404:
            print(f"gputenant: no Secret {namespace}/{name}: is tenant {args.tenant} Ready and is "
                  f"'{args.role}' in spec.kubeconfig.roles? (kubectl get gputenant {args.tenant})", file=sys.stderr)
        else:
            print(f"gputenant: reading {namespace}/{name} failed: {error.status} {error.reason}", file=sys.stderr)
        return 1
    finally:
        client.close()
    data = secret.data or {}
    if "config" not in data:
        print(f"gputenant: Secret {namespace}/{name} has no key 'config'; it is not a kubeconfig the operator "
              f"issued (kubectl get gputenant {args.tenant})", file=sys.stderr)
        return 1
    sys.stdout.write(base64.b64decode(data["config"]).decode())
    return 0
