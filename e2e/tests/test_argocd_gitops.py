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
- raise its quota: applied, the operator reconciles the new generation, Healthy again;
- enable spec.argocd: the operator's cluster Secret registers the vCluster, the ApplicationSet of
  examples/argocd/apps/workloads.yaml deploys the sample workload into it, its pod runs on the host;
  after a rotation asked for in Git, a change to the workload still reaches the vCluster;
- put it to sleep: Suspended;
- delete the file: Argo CD prunes the tenant only after the deletion is approved (the file's
  `Prune=confirm`, as in examples/argocd/tenants); a tenant with spec.preventDeletion is then
  Suspended until that is lifted, then the operator offboards it and nothing of it is left on the host.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from kubeplane import ControlPlane, wait_for
from kubeplane.argocd import ArgoCD
from kubeplane.fixtures import ARGOCD_NAMESPACE, REAL_VCLUSTER_CHART
from kubeplane.images import TEST_IMAGE
from kubeplane.tools import REPO_ROOT

TENANT = "gitops-team"
TENANT_FILE = f"tenants/{TENANT}.yaml"
EXAMPLES = REPO_ROOT / "examples" / "argocd"
APPLICATION = EXAMPLES / "apps" / "tenants.yaml"
APPLICATION_SET = EXAMPLES / "apps" / "workloads.yaml"
WORKLOAD = EXAMPLES / "workloads" / "sample.yaml"
WORKLOAD_FILE = "workloads/sample.yaml"
EXAMPLE_TENANT = yaml.safe_load((EXAMPLES / "tenants" / "team-vision.yaml").read_text())
"""Whose annotations (Prune=confirm,Delete=confirm) every tenant file in Git carries."""
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
        """The revisions Argo CD has synced, oldest first (its history, one entry per sync; a commit
        that changes no manifest of the Application needs none)."""
        return [entry["revision"] for entry in self.status().get("history") or []]


@pytest.fixture(scope="module")
def gitops(argocd: ArgoCD, vcluster_node: ControlPlane, real_tenants) -> GitOps:
    loop = GitOps(argocd, vcluster_node, real_tenants)
    loop.start()
    loop.wait(loop.synced_at_head, "the tenants Application Synced to the first commit")
    return loop


def tenant_file(tenants, quota: float, *, asleep: bool = False, argocd: bool = False, rotation: str = "") -> dict:
    """The tenant as its file in Git says it: like the examples, it asks Argo CD to confirm its deletion."""
    extra: dict = {"kubeconfig": {"roles": ["admin"]}}
    if argocd:
        extra["argocd"] = {"enabled": True, "namespace": ARGOCD_NAMESPACE}
    if asleep:
        extra["sleep"] = {"asleep": True}
    body = tenants.manifest(TENANT, "Trusted", owner="gitops-owner", gpus=quota, **extra)
    body["metadata"]["annotations"] = dict(EXAMPLE_TENANT["metadata"]["annotations"])
    if rotation:
        body["metadata"]["annotations"][naming.ROTATE_ANNOTATION] = rotation
    return body


def with_test_image(documents) -> list[dict]:
    """examples/argocd/workloads with the node's test image in place of the example's registry."""
    documents = [doc for doc in documents if doc]
    for doc in documents:
        for container in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            container["image"] = TEST_IMAGE
    return documents


def cluster_token(plane: ControlPlane, secret_name: str) -> str | None:
    """The bearer token in Argo CD's cluster Secret for the tenant, None while there is none."""
    found = plane.kubectl("get", "secret", secret_name, "-n", ARGOCD_NAMESPACE, "--ignore-not-found",
                          "-o", "jsonpath={.data.config}").stdout
    return json.loads(base64.b64decode(found))["bearerToken"] if found else None


def synced_and_healthy(argocd: ArgoCD, name: str, revision: str | None = None) -> bool:
    status = (argocd.application(name) or {}).get("status") or {}
    sync = status.get("sync") or {}
    return sync.get("status") == "Synced" and (status.get("health") or {}).get("status") == "Healthy" \
        and revision in (None, sync.get("revision"))


