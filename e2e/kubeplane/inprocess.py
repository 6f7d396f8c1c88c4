"""The in-process tier: the operator's own `Reconciler` and its cell's deletion path, driven in the test process
against the session's real API server, so every pipeline decision is asserted in seconds and
without a vCluster.

Everything the pipeline writes (namespace, quota, network policies, KAI Queue, RBAC, Secrets,
status, Events) goes to the real API server through the operator's real `KubeClient`. Only the two
edges that need a running vCluster are TEST DOUBLES behind the pipeline's ports
(`reconcile/ports.py`), and they record every call:

- `VClusterDouble` (the `Releases` port) stands in for the vCluster chart and its control plane.
  On `ensure` it writes what Helm and the chart would on the host: a Helm revision Secret
  (``owner=helm``), and the control plane's StatefulSet, whose pod the plane's real StatefulSet
  controller creates; it never runs (the plane has no node). `serve` makes it what a started
  control plane is: its pod Ready and its admin kubeconfig in ``vc-<release>``. `fail_with` makes
  its calls raise the `StepError` the real adapter makes of a Helm failure (`adapters.helm_step_error`).
- `IssuerDouble` (the `KubeconfigIssuer` port) stands in for the virtual cluster's TokenRequest
  API: tokens it makes up, or the failure it is told to raise, translated as the real adapter does
  (`adapters.issue_step_error`); `silence` is its answer to
  "does the vCluster API answer?".

The real-vCluster modules (test_vcluster_*, test_operator_lifecycle ...) keep covering the real
chart, Helm and tokens; this tier covers what the pipeline decides and writes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import yaml

from gputenant import KIND
from gputenant.cell import Cell
from gputenant.config.models import OperatorConfig
from gputenant.helm import HelmError
from gputenant.kube import ApiError, KubeClient
from gputenant.kubeconfigs import IssuedKubeconfig, KubeconfigIssueError
from gputenant.reconcile.adapters import helm_step_error, issue_step_error
from gputenant.reconcile.context import Outcome
from gputenant.reconcile.controlplane import POD_LABELS
from gputenant.reconcile.events import API_VERSION
from gputenant.reconcile.pipeline import Reconciler
from gputenant.reconcile.ports import StepError

from .fixtures import install_crds, install_kai_queue_crd
from .plane import ControlPlane
from .process import wait_for
from .tools import REPO_ROOT

T = TypeVar("T")
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")
QUEUE = ("scheduling.run.ai/v2", "Queue")
PREFIX = "ip-"
"""Every tenant of this tier is named so; the fixture offboards what a test left."""
OPERATOR_USER = "inprocess-operator"
"""The in-process operator's own user, so the audit log tells its requests apart."""
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"
"""The finalizer kopf puts on a resource it has a deletion handler for."""


@dataclass
class VClusterDouble:
    """TEST DOUBLE of the vCluster Helm release and its control plane (see the module docstring)."""

    client: KubeClient
    ca_pem: bytes
    calls: list[tuple] = field(default_factory=list)
    failure: StepError | None = None
    """Raised by every call while set: what the real adapter makes of a Helm failure."""
    revisions: dict[str, int] = field(default_factory=dict)

    def fail_with(self, error: HelmError) -> None:
        self.failure = helm_step_error(error)

    def ensure_calls(self, release: str) -> list[tuple]:
        return [call for call in self.calls if call[0] == "ensure" and call[1] == release]

    async def ensure(self, release: str, namespace: str, chart_version: str, values: dict,
                     known_absent: bool = False) -> str:
        self.calls.append(("ensure", release, namespace, chart_version, known_absent))
        if self.failure:
            raise self.failure
        revision = self.revisions.get(release, 0) + 1
        self.revisions[release] = revision
        await self.client.apply(revision_secret(release, namespace, revision))
        await self.client.apply(statefulset(release, namespace, values))
        return chart_version

    async def uninstall(self, release: str, namespace: str) -> None:
        self.calls.append(("uninstall", release, namespace))
        if self.failure:
            raise self.failure
        await self.client.delete("apps/v1", "StatefulSet", release, namespace)
        for secret in await self.client.list("v1", "Secret", namespace=namespace,
                                             label_selector=f"owner=helm,name={release}"):
            await self.client.delete("v1", "Secret", secret["metadata"]["name"], namespace)
        self.revisions.pop(release, None)

    async def serve(self, release: str, namespace: str, *, secret: bool = True) -> None:
        """The control plane started: its pods (the controller's) Ready, and, with `secret`, its
        admin kubeconfig written to ``vc-<release>``."""
        for pod in await self.pods(release, namespace):
            await self.client.patch("v1", "Pod", pod["metadata"]["name"], {"status": {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                                   {"type": "ContainersReady", "status": "True"}]}},
                namespace=namespace, subresource="status")
        if secret:
            await self.write_admin_secret(release, namespace, admin_kubeconfig(release, namespace, self.ca_pem))

    async def write_admin_secret(self, release: str, namespace: str, config: str) -> None:
        await self.client.apply({"apiVersion": "v1", "kind": "Secret",
                                 "metadata": {"name": f"vc-{release}", "namespace": namespace},
                                 "data": {"config": base64.b64encode(config.encode()).decode()}})

    async def pods(self, release: str, namespace: str) -> list[dict]:
        selector = ",".join(f"{k}={v}" for k, v in {**POD_LABELS, "release": release}.items())
        return await self.client.list("v1", "Pod", namespace=namespace, label_selector=selector)


