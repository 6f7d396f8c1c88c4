"""`gputenant kubeconfig <tenant> [--role view | --oidc]`: print a tenant's kubeconfig from its Secret,
read with the caller's own credentials (only the tenant's owners may read it). ``--oidc`` prints the
personal-login kubeconfig (spec.vcluster.oidc): no token in it, kubelogin gets one from the issuer."""

from __future__ import annotations

import argparse
import base64
import sys

from gputenant.commands import CommandError

HELP = "print a tenant's kubeconfig (admin or view) using your own credentials"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tenant", help="GpuTenant name")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--role", choices=("admin", "view"), default="view", help="which token kubeconfig (default: view)")
    which.add_argument("--oidc", action="store_true",
                       help="the kubeconfig that logs you in through the tenant's OIDC issuer (kubectl oidc-login)")
    parser.add_argument("--kubeconfig", help="your kubeconfig for the host cluster (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
    parser.add_argument("--config", help="operator configuration YAML, for its namespace prefix")


def run(args: argparse.Namespace) -> int:
    from gputenant import naming
    from gputenant.commands.cluster import with_cluster
    from gputenant.commands.render import load_config
    from gputenant.kube import ApiError

    config = load_config(args.config)
    namespace = naming.host_namespace(args.tenant, config)
    role = naming.OIDC_KUBECONFIG_ROLE if args.oidc else args.role
    name = naming.kubeconfig_secret_name(args.tenant, role)

    async def read_secret(client) -> dict | None:
        try:
            return await client.get("v1", "Secret", name, namespace)
        except ApiError as error:
            if error.forbidden:
                raise CommandError(f"you may not read Secret {namespace}/{name}: only owners of tenant {args.tenant} "
                                   "(spec.owners) can read its kubeconfigs") from None
            raise

    secret = with_cluster(args.kubeconfig, config.field_manager, read_secret)
    if secret is None and args.oidc:
        raise CommandError(f"no Secret {namespace}/{name}: is tenant {args.tenant} Ready and does its spec.vcluster.oidc "
                           f"name an issuer? (kubectl get gputenant {args.tenant})")
    if secret is None:
        raise CommandError(f"no Secret {namespace}/{name}: is tenant {args.tenant} Ready and is '{args.role}' in "
                           f"spec.kubeconfig.roles? (kubectl get gputenant {args.tenant})")
    data = secret.get("data") or {}
    if "config" not in data:
        raise CommandError(f"Secret {namespace}/{name} has no key 'config'; it is not a kubeconfig the operator "
                           f"issued (kubectl get gputenant {args.tenant})")
    sys.stdout.write(base64.b64decode(data["config"]).decode())
    return 0
