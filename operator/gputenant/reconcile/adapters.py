"""The real Helm and kubeconfig components behind the pipeline's ports, with their errors mapped
to StepError reasons that show up in conditions."""

from __future__ import annotations

from gputenant.api import conditions as reasons
from gputenant.helm import ChartRef, HelmError, VClusterReleases
from gputenant.kubeconfigs import (
    IssuedKubeconfig,
    KubeconfigIssueError,
    in_virtual_cluster,
    issue_kubeconfigs,
    put_oidc_owners_binding,
    unanswered,
)
from gputenant.reconcile.ports import StepError


def helm_step_error(error: HelmError, message: str | None = None) -> StepError:
    """The one translation of a Helm failure into the pipeline's terms: its reason (the condition's,
    as the metric's outcome), its message, and whether the pipeline retries it."""
    return StepError(error.reason, message or str(error), transient=error.transient)


def issue_step_error(tenant: str, error: KubeconfigIssueError | ValueError) -> StepError:
    """The one translation of a failure to issue kubeconfigs: the virtual cluster refused or did not
    answer (TokenRequestFailed, transient as the error says), or the input was unusable."""
    if isinstance(error, KubeconfigIssueError):
        return StepError(reasons.TOKEN_REQUEST_FAILED, f"in the virtual cluster of {tenant}: {error.message}",
                         transient=error.transient)
    return StepError(reasons.INVALID_KUBECONFIG_INPUT, str(error), transient=False)


class HelmReleases:
    """Releases over gputenant.helm.VClusterReleases with the operator's chart location."""

    def __init__(self, releases: VClusterReleases, chart: ChartRef):
        self.releases = releases
        self.chart = chart

    async def ensure(self, release: str, namespace: str, chart_version: str, values: dict,
                     known_absent: bool = False) -> str:
        try:
            outcome = await self.releases.ensure(release, namespace, self.chart, chart_version, values,
                                                 known_absent=known_absent)
        except HelmError as error:
            raise helm_step_error(error) from None
        return outcome.chart_version

    async def uninstall(self, release: str, namespace: str) -> None:
        try:
            await self.releases.uninstall(release, namespace)
        except HelmError as error:
            raise helm_step_error(error) from None


class TokenKubeconfigs:
    """Kubeconfigs from gputenant.kubeconfigs.issue_kubeconfigs (ServiceAccount + TokenRequest
    inside the virtual cluster, reached with the admin kubeconfig vCluster wrote to
    ``vc-<release>``), with its failures as StepError."""

    def __init__(self, field_manager: str):
        self.field_manager = field_manager

    async def issue(self, tenant: str, roles: list[str], admin_kubeconfig: dict, server_url: str | None,
                    lifetime_seconds: int, revoke: list[str] | None = None) -> list[IssuedKubeconfig]:
        try:
            return await issue_kubeconfigs(admin_kubeconfig, roles, lifetime_seconds, server_url,
                                           context_name=tenant, field_manager=self.field_manager,
                                           revoke=revoke or ())
        except (KubeconfigIssueError, ValueError) as error:
            raise issue_step_error(tenant, error) from None

    async def bind_oidc_owners(self, tenant: str, admin_kubeconfig: dict, binding: dict | None) -> None:
        try:
            await in_virtual_cluster(admin_kubeconfig, self.field_manager,
                                     lambda client: put_oidc_owners_binding(client, binding))
        except KubeconfigIssueError as error:
            raise issue_step_error(tenant, error) from None

    async def unanswered(self, admin_kubeconfig: dict) -> str | None:
        return await unanswered(admin_kubeconfig, self.field_manager)
