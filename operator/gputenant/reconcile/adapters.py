"""The real Helm and kubeconfig components behind the pipeline's ports, with their errors mapped
to StepError reasons that show up in conditions."""

from __future__ import annotations

from datetime import datetime

import yaml

from gputenant.helm import (
    ChartRef, InvalidValuesError, PermanentHelmError, TransientHelmError, UpgradePathError,
    VClusterReleases,
)
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile.ports import IssuedKubeconfig, StepError


class HelmReleases:
    """Releases over gputenant.helm.VClusterReleases with the operator's chart location."""

    def __init__(self, releases: VClusterReleases, chart: ChartRef):
        self.releases = releases
        self.chart = chart

    async def ensure(self, release: str, namespace: str, chart_version: str | None, values: dict) -> str:
        try:
            outcome = await self.releases.ensure(release, namespace, self.chart, chart_version, values)
        except UpgradePathError as error:
            raise StepError("UpgradeRefused", str(error), transient=False) from None
        except InvalidValuesError as error:
            raise StepError("InvalidValues", str(error), transient=False) from None
        except PermanentHelmError as error:
            raise StepError("HelmFailed", str(error), transient=False) from None
        except TransientHelmError as error:
            raise StepError("HelmUnavailable", str(error), transient=True) from None
        return outcome.chart_version

    async def uninstall(self, release: str, namespace: str) -> None:
        try:
            await self.releases.uninstall(release, namespace)
        except TransientHelmError as error:
            raise StepError("HelmUnavailable", str(error), transient=True) from None
        except PermanentHelmError as error:
            raise StepError("HelmFailed", str(error), transient=False) from None


ISSUER_NAMESPACE = "kube-system"
ROLE_CLUSTER_ROLES = {"admin": ("cluster-admin",), "view": ("view", "gputenant-namespace-reader")}
"""The built-in view role reads inside namespaces only; viewers also need to list the namespaces."""
NAMESPACE_READER = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "gputenant-namespace-reader"},
    "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}],
}


class VirtualClusterKubeconfigs:
    """Token kubeconfigs inside the virtual cluster: a ServiceAccount per role bound to the
    matching ClusterRole, and a TokenRequest with the tenant's lifetime. Talks to the virtual
    cluster with the admin kubeconfig vCluster wrote to ``vc-<release>``."""

    def __init__(self, field_manager: str):
        self.field_manager = field_manager

    async def issue(self, tenant: str, role: str, admin_kubeconfig: dict, server_url: str | None,
                    lifetime_seconds: int) -> IssuedKubeconfig:
        account = f"gputenant-{role}"
        client = KubeClient.from_kubeconfig_dict(admin_kubeconfig, self.field_manager)
        try:
            await client.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": account, "namespace": ISSUER_NAMESPACE}})
            await client.apply(NAMESPACE_READER)
            for cluster_role in ROLE_CLUSTER_ROLES[role]:
                await client.apply({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"{account}-{cluster_role}"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                    "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ISSUER_NAMESPACE}]})
            answer = await client.request_token(ISSUER_NAMESPACE, account, lifetime_seconds)
        except ApiError as error:
            raise StepError("TokenRequestFailed", f"in the virtual cluster of {tenant}: {error}",
                            transient=error.transient) from None
        finally:
            await client.close()
        cluster = admin_kubeconfig["clusters"][0]["cluster"]
        server = server_url or cluster["server"]
        context = f"{tenant}-{role}"
        document = {
            "apiVersion": "v1", "kind": "Config", "current-context": context,
            "clusters": [{"name": tenant, "cluster": {
                "server": server, **{k: v for k, v in cluster.items() if k == "certificate-authority-data"}}}],
            "users": [{"name": context, "user": {"token": answer["status"]["token"]}}],
            "contexts": [{"name": context, "context": {"cluster": tenant, "user": context}}],
        }
        expires_at = datetime.fromisoformat(answer["status"]["expirationTimestamp"].replace("Z", "+00:00"))
        return IssuedKubeconfig(yaml.safe_dump(document, sort_keys=False), expires_at)