@dataclass
class IssuerDouble:
    """TEST DOUBLE of the token kubeconfigs issued inside the virtual cluster."""

    calls: list[tuple] = field(default_factory=list)
    failure: KubeconfigIssueError | ValueError | None = None
    """Raised (as the real adapter translates it) by `issue` while set."""
    silence: str | None = None
    """What `unanswered` says: None, the vCluster API answers."""

    async def issue(self, tenant: str, roles: list[str], admin_kubeconfig: dict, server_url: str | None,
                    lifetime_seconds: int, revoke: list[str] | None = None) -> list[IssuedKubeconfig]:
        self.calls.append(("issue", tenant, tuple(roles), tuple(revoke or ())))
        if self.failure:
            raise issue_step_error(tenant, self.failure)
        server = server_url or admin_kubeconfig["clusters"][0]["cluster"]["server"]
        expires = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=lifetime_seconds)
        return [IssuedKubeconfig(role, token_kubeconfig(tenant, role, server, len(self.calls)), expires)
                for role in roles]

    async def bind_oidc_owners(self, tenant: str, admin_kubeconfig: dict, binding: dict | None) -> None:
        self.calls.append(("bind_oidc_owners", tenant, binding and tuple(s["name"] for s in binding["subjects"])))

    async def unanswered(self, admin_kubeconfig: dict) -> str | None:
        self.calls.append(("unanswered",))
        return self.silence


def revision_secret(release: str, namespace: str, revision: int) -> dict:
    """What Helm stores per release revision (the labels the operator reads; no release payload)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": f"sh.helm.release.v1.{release}.v{revision}", "namespace": namespace,
                         "labels": {"owner": "helm", "name": release, "status": "deployed",
                                    "version": str(revision)}}}


def statefulset(release: str, namespace: str, values: dict) -> dict:
    """The chart's control-plane StatefulSet, reduced to what the operator reads: its replicas, pod
    labels and a pod template that changes with the values (the chart hashes them into it)."""
    control_plane = values.get("controlPlane") or {}
    sts = control_plane.get("statefulSet") or {}
    replicas = (sts.get("highAvailability") or {}).get("replicas", 1)
    security = sts.get("security") or {}
    labels = {**POD_LABELS, "release": release}
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": release, "namespace": namespace},
        "spec": {"replicas": replicas, "serviceName": release, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels, "annotations": {"vClusterConfigHash": digest}},
                              "spec": {"automountServiceAccountToken": False,
                                       "securityContext": security.get("podSecurityContext") or {},
                                       "containers": [{"name": "syncer", "image": "loft-sh/vcluster-oss",
                                                       "resources": sts.get("resources") or {},
                                                       "securityContext":
                                                           security.get("containerSecurityContext") or {}}]}}}}


def admin_kubeconfig(release: str, namespace: str, ca_pem: bytes) -> str:
    """The admin kubeconfig vCluster writes, at its in-cluster Service address."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": release,
        "clusters": [{"name": release, "cluster": {
            "server": f"https://{release}.{namespace}:443",
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": release, "user": {"token": "admin-token-of-the-double"}}],
        "contexts": [{"name": release, "context": {"cluster": release, "user": release}}]})


def token_kubeconfig(tenant: str, role: str, server: str, serial: int) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": tenant,
        "clusters": [{"name": tenant, "cluster": {"server": server}}],
        "users": [{"name": role, "user": {"token": f"double-{tenant}-{role}-{serial}"}}],
        "contexts": [{"name": tenant, "context": {"cluster": tenant, "user": role}}]})


