"""One idempotent pipeline for create, resume, update and the drift timer.

spec -> validated model -> policy decision -> rendered objects -> applied state -> status.
Each step sets its condition; a step that fails stops the steps after it (they keep their last
condition). Writes happen only where the live state differs, and status is patched only when it
changed, so a resync of an unchanged tenant writes nothing.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional

import yaml
from pydantic import ValidationError

from gputenant import GROUP, KIND, VERSION, naming
from gputenant.api.fieldpath import validation_problems
from gputenant.api.v1alpha1 import ArgoCDSpec, GpuTenant
from gputenant.argocd import cluster_secret
from gputenant.config.models import OperatorConfig
from gputenant.helm.versions import values_hash
from gputenant.kube import ApiError, Applier, KubeClient, LiveSnapshot, holds
from gputenant.kube.applier import object_key
from gputenant.kubeconfigs import ARGOCD_ROLE, IssuedKubeconfig, kubeconfig_secret, needs_rotation
from gputenant.policy.decision import Decision
from gputenant.reconcile import conditions as cond
from gputenant.reconcile.ports import KubeconfigIssuer, Releases, StepError

log = logging.getLogger(__name__)

API_VERSION = f"{GROUP}/{VERSION}"
ROTATION_ANNOTATION = f"{GROUP}/rotation"
"""On each token Secret: the rotate-kubeconfigs request it was issued for."""
SERVER_ANNOTATION = f"{GROUP}/server"
"""On each token Secret: the server URL it was issued for (a new URL re-issues it)."""
WAIT_FOR_CONTROL_PLANE_SECONDS = 5.0

STAGES: tuple[tuple[str, frozenset[str]], ...] = (
    ("NamespaceReady", frozenset({"Namespace"})),
    ("QuotaReady", frozenset({"ResourceQuota", "LimitRange"})),
    ("RBACReady", frozenset({"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"})),
    ("NetworkReady", frozenset({"NetworkPolicy"})),
    ("QueueReady", frozenset({"Queue"})),
)
SHARING_STAGE = "SharingReady"
"""Every other rendered kind (device-plugin config, admission policy bindings) belongs to sharing."""


def now_rfc3339(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_duration(text: str, field_name: str = "spec.kubeconfig.tokenLifetime") -> timedelta:
    """'24h', '90m', '1h30m' -> timedelta; a clear error naming the field otherwise."""
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text.strip())
    if not text.strip() or not match:
        raise ValueError(f"{field_name}: {text!r} is not a duration; write e.g. 24h, 90m or 1h30m")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds)


def stage_of(kind: str) -> str:
    return next((name for name, kinds in STAGES if kind in kinds), SHARING_STAGE)


def not_applied(stage: str, decision: Decision) -> tuple[str, str]:
    """(reason, message) of a stage the renderer gave no objects: the policy's reason when the
    decision is impossible (the stage is withheld because of it), else NotApplied."""
    if not decision.possible:
        return decision.reason, f"nothing applied while the sharing policy is impossible: {decision.message}"
    return "NotApplied", f"the renderer produced no objects for {stage}"


def parse_timestamp(text: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 timestamp as written by `now_rfc3339`, or None when absent or unreadable (which
    makes the token count as due for rotation)."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) if text else None
    except ValueError:
        return None


def issue_reason(live: Optional[dict], lifetime: timedelta, now: datetime, rotation: str,
                 server: Optional[str]) -> Optional[str]:
    """Why the token Secret `live` must be issued again, or None while it is still good:
    missing, requested (the rotate annotation changed), server changed, or due (80% of the
    lifetime passed, `kubeconfigs.needs_rotation`)."""
    if live is None or not (live.get("data") or {}):
        return "missing"
    annotations = live["metadata"].get("annotations") or {}
    if annotations.get(ROTATION_ANNOTATION, "") != rotation:
        return "requested"
    if annotations.get(SERVER_ANNOTATION) != server:
        return "server changed"
    expires_at = parse_timestamp(annotations.get(naming.KUBECONFIG_EXPIRES_ANNOTATION))
    return "due" if needs_rotation(expires_at, now, lifetime) else None


@dataclass
class Outcome:
    """What the caller (kopf) should do next."""

    ready: bool = False
    retry_after: Optional[float] = None
    """Seconds until the next attempt; None: nothing pending (done, or stopped until spec changes)."""
    permanent_failure: Optional[str] = None
    applied: list = field(default_factory=list)
    status_written: bool = False
    helm_calls: int = 0


def owner_reference(body: dict) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def adopt(obj: dict, body: dict, host_namespace: str) -> dict:
    """Our labels and an ownerRef to the tenant, set explicitly (never copied from the tenant).

    Objects in other namespaces that the renderer did not label for this tenant are shared
    (e.g. one device-plugin ConfigMap for all tenants) and are left unowned.
    """
    tenant = body["metadata"]["name"]
    metadata = dict(obj.get("metadata") or {})
    labels = dict(metadata.get("labels") or {})
    namespace = metadata.get("namespace")
    ours = labels.get(naming.TENANT_LABEL, tenant) == tenant and namespace in (None, host_namespace)
    if not ours:
        return obj
    component = labels.get(naming.COMPONENT_LABEL) or obj["kind"].lower()
    metadata["labels"] = {**labels, **naming.tenant_labels(tenant, component)}
    others = [ref for ref in metadata.get("ownerReferences") or [] if ref.get("kind") != KIND]
    metadata["ownerReferences"] = [*others, owner_reference(body)]
    return {**obj, "metadata": metadata}


def operator_access_binding(config: OperatorConfig, host_namespace: str) -> Optional[dict]:
    """The RoleBinding that gives the operator's ServiceAccount `config.tenant_namespace_cluster_role`
    in one host namespace (its only namespaced rights there, with the Helm chart's RBAC); None when
    the config names no such role (an operator with cluster-wide rights)."""
    if not config.tenant_namespace_cluster_role:
        return None
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": naming.OPERATOR_ACCESS_BINDING_NAME, "namespace": host_namespace,
                     "labels": {naming.COMPONENT_LABEL: naming.OPERATOR_ACCESS_COMPONENT}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": config.tenant_namespace_cluster_role},
        "subjects": [{"kind": "ServiceAccount", "name": config.operator_service_account,
                      "namespace": config.operator_namespace}],
    }


def argocd_namespaces(body: dict) -> list[str]:
    """Where the tenant's Argo CD cluster Secret may be: spec.argocd.namespace while registration is
    enabled, and the same for the last spec kopf handled, so a moved or disabled registration is
    found and removed. The operator may list Secrets only in namespaces it is granted, so it never
    lists them cluster-wide."""
    annotation = ((body.get("metadata") or {}).get("annotations") or {}).get(naming.LAST_HANDLED_ANNOTATION)
    try:
        last_handled = (json.loads(annotation) or {}).get("spec") or {} if annotation else {}
    except (ValueError, AttributeError):
        last_handled = {}
    found = set()
    for spec in (body.get("spec") or {}, last_handled):
        try:
            argocd = ArgoCDSpec.model_validate(spec.get("argocd") or {})
        except ValidationError:
            continue
        if argocd.enabled:
            found.add(argocd.namespace)
    return sorted(found)


class Reconciler:
    """Runs the pipeline for one tenant body at a time; safe to call again at any point."""

    def __init__(self, client: KubeClient, config: OperatorConfig, releases: Releases,
                 issuer: KubeconfigIssuer, *, decide: Callable | None = None,
                 render: Callable | None = None, clock: Callable[[], datetime] | None = None):
        self.client = client
        self.config = config
        self.releases = releases
        self.issuer = issuer
        self._decide = decide
        self._render = render
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self._helm_stopped: dict[str, int] = {}
        """Tenants whose Helm step failed permanently, by generation: no Helm call until it changes."""

    def decide(self, name, spec):
        if self._decide is None:
            from gputenant.policy.choose import decide
            self._decide = decide
        return self._decide(name, spec, self.config)

    def render(self, tenant, decision):
        if self._render is None:
            from gputenant.render import render_tenant
            self._render = render_tenant
        return self._render(tenant, decision, self.config)

    async def reconcile(self, body: dict, retry: int = 0) -> Outcome:
        """Run the pipeline; `retry` counts earlier failed attempts (for the backoff)."""
        try:
            body = await self.with_current_status(body)
        except ApiError as error:
            log.warning("tenant %s: reading its current status failed, using the event's: %s",
                        body["metadata"]["name"], error)
        run = _Run(self, body, retry)
        try:
            await run.pipeline()
        except StepError as error:
            run.fail(run.current_stage, error.reason, error.message, error.transient)
        except ApiError as error:
            reason = "ApiUnavailable" if error.transient else "ApplyRejected"
            run.fail(run.current_stage, reason, str(error), error.transient)
        await run.finish()
        return run.outcome


    async def with_current_status(self, body: dict) -> dict:
        """`body` with the tenant's live status. kopf hands a retry or a timer a body that can be older
        than the status the previous pass wrote; trusting it repeated the Helm check (3 helm
        processes), every condition's Event and the status patch for each new tenant
        (docs/performance.md, hot spot 1). One GET is cheaper than any of those."""
        live = await self.client.get(API_VERSION, KIND, body["metadata"]["name"])
        if live is None or live["metadata"].get("uid") != body["metadata"].get("uid"):
            return body
        return {**body, "status": live.get("status") or {}}


class _Run:
    """The state of one pipeline run."""

    def __init__(self, reconciler: Reconciler, body: dict, retry: int):
        self.r = reconciler
        self.retry = retry
        self.body = body
        self.name = body["metadata"]["name"]
        self.generation = body["metadata"].get("generation")
        self.old_status = dict(body.get("status") or {})
        self.conditions = [dict(c) for c in self.old_status.get("conditions") or []]
        self.status: dict[str, Any] = {
            key: self.old_status[key] for key in ("namespace", "sharing", "granted", "vcluster", "kubeconfigs")
            if key in self.old_status}
        self.now = reconciler.clock()
        self.outcome = Outcome()
        self.current_stage = "NamespaceReady"
        self.host_namespace = naming.host_namespace(self.name, reconciler.config)
        self.snapshot = LiveSnapshot(reconciler.client, f"{naming.TENANT_LABEL}={self.name}")
        self.applier = Applier(reconciler.client, self.snapshot)
        self.rotated: list[tuple[str, str, str, str]] = []
        """Token Secrets re-issued on schedule or request: applied, but not drift."""

    # -- conditions -----------------------------------------------------------------------------

    def set(self, condition_type: str, ok: bool | None, reason: str, message: str) -> None:
        status = {True: "True", False: "False", None: "Unknown"}[ok]
        self.conditions = cond.set_condition(self.conditions, condition_type, status, reason, message,
                                             self.generation, now_rfc3339(self.now))

    def fail(self, stage: str, reason: str, message: str, transient: bool) -> None:
        self.set(stage, False, reason, message)
        if transient:
            self.outcome.retry_after = min(300.0, 5.0 * 2 ** min(self.retry, 6))
        else:
            self.outcome.permanent_failure = reason

    # -- the pipeline ---------------------------------------------------------------------------

    async def pipeline(self) -> None:
        try:
            tenant = GpuTenant.from_body(self.body)
            lifetime = parse_duration(tenant.spec.kubeconfig.token_lifetime)
        except (ValidationError, ValueError) as error:
            raise StepError("InvalidSpec", _validation_message(error), transient=False) from None
        self.tenant = tenant
        decision = self.r.decide(self.name, tenant.spec)
        rendered = self.r.render(tenant, decision)
        self.status["namespace"] = self.host_namespace
        self.status["sharing"] = _drop_none({
            "mode": decision.mode.value if decision.mode else None,
            "pool": decision.pool.name if decision.pool else None, "reason": decision.message})
        queue = decision.queue
        self.status["granted"] = _drop_none({
            "resources": dict(decision.quota),
            "queue": _drop_none({"name": queue.name, "parent": queue.parent, "quota": queue.quota,
                                 "limit": queue.limit, "overQuotaWeight": queue.over_quota_weight,
                                 "priority": queue.priority}) if queue else None})

        objects = [adopt(obj, self.body, self.host_namespace) for obj in rendered.objects]
        by_stage: dict[str, list[dict]] = {}
        for obj in objects:
            by_stage.setdefault(stage_of(obj["kind"]), []).append(obj)
        for stage, _ in STAGES:
            if by_stage.get(stage):
                await self.apply_stage(stage, by_stage[stage])
                if stage == "NamespaceReady":
                    await self.ensure_operator_access()
            else:
                self.set(stage, False, *not_applied(stage, decision))
        if not decision.possible:
            self.set(SHARING_STAGE, False, decision.reason, decision.message)
            self.outcome.permanent_failure = decision.reason
            return
        await self.apply_stage(SHARING_STAGE, by_stage.get(SHARING_STAGE, []),
                               message=decision.message, reason=decision.reason)

        self.current_stage = "VClusterReady"
        admin_kubeconfig = await self.ensure_vcluster(rendered.vcluster_values)
        if admin_kubeconfig is None:
            return
        self.current_stage = "KubeconfigReady"
        await self.ensure_kubeconfigs(admin_kubeconfig, lifetime)
        self.current_stage = "ArgoCDReady"
        await self.ensure_argocd(admin_kubeconfig, lifetime)

    async def apply_stage(self, stage: str, objects: list[dict], *, reason: str = "Applied",
                          message: str = "") -> None:
        self.current_stage = stage
        for obj in objects:
            await self.applier.ensure(obj)
        names = ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objects)
        self.set(stage, True, reason, message or f"in place: {names}")

    async def ensure_operator_access(self) -> None:
        """The operator's RoleBinding in the new host namespace, before anything else is written
        there. Read with GET: a namespaced LIST needs the very rights this binding grants."""
        binding = operator_access_binding(self.r.config, self.host_namespace)
        if binding is None:
            return
        binding = adopt(binding, self.body, self.host_namespace)
        metadata = binding["metadata"]
        live = await self.r.client.get(binding["apiVersion"], binding["kind"], metadata["name"], metadata["namespace"])
        if not holds(binding, live):
            await self.r.client.apply(binding)
            self.applier.result.applied.append(object_key(binding))

    # -- vCluster -------------------------------------------------------------------------------

    async def ensure_vcluster(self, values: dict) -> Optional[dict]:
        """Helm install/upgrade only when the values hash changed or the release is missing;
        then the admin kubeconfig from ``vc-<release>``, or None while the control plane starts."""
        spec = self.tenant.spec.vcluster
        release = naming.release_name(self.name)
        chart_version = spec.chart_version or self.r.config.vcluster.version
        wanted_hash = values_hash(values, chart_version)
        recorded = self.old_status.get("vcluster") or {}
        stopped = self.r._helm_stopped.get(self.name) == self.generation
        if stopped:
            raise StepError(self._last_reason("VClusterReady", "HelmFailed"),
                            self._last_message("VClusterReady"), transient=False)
        revisions = await self.release_revisions(release)
        if recorded.get("valuesHash") == wanted_hash and any(_deployed(s) for s in revisions):
            installed = recorded.get("chartVersion") or chart_version
        else:
            self.outcome.helm_calls += 1
            try:
                installed = await self.r.releases.ensure(release, self.host_namespace, chart_version, values,
                                                         known_absent=not revisions)
            except StepError as error:
                if not error.transient:
                    self.r._helm_stopped[self.name] = self.generation
                raise
        self.status["vcluster"] = _drop_none({
            "release": release, "chartVersion": installed, "valuesHash": wanted_hash,
            "endpoint": recorded.get("endpoint")})
        secret = await self.r.client.get("v1", "Secret", naming.vcluster_secret_name(self.name),
                                         self.host_namespace)
        encoded = (secret or {}).get("data", {}).get("config")
        if not encoded:
            self.set("VClusterReady", False, "WaitingForControlPlane",
                     f"release {release} ({installed}) installed; waiting for its control plane to "
                     f"write Secret {self.host_namespace}/{naming.vcluster_secret_name(self.name)}")
            self.outcome.retry_after = WAIT_FOR_CONTROL_PLANE_SECONDS
            return None
        admin_kubeconfig = yaml.safe_load(base64.b64decode(encoded))
        endpoint = spec.server_url or _server_of(admin_kubeconfig)
        self.status["vcluster"]["endpoint"] = endpoint
        self.set("VClusterReady", True, "ControlPlaneUp", f"release {release} ({installed}) serves at {endpoint}")
        return admin_kubeconfig

    async def release_revisions(self, release: str) -> list[dict]:
        """Helm keeps each release revision in a Secret labelled owner=helm; reading them costs no
        Helm call, and none at all tells Helm it need not look for the release itself."""
        return await self.r.client.list("v1", "Secret", namespace=self.host_namespace,
                                        label_selector=f"owner=helm,name={release}")

    # -- kubeconfigs ----------------------------------------------------------------------------

    def rotation_request(self) -> str:
        return (self.body["metadata"].get("annotations") or {}).get(naming.ROTATE_ANNOTATION, "")

    async def live_secret(self, name: str, namespace: str) -> Optional[dict]:
        return await self.applier.live({"apiVersion": "v1", "kind": "Secret",
                                        "metadata": {"name": name, "namespace": namespace}})

    def token_annotations(self, issued: IssuedKubeconfig, server: Optional[str]) -> dict[str, str]:
        return {naming.KUBECONFIG_EXPIRES_ANNOTATION: now_rfc3339(issued.expires_at),
                ROTATION_ANNOTATION: self.rotation_request(), SERVER_ANNOTATION: server or ""}

    async def ensure_kubeconfigs(self, admin_kubeconfig: dict, lifetime: timedelta) -> None:
        """Issue the kubeconfigs that are missing, requested or due; keep the others untouched."""
        spec = self.tenant.spec
        server = spec.vcluster.server_url or _server_of(admin_kubeconfig)
        roles = [role.value for role in spec.kubeconfig.roles]
        live = {role: await self.live_secret(naming.kubeconfig_secret_name(self.name, role), self.host_namespace)
                for role in roles}
        reasons = {role: issue_reason(live[role], lifetime, self.now, self.rotation_request(), server)
                   for role in roles}
        due = [role for role in roles if reasons[role]]
        issued = await self.r.issuer.issue(self.name, due, admin_kubeconfig, spec.vcluster.server_url,
                                           int(lifetime.total_seconds())) if due else []
        for kubeconfig in issued:
            secret = kubeconfig_secret(self.name, kubeconfig.role, self.host_namespace, kubeconfig)
            secret["metadata"]["annotations"] = self.token_annotations(kubeconfig, server)
            live[kubeconfig.role] = await self.applier.ensure(adopt(secret, self.body, self.host_namespace))
            if reasons[kubeconfig.role] != "missing":
                self.rotated.append(object_key(secret))
        entries = [{"role": role, "secretName": naming.kubeconfig_secret_name(self.name, role),
                    "expiresAt": live[role]["metadata"]["annotations"][naming.KUBECONFIG_EXPIRES_ANNOTATION]}
                   for role in roles]
        await self.remove_unwanted_kubeconfigs({e["secretName"] for e in entries})
        self.status["kubeconfigs"] = entries
        if due:
            await self.event("Normal", "KubeconfigIssued", "issued kubeconfigs: " + ", ".join(
                f"{role} ({reasons[role]})" for role in due))
        soonest = min(e["expiresAt"] for e in entries) if entries else "-"
        self.set("KubeconfigReady", True, "Issued",
                 f"{len(entries)} kubeconfig(s) in {self.host_namespace}; earliest expiry {soonest}")

    # -- Argo CD --------------------------------------------------------------------------------

    async def ensure_argocd(self, admin_kubeconfig: dict, lifetime: timedelta) -> None:
        """The Argo CD cluster Secret with a token of Argo CD's own ServiceAccount in the virtual
        cluster, issued and rotated like the kubeconfigs; removed when disabled or moved."""
        argocd = self.tenant.spec.argocd
        name = naming.argocd_secret_name(self.name)
        wanted = (argocd.namespace, name) if argocd.enabled else None
        await self.remove_argocd_secrets(keep=wanted)
        if not argocd.enabled:
            self.set("ArgoCDReady", True, "NotRequested", "spec.argocd.enabled is false; no cluster Secret")
            return
        if await self.r.client.get("v1", "Namespace", argocd.namespace) is None:
            raise StepError("ArgoCDNamespaceMissing", f"namespace {argocd.namespace} (spec.argocd.namespace) does "
                            "not exist; install Argo CD there or set spec.argocd.namespace", transient=True)
        server = self.tenant.spec.vcluster.server_url or _server_of(admin_kubeconfig)
        live = await self.live_secret(name, argocd.namespace)
        reason = issue_reason(live, lifetime, self.now, self.rotation_request(), server)
        if reason:
            [issued] = await self.r.issuer.issue(self.name, [ARGOCD_ROLE], admin_kubeconfig, server,
                                                 int(lifetime.total_seconds()))
            token = yaml.safe_load(issued.kubeconfig_yaml)["users"][0]["user"]["token"]
            annotations = self.token_annotations(issued, server)
        else:
            config = json.loads(base64.b64decode(live["data"]["config"]))
            token = config["bearerToken"]
            annotations = {key: live["metadata"]["annotations"].get(key, "") for key in (
                naming.KUBECONFIG_EXPIRES_ANNOTATION, ROTATION_ANNOTATION, SERVER_ANNOTATION)}
        ca = base64.b64decode(admin_kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])
        secret = cluster_secret(self.name, argocd.namespace, server, ca, token, project=argocd.project)
        secret["metadata"]["annotations"] = annotations
        await self.applier.ensure(secret)
        if reason and reason != "missing":
            self.rotated.append(object_key(secret))
        if reason:
            await self.event("Normal", "ArgoCDTokenIssued", f"Argo CD cluster Secret {argocd.namespace}/{name}: "
                             f"token issued ({reason})")
        self.set("ArgoCDReady", True, "Registered", f"cluster Secret {argocd.namespace}/{name} for {server}; "
                 f"token expires {annotations[naming.KUBECONFIG_EXPIRES_ANNOTATION]}")

    async def remove_argocd_secrets(self, keep: Optional[tuple[str, str]]) -> None:
        """Delete the tenant's Argo CD cluster Secrets other than `keep` (namespace, name). A
        namespace the operator may not list Secrets in (other than the wanted one, whose refusal
        is the step's error) cannot hold one: it could not have been written there."""
        for namespace in sorted({self.host_namespace, *argocd_namespaces(self.body)}):
            try:
                secrets = await self.snapshot.items("v1", "Secret", namespace)
            except ApiError as error:
                if error.forbidden and (keep is None or namespace != keep[0]):
                    continue
                raise
            for secret in secrets:
                metadata = secret["metadata"]
                if (metadata.get("labels") or {}).get(naming.COMPONENT_LABEL) != "argocd":
                    continue
                if (namespace, metadata["name"]) != keep:
                    await self.r.client.delete("v1", "Secret", metadata["name"], namespace)

    async def remove_unwanted_kubeconfigs(self, wanted: set[str]) -> None:
        for secret in await self.snapshot.items("v1", "Secret", self.host_namespace):
            labels = secret["metadata"].get("labels", {})
            name = secret["metadata"]["name"]
            if labels.get(naming.COMPONENT_LABEL) == "kubeconfig" and name not in wanted:
                await self.r.client.delete("v1", "Secret", name, secret["metadata"].get("namespace"))

    # -- status ---------------------------------------------------------------------------------

    async def finish(self) -> None:
        ready_status, reason, message = cond.summarise_ready(self.conditions)
        self.set(cond.READY, {"True": True, "False": False, "Unknown": None}[ready_status], reason, message)
        self.outcome.ready = ready_status == "True"
        self.outcome.applied = list(self.applier.result.applied)
        new_status = {**self.status, "observedGeneration": self.generation,
                      "conditions": cond.ordered(self.conditions)}
        drifted = [key for key in self.outcome.applied if key not in self.rotated]
        if drifted and self.was_ready_at_this_generation():
            await self.event("Warning", "DriftRepaired", "re-applied objects that were changed or deleted: "
                             + ", ".join(f"{k}/{n}" for _, k, _, n in drifted))
        for condition in new_status["conditions"]:
            before = cond.find(self.old_status.get("conditions") or [], condition["type"])
            if before is None or before["status"] != condition["status"] or before["reason"] != condition["reason"]:
                kind = "Normal" if condition["status"] == "True" else "Warning"
                await self.event(kind, condition["reason"], f"{condition['type']}={condition['status']}: "
                                 f"{condition['message']}")
        if _comparable(new_status) != _comparable(self.old_status):
            await self.r.client.patch_status(API_VERSION, KIND, self.name, new_status)
            self.outcome.status_written = True

    def was_ready_at_this_generation(self) -> bool:
        ready = cond.find(self.old_status.get("conditions") or [], cond.READY)
        return bool(ready and ready["status"] == "True" and self.old_status.get("observedGeneration") == self.generation)

    async def event(self, event_type: str, reason: str, message: str) -> None:
        """Events are best effort: a failure to post one never fails the reconcile."""
        try:
            await self.r.client.post_event({**self.body, "apiVersion": API_VERSION, "kind": KIND},
                                           event_type, reason, message, now_rfc3339(self.now))
        except ApiError as error:
            log.warning("tenant %s: could not post event %s: %s", self.name, reason, error)

    def _last_reason(self, condition_type: str, default: str) -> str:
        found = cond.find(self.conditions, condition_type)
        return found["reason"] if found and found["status"] == "False" else default

    def _last_message(self, condition_type: str) -> str:
        found = cond.find(self.conditions, condition_type)
        return found["message"] if found else "the Helm release failed; change the spec to retry"


def _comparable(status: dict) -> str:
    return json.dumps({k: v for k, v in status.items() if v is not None}, sort_keys=True, default=str)


def _deployed(helm_release_secret: dict) -> bool:
    return helm_release_secret["metadata"].get("labels", {}).get("status") == "deployed"


def _drop_none(mapping: dict) -> dict:
    return {key: value for key, value in mapping.items() if value is not None}


def _server_of(kubeconfig: dict) -> Optional[str]:
    clusters = kubeconfig.get("clusters") or []
    return clusters[0]["cluster"]["server"] if clusters else None


def _validation_message(error: Exception) -> str:
    """Each problem with the field path it is at, e.g. 'spec.gpu.quota: must be >= 0'."""
    if isinstance(error, ValidationError):
        return "; ".join(validation_problems(error))
    return str(error)