def running_sample_pods(plane: ControlPlane, namespace: str) -> list[str]:
    """The sample Deployment's pods the vCluster synced to its host namespace, Running there."""
    pods = json.loads(plane.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]
    return [pod["metadata"]["name"] for pod in pods
            if pod["metadata"]["name"].startswith("sample-") and pod["status"].get("phase") == "Running"]


def vcluster_message(tenants, namespace: str, directory: Path) -> str:
    """The sample ConfigMap's message inside the tenant's vCluster, read with its admin kubeconfig."""
    secret = tenants.plane.kubectl("get", "secret", naming.kubeconfig_secret_name(TENANT, "admin"), "-n", namespace,
                                   "-o", "jsonpath={.data.config}").stdout
    path = directory / "admin.kubeconfig"
    path.write_bytes(base64.b64decode(secret))
    return subprocess.run([str(tenants.plane.bin_dir / "kubectl"), f"--kubeconfig={path}", "get", "configmap",
                           "sample", "-n", "default", "-o", "jsonpath={.data.message}", "--request-timeout=10s"],
                          capture_output=True, text=True, timeout=60).stdout


def test_a_tenant_committed_to_git_is_applied_and_healthy_once_ready(gitops: GitOps, real_tenants):
    gitops.commit_tenant(f"onboard {TENANT}", tenant_file(real_tenants, quota=1))
    healthy = gitops.wait_health("Healthy")
    body = real_tenants.get(TENANT)
    assert real_tenants.condition(body, "Ready")["status"] == "True"
    assert gitops.health_seen[0] == "Progressing", gitops.health_seen  # onboarding, not Degraded
    assert healthy["status"] == "Healthy"
    assert gitops.syncs()[-1] == gitops.commits[-1]


def test_the_application_stays_synced_across_the_operators_writes(gitops: GitOps, real_tenants):
    """Argo CD compares the live tenant, with everything the operator wrote since the sync, again
    and finds it still Synced: no new sync (its history is unchanged), no OutOfSync."""
    synced = gitops.syncs()
    compared = gitops.status()["reconciledAt"]
    gitops.wait(lambda: gitops.status().get("reconciledAt", compared) > compared, "another comparison")
    assert gitops.synced_at_head()
    assert gitops.syncs() == synced


def test_a_quota_change_in_git_is_applied_and_reconciled(gitops: GitOps, real_tenants):
    before = real_tenants.get(TENANT)["metadata"]["generation"]
    gitops.commit_tenant(f"{TENANT}: two GPUs", tenant_file(real_tenants, quota=2))
    gitops.wait(lambda: (body := real_tenants.get(TENANT))["metadata"]["generation"] > before
                and body["status"].get("observedGeneration") == body["metadata"]["generation"],
                "the operator to reconcile the new quota")
    gitops.wait_health("Healthy")
    assert real_tenants.get(TENANT)["spec"]["gpu"]["quota"] == 2
    assert gitops.syncs()[-1] == gitops.commits[-1]


def test_an_application_set_deploys_a_workload_into_the_tenants_vcluster_across_a_rotation(gitops: GitOps,
                                                                                          real_tenants, tmp_path: Path):
    """The tenant loop: spec.argocd.enabled in Git makes the operator register the vCluster (its
    cluster Secret), the ApplicationSet's cluster generator makes an Application for it, and the
    sample workload runs in the vCluster, its pod synced to the host through the guard. A rotation
    of the tenant's credentials (asked for in Git) replaces the Secret's token; Argo CD keeps
    deploying with the new one."""
    body = tenant_file(real_tenants, quota=2, argocd=True)
    workload = yaml.safe_load_all(WORKLOAD.read_text())
    gitops.commit("the sample workload and spec.argocd for " + TENANT,
                  {TENANT_FILE: yaml.safe_dump(body), WORKLOAD_FILE: yaml.safe_dump_all(with_test_image(workload))})
    gitops.wait_health("Healthy")
    secret_name = naming.argocd_secret_name(TENANT)
    token = gitops.wait(lambda: cluster_token(gitops.plane, secret_name), f"the cluster Secret {secret_name}")
    application_set = yaml.safe_load(APPLICATION_SET.read_text())
    source = application_set["spec"]["template"]["spec"]["source"]
    source["repoURL"], source["path"] = gitops.argocd.git.url, "workloads"
    gitops.argocd.apply(application_set)
    workloads = f"{secret_name}-workloads"
    gitops.wait(lambda: synced_and_healthy(gitops.argocd, workloads), f"the Application {workloads} Healthy")
    namespace = real_tenants.get(TENANT)["status"]["namespace"]
    gitops.wait(lambda: running_sample_pods(gitops.plane, namespace), "the sample pod running on the host")

    gitops.commit_tenant(f"{TENANT}: rotate its credentials", tenant_file(real_tenants, quota=2, argocd=True,
                                                                          rotation="first"))
    gitops.wait(lambda: (new := cluster_token(gitops.plane, secret_name)) and new != token, "a rotated token")
    changed = with_test_image(yaml.safe_load_all(WORKLOAD.read_text()))
    changed[0]["data"]["message"] = "deployed again after the rotation"
    gitops.commit("a new message for the sample", {WORKLOAD_FILE: yaml.safe_dump_all(changed)})
    gitops.argocd.refresh(workloads)
    gitops.wait(lambda: synced_and_healthy(gitops.argocd, workloads, gitops.commits[-1]),
                f"the Application {workloads} Synced to the new message")
    gitops.wait(lambda: vcluster_message(real_tenants, namespace, tmp_path) == "deployed again after the rotation",
                "the new message in the vCluster")


