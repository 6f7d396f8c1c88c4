"""A fleet of three host clusters on this machine (docs/fleet.md): a hub plane with the REAL Argo CD
(application controller, repo server, ApplicationSet controller; kubeplane.argocd) and the operator
as the fleet's hub, and two member planes, each with its own API server and its own operator as a
member:
- east: the session's node plane, where REAL vClusters run, with the real KAI-Scheduler and SIMULATED
  GPU nodes (`vcluster_kai`), with a TimeSlicing
  pool of 2 GPUs (Trusted tenants) and a MIG pool of 1 GPU (Internal and Untrusted);
- west: a second node plane, made ready for real vClusters and KAI the same way, with a MIG pool of
  4 GPUs (Internal and Untrusted tenants).
The GPUs are the pools' configured counts (`pools[].gpus`): no GPU exists here. Tenants that only
need to be placed (fleet-probe, fleet-late) ask to sleep, so their vClusters do not start.

The platform team commits GpuTenant files to Git; the hub's tenants Application
(examples/argocd/apps/tenants.yaml) applies them to the hub; the hub places each on a member and
writes a GpuTenantPlacement, which the UNMODIFIED ApplicationSet controller reads through the
chart's ApplicationSet (clusterDecisionResource generator) and delivers the same file to the member.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from gputenant import naming
from gputenant.api.hub import spec_from_stored
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from kubeplane import ControlPlane, builders, wait_for
from kubeplane.argocd import ArgoCD
from kubeplane.fixtures import ARGOCD_NAMESPACE, REAL_VCLUSTER_CHART, install_crds
from kubeplane.fleet import CORDON_LABEL, as_member, chart_fleet_objects, hub_config, label_member, register_member
from kubeplane.kai_fixtures import KaiCluster, gpu_scheduling
from kubeplane.operator_process import (
    GPUTENANT,
    OperatorProcess,
    guard_flags,
    real_vcluster_config,
    remove_guard_configurations,
    wait_for_guard,
)
from kubeplane.outage import apiserver_stopped
from kubeplane.tools import REPO_ROOT
from kubeplane.vcluster_node import ready_for_real_vclusters

pytestmark = [
    pytest.mark.skipif(not (REAL_VCLUSTER_CHART / "Chart.yaml").is_file(), reason=f"{REAL_VCLUSTER_CHART} is missing"),
]

POLL_SECONDS = 2
MAX_AGE_SECONDS = 20
TIMEOUT_SECONDS = 480
"""A real vCluster on a 2-core machine shared with other work (test_argocd_gitops.py)."""
EXAMPLE_CONFIG = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
EXAMPLE_POOLS = {pool["name"]: pool for pool in EXAMPLE_CONFIG["pools"]}
EAST_POOLS = [{**EXAMPLE_POOLS["a100-timeslice"], "gpus": 2}, {**EXAMPLE_POOLS["h100-mig-small"], "gpus": 1}]
WEST_POOLS = [{**EXAMPLE_POOLS["h100-mig-small"], "gpus": 4}]
ANNOTATIONS = yaml.safe_load((REPO_ROOT / "examples" / "argocd" / "tenants" / "team-vision.yaml").read_text())[
    "metadata"]["annotations"]
"""Prune=confirm,Delete=confirm, as every tenant file in Git carries."""
GROUP, VERSION = "gputenant.io", "v1beta1"
OPERATOR_NAMESPACE = "gpu-tenant-operator"
"""examples/config.yaml's operatorNamespace, where a member writes its capacity report."""


def tenant_file(name: str, trust: str, gpus: float, **spec) -> dict:
    body = builders.tenant(name, trust, gpus=gpus, kubeconfig={"roles": ["admin"]}, **spec)
    body["metadata"]["annotations"] = dict(ANNOTATIONS)
    return body