class InProcessOperator:
    """The reconciler of `gputenant run`, built as cell.build_cell builds it but with the two
    doubles, on one event loop of its own (the clients' HTTP sessions belong to it)."""

    def __init__(self, plane: ControlPlane, config: OperatorConfig):
        self.plane = plane
        self.config = config
        self.loop = asyncio.new_event_loop()
        kubeconfig = str(plane.user(OPERATOR_USER, groups=["system:masters"]))
        self.client = KubeClient.from_kubeconfig(kubeconfig, config.field_manager)
        self.chart_client = KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "helm-test-double")
        self.platform = KubeClient.from_kubeconfig(str(plane.kubeconfig_path), "platform-engineer")
        self.releases = VClusterDouble(self.chart_client, plane.ca_pem)
        self.issuer = IssuerDouble()
        self.reconciler = Reconciler(self.client, config, self.releases, self.issuer)
        self.cell = Cell(config=config, client=self.client, reconciler=self.reconciler, resync_seconds=60,
                         deletion_retry_seconds=3)
        """The cell of `gputenant run` around that reconciler: its deletion path is the one the
        tests drive (`offboard`)."""

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        for client in (self.client, self.chart_client, self.platform):
            self.run(client.close())
        self.loop.close()

    # -- the platform engineer's side -------------------------------------------------------------

    def apply(self, manifest: dict) -> dict:
        return self.run(self.platform.apply(manifest))

    def annotate(self, name: str, annotations: dict[str, str | None]) -> None:
        self.run(self.platform.patch(API_VERSION, KIND, name, {"metadata": {"annotations": annotations}}))

    def tenant(self, name: str) -> dict | None:
        return self.run(self.platform.get(API_VERSION, KIND, name))

    def namespace(self, name: str) -> str:
        return self.config.namespace_prefix + name

    def condition(self, name: str, condition_type: str) -> dict:
        body = self.tenant(name) or {}
        return next((c for c in (body.get("status") or {}).get("conditions") or []
                     if c["type"] == condition_type), {})

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self.run(self.platform.get(api_version, kind, name, namespace))

    def assert_condition(self, name: str, condition_type: str, status: str, reason: str) -> dict:
        """The condition as the API server holds it, set at the tenant's current generation."""
        body = self.tenant(name)
        assert body is not None, f"tenant {name} does not exist"
        found = self.condition(name, condition_type)
        assert (found.get("status"), found.get("reason")) == (status, reason), found or body.get("status")
        assert found["observedGeneration"] == body["metadata"]["generation"], found
        assert body["status"]["observedGeneration"] == body["metadata"]["generation"], body["status"]
        return found

    def served(self, api_version: str, kind: str) -> bool:
        """A fresh CRD answers 429 while its storage initialises."""
        try:
            self.run(self.platform.list(api_version, kind))
        except ApiError:
            return False
        return True

    # -- the operator's side ----------------------------------------------------------------------

    def reconcile(self, name: str, *, recheck: bool = False) -> Outcome:
        """One pass, as kopf's create/update/resync handlers run it (`recheck`: as the operator's
        look again at a waiting tenant runs it), on the tenant as it is now."""
        body = self.tenant(name)
        assert body is not None, f"tenant {name} does not exist"
        return self.run(self.reconciler.reconcile(body, recheck=recheck))

    def serve(self, name: str, *, secret: bool = True) -> None:
        namespace = self.config.namespace_prefix + name
        self.run(self.releases.serve(name, namespace, secret=secret))

    def wait_for_pods(self, name: str, timeout: float = 30) -> list[dict]:
        """The control plane's pods, once the StatefulSet controller has made them (none before
        `timeout`: an AssertionError)."""
        namespace = self.config.namespace_prefix + name
        for _ in range(int(timeout * 10)):
            if pods := self.run(self.releases.pods(name, namespace)):
                return pods
            self.run(asyncio.sleep(0.1))
        raise AssertionError(f"no control-plane pod of {name}: {self.condition(name, 'VClusterReady')}")

    def ready(self, name: str) -> dict:
        """Reconcile, starting whatever control-plane pod the StatefulSet controller made, until Ready
        (a rollout replaces the pod: each new one is started too)."""
        for _ in range(100):
            if self.reconcile(name).ready:
                body = self.tenant(name)
                assert body is not None
                return body
            self.serve(name)
            self.run(asyncio.sleep(0.2))
        raise AssertionError(f"tenant {name} not Ready: {(self.tenant(name) or {}).get('status')}")

    def ready_but(self, name: str, condition_type: str) -> Outcome:
        """Reconcile, starting the control plane, until `condition_type` is False; that pass's outcome."""
        for _ in range(100):
            outcome = self.reconcile(name)
            if self.condition(name, condition_type).get("status") == "False":
                return outcome
            self.serve(name)
            self.run(asyncio.sleep(0.2))
        raise AssertionError(f"tenant {name}: {condition_type} never False: {(self.tenant(name) or {}).get('status')}")

    def until(self, name: str, done: Callable[[], bool], passes: int = 100) -> Outcome:
        """Reconcile (0.2 s apart) until `done()`; the last pass's outcome."""
        for _ in range(passes):
            outcome = self.reconcile(name)
            if done():
                return outcome
            self.run(asyncio.sleep(0.2))
        raise AssertionError(f"tenant {name}: not done after {passes} passes: {(self.tenant(name) or {}).get('status')}")

    def writes(self) -> int:
        """Requests that write, sent by the operator's client so far."""
        return self.client.counters.writes

    def delete(self, name: str, *, finish: bool = True) -> None:
        """Delete the tenant as kopf's deletion handler does: with its finalizer held, offboard,
        then release the finalizer; `finish` False leaves the offboarding to the caller."""
        body = self.tenant(name)
        if body is None:
            return
        if body["metadata"].get("deletionTimestamp"):
            if finish:
                self.offboard(name)
            return
        if KOPF_FINALIZER not in (body["metadata"].get("finalizers") or []):
            self.run(self.platform.patch(API_VERSION, KIND, name, {"metadata": {"finalizers": [KOPF_FINALIZER]}}))
        self.run(self.platform.delete(API_VERSION, KIND, name))
        if finish:
            self.offboard(name)

    async def remove_leftovers(self) -> None:
        """Every ``ip-...`` tenant and host namespace, deleted without waiting: the garbage collector
        takes what they own (the Queue), the namespace controller their content. The tests that
        assert offboarding drive it themselves; doing it here for each tenant took minutes."""
        for tenant in await self.platform.list(API_VERSION, KIND):
            name = tenant["metadata"]["name"]
            if name.startswith(PREFIX):
                await self.platform.patch(API_VERSION, KIND, name, {"metadata": {"finalizers": None}})
                await self.platform.delete(API_VERSION, KIND, name)
        for namespace in await self.platform.list("v1", "Namespace"):
            if namespace["metadata"]["name"].startswith(self.config.namespace_prefix + PREFIX):
                await self.platform.delete("v1", "Namespace", namespace["metadata"]["name"])

    def offboard(self, name: str) -> None:
        """The cell's deletion path, as kopf's deletion handler runs it, then the finalizer released
        as kopf releases it once the handler succeeded."""
        body = self.tenant(name)
        assert body is not None and body["metadata"].get("deletionTimestamp"), f"tenant {name} is not being deleted"
        self.run(self.cell.offboard(body))
        self.run(self.platform.patch(API_VERSION, KIND, name, {"metadata": {"finalizers": None}}))


def labelled_objects(plane: ControlPlane, name: str) -> list[str]:
    """Every object, of every kind the API serves (namespaced and cluster-scoped), that still
    carries the tenant's label."""
    kinds = plane.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    result = plane.kubectl("get", ",".join(kinds), "-A", "-l", f"gputenant.io/tenant={name}", "-o", "name")
    return [line for line in result.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def inprocess(plane: ControlPlane) -> Iterator[InProcessOperator]:
    """The in-process operator on the session's plane (examples/config.yaml); what a module's tenants
    (named ``ip-...``) left is removed when it ends."""
    install_crds(plane, REPO_ROOT / "crds" / "tenant.yaml")
    install_kai_queue_crd(plane)
    running = InProcessOperator(plane, CONFIG)
    wait_for(lambda: running.served(*QUEUE), timeout=30, interval=0.2, what="the Queue CRD served")
    yield running
    running.run(running.remove_leftovers())
    running.close()


@pytest.fixture
def op(inprocess: InProcessOperator) -> InProcessOperator:
    """`inprocess` with its doubles answering normally again."""
    inprocess.releases.failure = inprocess.issuer.failure = inprocess.issuer.silence = None
    return inprocess
