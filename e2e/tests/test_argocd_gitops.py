"""The platform team's GitOps loop with a REAL Argo CD (v3.6.1, built from its module: application
controller, repo server and ApplicationSet controller as host processes, kubeplane.argocd) reading
a Git repository that `git daemon` serves on loopback, and the real operator driving a REAL
vCluster on the node plane (conftest's `operator`).

The Application is examples/argocd/apps/tenants.yaml as shipped, pointed at the local repository's
`tenants/` folder; Argo CD reports each GpuTenant's health with operator/gputenant/argocd/health.lua
installed in argocd-cm under `resource.customizations.health.gputenant.io_GpuTenant` (docs/argocd.md).

One tenant walks through what a platform team does in Git, each step a commit followed by the
refresh a Git webhook would ask for:
- add the file: Argo CD applies it, reports it Progressing while the vCluster starts, then Healthy
  once the operator says Ready; the Application stays Synced while the operator writes its status;
- raise its quota: applied, the operator reconciles the new generation, still one sync per commit;
- put it to sleep: Suspended;
- delete the file: Argo CD prunes the tenant only after the deletion is approved (the file's
  `Delete=confirm`), then the operator offboards it and nothing of it is left on the host.
"""

from __future__ import annotations

import datetime
import json

import pytest
import yaml

from kubeplane import ControlPlane, wait_for
from kubeplane.argocd import ArgoCD
from kubeplane.fixtures import REAL_VCLUSTER_CHART
from kubeplane.tools import REPO_ROOT

TENANT = "gitops-team"
TENANT_FILE = f"tenants/{TENANT}.yaml"
APPLICATION = REPO_ROOT / "examples" / "argocd" / "apps" / "tenants.yaml"
TIMEOUT_SECONDS = 480
"""A real vCluster on a 2-core machine shared with other work (test_vcluster_real_operator.py)."""

pytestmark = [
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]


class GitOps:
    """The tenants Application of examples/argocd over the local repository, and what the tests read of it."""

    def __init__(self, argocd: ArgoCD, plane: ControlPlane, tenants):
        self.argocd = argocd
        self.plane = plane
        self.tenants = tenants
        self.application = yaml.safe_load(APPLICATION.read_text())
        self.name = self.application["metadata"]["name"]
        self.commits: list[str] = []
        self.health_seen: list[str] = []

    def start(self) -> None:
        source = self.application["spec"]["source"]
        source["repoURL"], source["path"] = self.argocd.git.url, "tenants"
        self.commit("an empty tenants folder", {"tenants/README.md": "One GpuTenant per file.\n"})
        self.argocd.apply(self.application)

    def commit(self, message: str, files: dict[str, str | None]) -> None:
        self.commits.append(self.argocd.git.commit(message, files))
        if len(self.commits) > 1:
            self.argocd.refresh(self.name)

    def commit_tenant(self, message: str, tenant: dict | None) -> None:
        self.commit(message, {TENANT_FILE: None if tenant is None else yaml.safe_dump(tenant)})

    def status(self) -> dict:
        return (self.argocd.application(self.name) or {}).get("status") or {}

    def tenant_health(self) -> dict:
        """The GpuTenant's entry in the Application's resource list ({} while it has none), recording
        each health status seen."""
        for resource in self.status().get("resources") or []:
            if resource["kind"] == "GpuTenant" and resource["name"] == TENANT:
                health = resource.get("health") or {}
                if health.get("status") and health["status"] not in self.health_seen[-1:]:
                    self.health_seen.append(health["status"])
                return health
        return {}

    def synced_at_head(self) -> dict | None:
        """The Application's status once it is Synced to the newest commit."""
        status = self.status()
        sync = status.get("sync") or {}
        return status if sync.get("status") == "Synced" and sync.get("revision") == self.commits[-1] else None

    def wait(self, probe, what: str):
        try:
            return wait_for(probe, timeout=TIMEOUT_SECONDS, interval=1, what=what)
        except TimeoutError:
            raise AssertionError(f"no {what} within {TIMEOUT_SECONDS}s; application status:\n"
                                 f"{json.dumps(self.status(), indent=1)[-4000:]}\n"
                                 f"operator log:\n{self.tenants.operator.log_tail()}") from None

    def wait_health(self, health: str) -> dict:
        self.wait(lambda: self.tenant_health().get("status") == health and self.synced_at_head(),
                  f"the GpuTenant {health} in a Synced Application at {self.commits[-1][:8]}")
        return self.tenant_health()

    def syncs(self) -> list[str]:
        """The revisions Argo CD has synced, oldest first (its history, one entry per sync)."""
        return [entry["revision"] for entry in self.status().get("history") or []]