@dataclass
class Fleet:
    hub: ControlPlane
    east: ControlPlane
    west: ControlPlane
    argocd: ArgoCD
    hub_operator: OperatorProcess
    committed_at: dict[str, float] = field(default_factory=dict)

    def commit(self, message: str, files: dict[str, dict | None]) -> None:
        self.argocd.git.commit(message, {f"tenants/{name}.yaml": None if body is None else yaml.safe_dump(body)
                                         for name, body in files.items()})
        now = time.monotonic()
        self.committed_at.update({name: now for name in files})
        self.argocd.refresh("gpu-tenants")

    def on_hub(self, name: str) -> dict | None:
        return self.hub.cluster_object(GROUP, VERSION, "gputenants", name)

    def placement(self, name: str) -> dict | None:
        found = self.hub.kubectl("get", "gputenantplacements.gputenant.io", "-n", ARGOCD_NAMESPACE, name, "-o", "json",
                                 check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def fleet_status(self, name: str) -> dict:
        return ((self.on_hub(name) or {}).get("status") or {}).get("fleet") or {}

    def ready_on_hub(self, name: str) -> dict:
        conditions = ((self.on_hub(name) or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    def wait(self, probe, what: str, timeout: float = TIMEOUT_SECONDS):
        try:
            return wait_for(probe, timeout=timeout, interval=1, what=what)
        except TimeoutError:
            raise AssertionError(f"no {what} within {timeout}s; hub operator log:\n{self.hub_operator.log_tail()}") from None


@contextlib.contextmanager
def member_operator(plane: ControlPlane, name: str, pools: list[dict], directory: Path) -> Iterator[OperatorProcess]:
    """The member's operator, as a member (`pools` only), with its guard on loopback."""
    created = ensure_namespace(plane, OPERATOR_NAMESPACE)
    config = as_member(real_vcluster_config(plane, directory / f"{name}.yaml"), pools,
                       poll_seconds=POLL_SECONDS, max_age_seconds=MAX_AGE_SECONDS)
    running = OperatorProcess(plane, config, plane.log_dir / f"operator-fleet-{name}.log",
                              extra_args=guard_flags(directory / f"{name}-guard")).start()
    try:
        wait_for_guard(plane, running)
        yield running
    finally:
        _offboard_fleet_tenants(plane)
        running.stop()
        remove_guard_configurations(plane)
        if created:
            plane.kubectl("delete", "namespace", OPERATOR_NAMESPACE, "--wait=false")


@pytest.fixture(scope="module")
def fleet(vcluster_kai: KaiCluster, tmp_path_factory) -> Iterator[Fleet]:
    """east is the session's node plane with the real KAI-Scheduler (`vcluster_kai`; left as it
    was: the fleet's tenants there are offboarded); west a node plane of this module's own, made
    ready for real vClusters the same way, with KAI and SIMULATED GPU nodes for its pool."""
    directory = tmp_path_factory.mktemp("fleet")
    vcluster_node = vcluster_kai.plane
    with contextlib.ExitStack() as stack:
        stack.enter_context(member_operator(vcluster_node, "east", EAST_POOLS, directory))
        west = stack.enter_context(ControlPlane(node=True))
        stack.enter_context(ready_for_real_vclusters(west))
        stack.enter_context(gpu_scheduling(west, OperatorConfig.model_validate({**EXAMPLE_CONFIG, "pools": WEST_POOLS})))
        stack.enter_context(member_operator(west, "west", WEST_POOLS, directory))
        hub = stack.enter_context(ControlPlane())
        yield from _with_hub(vcluster_node, west, hub, directory)


def ensure_namespace(plane: ControlPlane, name: str) -> bool:
    """The namespace a member operator writes its report to (the chart's release namespace; the
    operators here run on the host); True when this created it."""
    if plane.kubectl("get", "namespace", name, "--ignore-not-found", "-o", "name").stdout.strip():
        return False
    plane.kubectl("create", "namespace", name)
    return True


def _with_hub(east: ControlPlane, west: ControlPlane, hub: ControlPlane, directory: Path) -> Iterator[Fleet]:
    install_crds(hub, REPO_ROOT / "crds" / "tenant.yaml")
    argocd = ArgoCD(directory / "argocd").start(hub)
    hub_operator = None
    try:
        chart_objects = chart_fleet_objects(hub, argocd.git.url, requeue_seconds=2)
        crds = [obj for obj in chart_objects if obj["kind"] == "CustomResourceDefinition"]
        (directory / "placement-crd.yaml").write_text(yaml.safe_dump_all(crds))
        install_crds(hub, directory / "placement-crd.yaml")
        argocd.apply(*[obj for obj in chart_objects if obj["kind"] in ("ConfigMap", "ApplicationSet")])
        register_member(hub, "east", east, ARGOCD_NAMESPACE, {"region": "eu-east"})
        register_member(hub, "west", west, ARGOCD_NAMESPACE, {"region": "eu-west"})
        [application_set] = [obj["metadata"]["name"] for obj in chart_objects if obj["kind"] == "ApplicationSet"]
        hub_operator = OperatorProcess(hub, hub_config(directory / "hub.yaml", application_set, poll_seconds=POLL_SECONDS,
                                                       max_age_seconds=MAX_AGE_SECONDS),
                                       hub.log_dir / "operator.log").start()
        application = yaml.safe_load((REPO_ROOT / "examples" / "argocd" / "apps" / "tenants.yaml").read_text())
        application["spec"]["source"].update(repoURL=argocd.git.url, path="tenants", targetRevision="HEAD")
        argocd.git.commit("an empty tenants folder", {"tenants/README.md": "One GpuTenant per file.\n"})
        argocd.apply(application)
        yield Fleet(hub, east, west, argocd, hub_operator)
    finally:
        if hub_operator is not None:
            hub_operator.stop()
        argocd.stop()


def _offboard_fleet_tenants(member: ControlPlane) -> None:
    """Every tenant the fleet (or a test) put on the member offboarded by its operator: the session's
    node plane is left as it was."""
    names = member.kubectl("get", "gputenants.gputenant.io", "-o", "name").stdout.split()
    fleet_names = [name for name in names if name.split("/")[-1].startswith(("fleet-", "west-"))]
    for name in fleet_names:
        member.kubectl("delete", name, "--wait=false")
    wait_for(lambda: not [n for n in member.kubectl("get", "gputenants.gputenant.io", "-o", "name").stdout.split()
                          if n in fleet_names], timeout=180, what="the fleet's tenants offboarded")


def west_policy_reason(name: str, body: dict) -> str:
    """What west's own policy says of a tenant (the hub runs the same on west's report)."""
    decision = decide(name, spec_from_stored(body["spec"]), OperatorConfig.model_validate({**EXAMPLE_CONFIG, "pools": WEST_POOLS}))
    assert not decision.possible, decision
    return decision.reason


def test_tenants_are_placed_by_trust_and_free_capacity_and_one_that_fits_nowhere_says_why(fleet: Fleet):
    fleet.commit("two teams", {
        "fleet-trusted": tenant_file("fleet-trusted", "Trusted", 1),
        "fleet-untrusted": tenant_file("fleet-untrusted", "Untrusted", 1),
    })
    fleet.wait(lambda: fleet.fleet_status("fleet-trusted").get("cluster") == "east"
               and fleet.fleet_status("fleet-untrusted").get("cluster") == "west", "both tenants placed")
    fleet.commit("a team too big for what is left", {"fleet-huge": tenant_file("fleet-huge", "Trusted", 2)})
    fleet.wait(lambda: fleet.fleet_status("fleet-huge").get("reason") == "NoMemberFits", "fleet-huge refused")
    huge = fleet.fleet_status("fleet-huge")
    assert "east: NoCapacity" in huge["message"] and "has 1 of 2 GPUs free" in huge["message"], huge
    west_refusal = west_policy_reason("fleet-huge", tenant_file("fleet-huge", "Trusted", 2))
    assert west_refusal in ("PoolTrustMismatch", "NoPoolForMode") and f"west: {west_refusal}" in huge["message"], huge
    assert fleet.ready_on_hub("fleet-huge")["status"] == "False"
    placement = fleet.placement("fleet-trusted")
    assert placement["status"]["decisions"] == [{"clusterName": "east", "reason": "Placed",
                                                 "tenant": "fleet-trusted"}], placement["status"]
    verdicts = {v["clusterName"]: v for v in placement["status"]["clusters"]}
    assert verdicts["east"]["fits"] and verdicts["west"]["reason"] == west_refusal, verdicts
    untrusted = {v["clusterName"]: v for v in fleet.placement("fleet-untrusted")["status"]["clusters"]}
    assert untrusted["east"]["fits"] and untrusted["west"]["fits"], untrusted
    assert "has 4 of 4 GPUs free" in untrusted["west"]["message"], "the member with the most GPUs left wins"
    assert fleet.placement("fleet-huge")["status"]["decisions"] == []


def test_the_applicationset_delivers_each_tenant_to_its_member_and_the_hub_shows_its_state(fleet: Fleet):
    fleet.wait(lambda: fleet.east.cluster_object(GROUP, VERSION, "gputenants", "fleet-trusted"),
               "fleet-trusted delivered to east")
    fleet.wait(lambda: fleet.west.cluster_object(GROUP, VERSION, "gputenants", "fleet-untrusted"),
               "fleet-untrusted delivered to west")
    assert fleet.east.cluster_object(GROUP, VERSION, "gputenants", "fleet-untrusted") is None
    assert fleet.west.cluster_object(GROUP, VERSION, "gputenants", "fleet-huge") is None
    application = fleet.argocd.application("gputenant-fleet-trusted")
    assert application["spec"]["destination"] == {"name": "east"}, application["spec"]

    ready_on_member = fleet.wait(
        lambda: next((c for c in (fleet.east.cluster_object(GROUP, VERSION, "gputenants", "fleet-trusted") or {})
                      .get("status", {}).get("conditions", []) if c["type"] == "Ready" and c["status"] == "True"), None),
        "fleet-trusted Ready on east")
    on_member_after = time.monotonic() - fleet.committed_at["fleet-trusted"]
    assert fleet.east.cluster_object("scheduling.run.ai", "v2", "queues", naming.queue_name("fleet-trusted")) is not None
    fleet.wait(lambda: fleet.ready_on_hub("fleet-trusted").get("status") == "True", "fleet-trusted Ready on the hub")
    on_hub_after = time.monotonic() - fleet.committed_at["fleet-trusted"]
    print(f"\nfleet figures: commit -> Ready on east {on_member_after:.1f}s, -> Ready on the hub {on_hub_after:.1f}s")
    ready = fleet.ready_on_hub("fleet-trusted")
    assert ready["reason"] == ready_on_member["reason"] and ready["message"].startswith("east: "), ready

    fleet.wait(lambda: fleet.ready_on_hub("fleet-untrusted").get("status") == "True", "fleet-untrusted Ready on west")
    shown = fleet.ready_on_hub("fleet-untrusted")
    own = next(c for c in fleet.west.cluster_object(GROUP, VERSION, "gputenants", "fleet-untrusted")["status"]["conditions"]
               if c["type"] == "Ready")
    assert (shown["status"], shown["reason"], shown["message"]) == (own["status"], own["reason"], f"west: {own['message']}")

    table = fleet.hub.kubectl("get", "gputenants.gputenant.io").stdout
    assert "fleet-trusted" in table and "fleet-huge" in table
    cli = fleet.hub.env(fleet.hub.kubeconfig_path)
    listing = subprocess.run([str(GPUTENANT), "fleet"], env=cli, capture_output=True, text=True, check=True).stdout
    assert "east" in listing and "west" in listing and "a100-timeslice" in listing and "h100-mig" in listing, listing
    assert "fleet-huge" in listing and "NoMemberFits" in listing, listing


@pytest.mark.parametrize("tenant", ["fleet-trusted", "fleet-untrusted"])
def test_the_owners_kubeconfig_from_the_hub_reaches_the_tenants_vcluster_on_its_member(fleet: Fleet, tmp_path, tenant):
    env = fleet.hub.env(fleet.hub.user(f"{tenant}-owner"))

    def kubeconfig() -> str | None:
        run = subprocess.run([str(GPUTENANT), "kubeconfig", tenant, "--role", "admin"], env=env,
                             capture_output=True, text=True)
        return run.stdout if run.returncode == 0 else None
    text = fleet.wait(kubeconfig, f"{tenant}'s owner's kubeconfig from the hub", timeout=120)
    path = tmp_path / "tenant.kubeconfig"
    path.write_text(text)
    fleet.hub.kubectl("create", "namespace", f"made-by-{tenant}", kubeconfig_path=path)
    namespaces = fleet.hub.kubectl("get", "namespaces", "-o", "name", kubeconfig_path=path).stdout
    assert f"namespace/made-by-{tenant}" in namespaces and f"namespace/tenant-{tenant}" not in namespaces, namespaces
    assert f"namespace/made-by-{tenant}" not in fleet.hub.kubectl("get", "namespaces", "-o", "name").stdout
    stranger = subprocess.run([str(GPUTENANT), "kubeconfig", tenant, "--role", "admin"],
                              env=fleet.hub.env(fleet.hub.user("someone-else")), capture_output=True, text=True)
    assert stranger.returncode != 0 and "only owners" in stranger.stderr, stranger.stderr


def west_report(fleet: Fleet) -> dict:
    data = fleet.west.kubectl("get", "configmap", "-n", OPERATOR_NAMESPACE, "gpu-tenant-operator-fleet-report",
                              "-o", "jsonpath={.data.report\\.json}").stdout
    return json.loads(data)


def test_a_capacity_change_on_a_member_moves_nobody(fleet: Fleet):
    """fleet-untrusted went to west, which had more MIG GPUs free than east; west filled up by a
    tenant of its own, a new placement would choose east, and still fleet-untrusted stays."""
    placed = fleet.placement("fleet-untrusted")
    fleet.west.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        builders.tenant("west-local", "Untrusted", gpus=3, sleep={"asleep": True})))
    fleet.wait(lambda: west_report(fleet)["pools"][0]["granted"] == 4, "west's report counting west-local", timeout=180)
    fleet.commit("a third untrusted team", {"fleet-probe": tenant_file("fleet-probe", "Untrusted", 1,
                                                                       sleep={"asleep": True})})
    fleet.wait(lambda: fleet.fleet_status("fleet-probe").get("cluster") == "east",
               "a new untrusted tenant placed on east, now the only member with MIG GPUs free", timeout=120)
    probe = {v["clusterName"]: v for v in fleet.placement("fleet-probe")["status"]["clusters"]}
    assert probe["west"]["reason"] == "NoCapacity" and "has 0 of 4 GPUs free" in probe["west"]["message"], probe
    assert fleet.placement("fleet-untrusted")["status"] == placed["status"]
    assert fleet.fleet_status("fleet-untrusted")["cluster"] == "west"
    fleet.west.kubectl("delete", "gputenants.gputenant.io", "west-local", "--wait=false")


def test_a_cordoned_member_gets_no_new_tenant(fleet: Fleet):
    fleet.wait(lambda: west_report(fleet)["pools"][0]["granted"] == 1, "west-local gone from west's report", timeout=180)
    label_member(fleet.hub, "west", ARGOCD_NAMESPACE, f"{CORDON_LABEL}=true")
    fleet.commit("a team for the west region", {"fleet-late": tenant_file(
        "fleet-late", "Untrusted", 1, placement={"clusterSelector": {"matchLabels": {"region": "eu-west"}}},
        sleep={"asleep": True})})
    fleet.wait(lambda: "west: Cordoned" in fleet.fleet_status("fleet-late").get("message", ""),
               "fleet-late refused by the cordoned west", timeout=180)
    assert "east: NotSelected" in fleet.fleet_status("fleet-late")["message"]
    assert fleet.fleet_status("fleet-untrusted")["cluster"] == "west"
    label_member(fleet.hub, "west", ARGOCD_NAMESPACE, f"{CORDON_LABEL}-")
    fleet.wait(lambda: fleet.fleet_status("fleet-late").get("cluster") == "west", "fleet-late placed on the uncordoned west",
               timeout=120)


def test_moving_a_tenant_waits_for_its_old_member_then_places_it_afresh(fleet: Fleet):
    """docs/fleet.md, "Moving a tenant": its placement deleted, the ApplicationSet deletes its
    Application, whose deletion a platform engineer approves; meanwhile the hub shows it Moving and
    places it nowhere; once east no longer has it, it goes where it fits best now (west, with more
    MIG GPUs free than east)."""
    assert fleet.fleet_status("fleet-probe")["cluster"] == "east"
    fleet.hub.kubectl("delete", "gputenantplacements.gputenant.io", "-n", ARGOCD_NAMESPACE, "fleet-probe")
    fleet.wait(lambda: fleet.ready_on_hub("fleet-probe").get("reason") == "Moving", "fleet-probe Moving", timeout=60)
    assert fleet.fleet_status("fleet-probe")["cluster"] == "east"

    def approved_and_moved() -> bool:
        application = fleet.argocd.application("gputenant-fleet-probe")
        if application and application["metadata"].get("deletionTimestamp"):
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            fleet.hub.kubectl("annotate", "--overwrite", "-n", ARGOCD_NAMESPACE, "applications.argoproj.io",
                              "gputenant-fleet-probe", f"argocd.argoproj.io/deletion-approved={now}",
                              check=False)  # gone meanwhile: nothing left to approve
        return fleet.fleet_status("fleet-probe").get("cluster") == "west"
    fleet.wait(approved_and_moved, "fleet-probe offboarded on east and placed on west", timeout=240)
    assert fleet.east.cluster_object(GROUP, VERSION, "gputenants", "fleet-probe") is None
    fleet.wait(lambda: fleet.west.cluster_object(GROUP, VERSION, "gputenants", "fleet-probe"),
               "fleet-probe delivered to west", timeout=120)


def test_a_member_whose_api_server_stopped_shows_its_tenants_unknown_and_recovers(fleet: Fleet):
    before = fleet.placement("fleet-untrusted")["status"]
    with apiserver_stopped(fleet.west):
        fleet.wait(lambda: fleet.ready_on_hub("fleet-untrusted").get("reason") == "MemberUnreachable",
                   "fleet-untrusted Unknown on the hub", timeout=120)
        ready = fleet.ready_on_hub("fleet-untrusted")
        assert ready["status"] == "Unknown" and "member west" in ready["message"], ready
        assert fleet.fleet_status("fleet-untrusted")["cluster"] == "west"
        assert fleet.placement("fleet-untrusted")["status"] == before
    fleet.wait(lambda: fleet.ready_on_hub("fleet-untrusted").get("status") == "True",
               "fleet-untrusted Ready again on the hub", timeout=180)
    assert fleet.west.cluster_object(GROUP, VERSION, "gputenants", "fleet-untrusted") is not None


def test_a_tenant_removed_from_git_is_offboarded_on_its_member_with_nothing_left(fleet: Fleet):
    fleet.commit("fleet-untrusted leaves", {"fleet-untrusted": None})

    def approved_and_gone() -> bool:
        if fleet.on_hub("fleet-untrusted") is None:
            return True
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        fleet.argocd.annotate("gpu-tenants", {"argocd.argoproj.io/deletion-approved": now})
        return False
    fleet.wait(approved_and_gone, "fleet-untrusted pruned from the hub once approved, and offboarded on west")
    west = fleet.west
    assert west.cluster_object(GROUP, VERSION, "gputenants", "fleet-untrusted") is None
    assert "namespace/tenant-fleet-untrusted" not in west.kubectl("get", "namespaces", "-o", "name").stdout
    assert "fleet-untrusted" not in west.helm("list", "--all-namespaces", "--all", "-q").stdout.split()
    assert west.cluster_object("scheduling.run.ai", "v2", "queues", naming.queue_name("fleet-untrusted")) is None
    assert fleet.placement("fleet-untrusted") is None
    assert fleet.argocd.application("gputenant-fleet-untrusted") is None
    fleet.wait(lambda: "namespace/tenant-fleet-untrusted" not in fleet.hub.kubectl("get", "namespaces", "-o", "name").stdout,
               "the hub's namespace of fleet-untrusted's kubeconfig copies deleted", timeout=60)
    assert fleet.fleet_status("fleet-trusted")["cluster"] == "east"
    secret = fleet.hub.kubectl("get", "secret", "-n", "tenant-fleet-trusted", "fleet-trusted-kubeconfig-admin",
                               "-o", "jsonpath={.data.config}").stdout
    assert base64.b64decode(secret), "the remaining tenant's kubeconfig copy stays on the hub"