def test_a_tenant_put_to_sleep_in_git_is_suspended(gitops: GitOps, real_tenants):
    gitops.commit_tenant(f"{TENANT}: sleep", tenant_file(real_tenants, quota=2, asleep=True, argocd=True,
                                                         rotation="first"))
    suspended = gitops.wait_health("Suspended")
    assert suspended["message"].startswith("Asleep (SleepRequested)"), suspended
    assert real_tenants.condition(real_tenants.get(TENANT), "Asleep")["status"] == "True"


def test_deleting_the_file_offboards_the_tenant_once_approved_and_no_longer_prevented(gitops: GitOps,
                                                                                     real_tenants):
    """Removing the file prunes nothing until the deletion is approved (Prune=confirm); a tenant
    with spec.preventDeletion then stays, Suspended with the operator's reason, until someone lifts
    it (with kubectl: its file is gone from Git); then the operator offboards it."""
    namespace = real_tenants.get(TENANT)["status"]["namespace"]
    data_volumes = real_tenants.volumes_claimed_in(namespace)
    kept = tenant_file(real_tenants, quota=2, asleep=True, argocd=True, rotation="first")
    kept["spec"]["preventDeletion"] = True
    gitops.commit_tenant(f"{TENANT}: prevent its deletion", kept)
    gitops.wait(gitops.synced_at_head, "the Application Synced with preventDeletion")
    gitops.commit_tenant(f"offboard {TENANT}", None)
    gitops.wait(lambda: "pruning confirmation" in (gitops.status().get("operationState") or {}).get("message", ""),
                "Argo CD to wait for the pruning to be approved")
    assert real_tenants.get(TENANT)["metadata"].get("deletionTimestamp") is None
    approved = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    gitops.argocd.annotate(gitops.name, {"argocd.argoproj.io/deletion-approved": approved})
    blocked = gitops.wait(lambda: (health := gitops.tenant_health()).get("status") == "Suspended"
                          and "preventDeletion" in health.get("message", "") and health,
                          "the deleted tenant Suspended by spec.preventDeletion")
    assert real_tenants.get(TENANT)["metadata"].get("deletionTimestamp"), blocked
    assert real_tenants.condition(real_tenants.get(TENANT), "DeletionPrevented")["status"] == "True"

    gitops.plane.kubectl("patch", "gputenant", TENANT, "--type=merge", "-p", '{"spec":{"preventDeletion":false}}')
    gitops.wait(lambda: real_tenants.get(TENANT) is None, f"tenant {TENANT} offboarded")
    gitops.wait(gitops.synced_at_head, "the Application Synced without the tenant")
    real_tenants.assert_nothing_left(TENANT, namespace, data_volumes)
    workloads = f"{naming.argocd_secret_name(TENANT)}-workloads"
    gitops.wait(lambda: gitops.argocd.application(workloads) is None,
                f"the ApplicationSet to remove {workloads} with the tenant's cluster")