@pytest.fixture(scope="module")
def gitops(argocd: ArgoCD, vcluster_node: ControlPlane, real_tenants) -> GitOps:
    loop = GitOps(argocd, vcluster_node, real_tenants)
    loop.start()
    loop.wait(loop.synced_at_head, "the tenants Application Synced to the first commit")
    return loop


def tenant_file(tenants, quota: float, asleep: bool = False) -> dict:
    """The tenant as its file in Git says it: each file asks Argo CD to confirm its deletion."""
    body = tenants.manifest(TENANT, "Trusted", owner="gitops-owner", gpus=quota)
    body["metadata"]["annotations"] = {"argocd.argoproj.io/sync-options": "Delete=confirm"}
    if asleep:
        body["spec"]["sleep"] = {"asleep": True}
    return body


def test_a_tenant_committed_to_git_is_applied_and_healthy_once_ready(gitops: GitOps, real_tenants):
    gitops.commit_tenant(f"onboard {TENANT}", tenant_file(real_tenants, quota=1))
    healthy = gitops.wait_health("Healthy")
    body = real_tenants.get(TENANT)
    assert real_tenants.condition(body, "Ready")["status"] == "True"
    assert gitops.health_seen[0] == "Progressing", gitops.health_seen
    assert healthy["status"] == "Healthy"
    # the operator's status writes since the sync made the Application no OutOfSync: one sync per commit
    assert gitops.syncs() == gitops.commits


def test_the_application_stays_synced_across_the_operators_writes(gitops: GitOps, real_tenants):
    """Argo CD compares again after the tenant turned Healthy (a resync or the tenant's own
    change) and finds nothing to sync."""
    compared = gitops.status()["reconciledAt"]
    gitops.wait(lambda: gitops.status().get("reconciledAt", compared) > compared, "another comparison")
    assert gitops.synced_at_head()
    assert gitops.syncs() == gitops.commits


def test_a_quota_change_in_git_is_applied_and_reconciled(gitops: GitOps, real_tenants):
    before = real_tenants.get(TENANT)["metadata"]["generation"]
    gitops.commit_tenant(f"{TENANT}: two GPUs", tenant_file(real_tenants, quota=2))
    gitops.wait(lambda: (body := real_tenants.get(TENANT))["metadata"]["generation"] > before
                and body["status"].get("observedGeneration") == body["metadata"]["generation"],
                "the operator to reconcile the new quota")
    gitops.wait_health("Healthy")
    assert real_tenants.get(TENANT)["spec"]["gpu"]["quota"] == 2
    assert gitops.syncs() == gitops.commits


def test_a_tenant_put_to_sleep_in_git_is_suspended(gitops: GitOps, real_tenants):
    gitops.commit_tenant(f"{TENANT}: sleep", tenant_file(real_tenants, quota=2, asleep=True))
    suspended = gitops.wait_health("Suspended")
    assert suspended["message"].startswith("Asleep (SleepRequested)"), suspended
    assert real_tenants.condition(real_tenants.get(TENANT), "Asleep")["status"] == "True"


def test_deleting_the_file_offboards_the_tenant_once_approved(gitops: GitOps, real_tenants):
    namespace = real_tenants.get(TENANT)["status"]["namespace"]
    data_volumes = real_tenants.volumes_claimed_in(namespace)
    gitops.commit_tenant(f"offboard {TENANT}", None)
    gitops.wait(lambda: "confirm" in ((gitops.status().get("operationState") or {}).get("message") or "").lower(),
                "Argo CD to wait for the deletion to be approved")
    assert real_tenants.get(TENANT)["metadata"].get("deletionTimestamp") is None
    approved = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    gitops.argocd.annotate(gitops.name, {"argocd.argoproj.io/deletion-approved": approved})
    gitops.wait(lambda: real_tenants.get(TENANT) is None, f"tenant {TENANT} offboarded")
    gitops.wait(gitops.synced_at_head, "the Application Synced without the tenant")
    real_tenants.assert_nothing_left(TENANT, namespace, data_volumes)
