"""The tenant's vCluster: a Helm release, installed or upgraded only when its values hash changed or
it is missing; then, once its control plane serves (the StatefulSet rolled out and ready at its
current revision, the API answering at the tenant's endpoint: ``controlplane``), the admin
kubeconfig it writes to ``vc-<release>``; or, while the tenant sleeps, nothing left running
(``sleep``). Waiting for the control plane is a condition and a short look again, not a failure."""

from __future__ import annotations

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import VClusterStatus
from gputenant.config.models import ExposureType, VClusterExposure
from gputenant.helm import HelmError, helm_needed, release_revisions, values_hash
from gputenant.kube import ApiError
from gputenant.kubeconfigs import admin_kubeconfig, https_server, server_of, with_server
from gputenant.reconcile.adapters import helm_step_error
from gputenant.reconcile.context import Pass
from gputenant.reconcile.controlplane import ControlPlaneState, control_plane_pods, judge, seen_pods
from gputenant.reconcile.memory import RETRY_ANNOTATION, HelmAttempt
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.steps import sleep
from gputenant.render.vcluster import oidc_ca_configmap

CONDITION = reasons.VCLUSTER_READY
KINDS: frozenset[str] = frozenset()
WAIT_FOR_CONTROL_PLANE_SECONDS = 2.0
"""How soon to look again once the control-plane pod is ready but its Secret, node port or API is not
there yet, or its StatefulSet's status lags it (`ControlPlaneState.lagging`): nothing about the pod
changes any more, so no pod event would call the tenant up."""
WAIT_FOR_LOAD_BALANCER_SECONDS = 5.0
"""How soon to look again while the Service waits for its load-balancer address: no watch calls the
tenant up when it comes, and without an implementation it never does, so not too often."""
WAIT_FOR_POD_SECONDS = 10.0
"""How soon to look again while no control-plane pod is ready: the pod watch calls the tenant up as
soon as one changes, so this is only the safety net."""
NOT_RETRIED = (f"not retried until the spec, the operator configuration or the chart version changes, or the "
               f"tenant's annotation {RETRY_ANNOTATION} gets a new value")


async def ensure(run: Pass) -> bool:
    release = naming.release_name(run.name)
    chart_version = run.plan.tenant.spec.vcluster.chart_version or run.config.vcluster.version
    try:
        wanted_hash = values_hash(run.plan.vcluster_values, chart_version)
    except HelmError as error:
        raise helm_step_error(error, error.message) from None
    recorded = run.status.vcluster or VClusterStatus()
    installed = await ensure_release(run, release, chart_version, wanted_hash, recorded)
    run.status.vcluster = VClusterStatus(release=release, chart_version=installed, values_hash=wanted_hash,
                                         endpoint=recorded.endpoint, oidc_owners_hash=recorded.oidc_owners_hash)
    if run.plan.tenant.spec.sleep.asleep:
        # the steps after this one need the control plane and keep their last conditions
        await sleep.settle_asleep(run, release)
        return False
    control_plane = await read_control_plane(run, release)
    if not await sleep.control_plane_awake(run, control_plane):
        return False
    if not control_plane.ready:
        refused = not control_plane.has_pods and not run.outcome.helm_calls  # just installed: nothing tried yet
        refusal = await pod_refusal(run, release) if refused else None
        if refusal:
            run.set(CONDITION, False, reasons.CONTROL_PLANE_POD_REFUSED,
                    f"release {release} ({installed}) installed, but its control-plane pod is refused: {refusal}")
            run.retry_later(CONDITION)
        else:
            waiting(run, control_plane.reason, f"release {release} ({installed}) installed; {control_plane.message}",
                    WAIT_FOR_CONTROL_PLANE_SECONDS if control_plane.lagging else WAIT_FOR_POD_SECONDS)
        return False
    await remove_unused_oidc_ca(run)
    secret_name = naming.vcluster_secret_name(run.name)
    secret = await run.client.get("v1", "Secret", secret_name, run.host_namespace)
    try:
        admin = admin_kubeconfig(secret)
    except ValueError as error:
        raise StepError(reasons.INVALID_KUBECONFIG_INPUT, f"Secret {run.host_namespace}/{secret_name} (key config) "
                        f"holds no readable kubeconfig ({error}); the vCluster control plane rewrites it when it "
                        "restarts", transient=True) from None
    if admin is None:
        waiting(run, reasons.WAITING_FOR_CONTROL_PLANE, f"release {release} ({installed}) installed; waiting for its "
                f"control plane to write Secret {run.host_namespace}/{secret_name}")
        return False
    exposed = await exposed_server(run, release)
    if exposed is None:
        waiting_for_exposure(run, f"release {release} ({installed}) installed; waiting for Service "
                             f"{run.host_namespace}/{release}")
        return False
    if exposed:
        admin = with_server(admin, exposed)
    endpoint = run.plan.tenant.spec.vcluster.server_url or server_of(admin)
    run.status.vcluster = run.status.vcluster.model_copy(update={"endpoint": endpoint})
    silence = await run.services.issuer.unanswered(admin)
    if silence:
        waiting(run, reasons.CONTROL_PLANE_NOT_ANSWERING, f"release {release} ({installed}): {control_plane.message}, "
                f"but its API does not answer at {server_of(admin)}: {silence}")
        return False
    run.admin_kubeconfig = admin
    run.set(CONDITION, True, reasons.CONTROL_PLANE_UP, f"release {release} ({installed}) serves at {endpoint}; "
            f"{control_plane.message}")
    return True


def waiting(run: Pass, reason: str, message: str, seconds: float = WAIT_FOR_CONTROL_PLANE_SECONDS) -> None:
    """VClusterReady False with `reason`, and a look again after `seconds`: the control plane is on
    its way, which is not a failure."""
    run.set(CONDITION, False, reason, message)
    run.wait(seconds)


async def remove_unused_oidc_ca(run: Pass) -> None:
    """Delete the issuer's CA ConfigMap once spec.vcluster.oidc no longer has a caBundle. Only here,
    with the control plane rolled out at the current revision: until then a pod of the old revision
    still mounts it, and a restart of that pod without it would not start."""
    if oidc_ca_configmap(run.plan.tenant, run.host_namespace) is not None:
        return
    if await run.snapshot.lookup("v1", "ConfigMap", naming.OIDC_CA_CONFIGMAP, run.host_namespace):
        await run.client.delete("v1", "ConfigMap", naming.OIDC_CA_CONFIGMAP, run.host_namespace)


async def read_control_plane(run: Pass, release: str) -> ControlPlaneState:
    """The release's StatefulSet and control-plane pods, judged (`controlplane.judge`). The pods are
    read from the pass's one listing of the host namespace's pods, which the tenant's view reuses;
    the moment that listing was sent, and each pod as the listing had it, are what the pod watch
    compares a change with (`Rechecks.is_news`)."""
    statefulset = await run.client.get("apps/v1", "StatefulSet", release, run.host_namespace)
    pods = control_plane_pods(await run.host_pods(), release)
    run.outcome.control_plane_read_at = run.host_pods_read_at
    run.outcome.control_plane_pods = seen_pods(pods)
    return judge(statefulset, pods)


async def ensure_release(run: Pass, release: str, chart_version: str, wanted_hash: str,
                         recorded: VClusterStatus) -> str:
    """The installed chart version; Helm runs only when the recorded hash differs or no revision is
    deployed, and not at all while a permanent failure of this very attempt is remembered. A look
    again does not read Helm's records when the status records this very values hash (written only
    after an install or a check of it succeeded): a release removed behind the operator's back is
    the resync's to find, as drift in the other objects is."""
    attempt = HelmAttempt(run.generation, wanted_hash, run.retry_request)
    stop = run.services.memory.helm_stop(run.uid, attempt)
    if stop is not None:
        raise StepError(stop.reason, stop.message, transient=False)
    if run.recheck and recorded.values_hash == wanted_hash and recorded.release == release:
        return recorded.chart_version or chart_version
    # Helm keeps a release's records in its namespace: one this pass created holds none yet.
    revisions = [] if run.snapshot.created(run.host_namespace) else \
        await release_revisions(run.client, run.host_namespace, release)
    if not helm_needed(recorded.values_hash, wanted_hash, revisions):
        return recorded.chart_version or chart_version
    run.outcome.helm_calls += 1
    try:
        installed = await run.services.releases.ensure(release, run.host_namespace, chart_version,
                                                       run.plan.vcluster_values, known_absent=not revisions)
    except StepError as error:
        if not error.transient:
            message = f"{error.message} ({NOT_RETRIED})"
            run.services.memory.stop_helm(run.name, run.uid, attempt, error.reason, message)
            raise StepError(error.reason, message, transient=False) from None
        raise
    run.services.memory.clear_helm(run.uid)
    return installed


async def pod_refusal(run: Pass, release: str) -> str | None:
    """Why the API server refuses the vCluster StatefulSet's pod (quota, LimitRange, admission), as
    the StatefulSet controller reported it in its latest FailedCreate Event; None when nothing was
    refused. Asked only while no pod exists. Where the operator may not read Events, it cannot tell."""
    try:
        events = await run.client.list("v1", "Event", namespace=run.host_namespace)
    except ApiError as error:
        if error.forbidden:
            return None
        raise
    refused = [event for event in events
               if event.get("reason") == "FailedCreate"
               and (event.get("involvedObject") or {}).get("kind") == "StatefulSet"
               and (event.get("involvedObject") or {}).get("name") == release]
    if not refused:
        return None
    latest = max(refused, key=lambda event: event.get("lastTimestamp") or event.get("eventTime") or "")
    return str(latest.get("message") or "FailedCreate")


async def exposed_server(run: Pass, release: str) -> str | None:
    """The URL the configured exposure reaches the vCluster at: "" for ClusterIP (the in-cluster
    URL vCluster wrote stays), else what `service_server` reads from the Service, None while the
    Service has no node port or load-balancer address yet. The operator dials it too, so it works
    from outside the cluster."""
    exposure = run.config.vcluster.exposure
    if exposure.type is ExposureType.CLUSTER_IP:
        return ""
    service = await run.client.get("v1", "Service", release, run.host_namespace) or {}
    return service_server(exposure, service)


def service_server(exposure: VClusterExposure, service: dict) -> str | None:
    """``https://<address>:<nodePort>`` for NodePort; ``https://<ingress IP or host name>:<port>`` of
    the https port for LoadBalancer; None until the Service has them."""
    ports = (service.get("spec") or {}).get("ports") or []
    https: dict = next((port for port in ports if port.get("name") == "https"), {})
    if exposure.type is ExposureType.LOAD_BALANCER:
        ingress = (((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [{}])[0]
        address = ingress.get("ip") or ingress.get("hostname")
        return https_server(address, https["port"]) if address and https.get("port") else None
    node_port = https.get("nodePort")
    return https_server(exposure.address, node_port) if exposure.address and node_port else None


def waiting_for_exposure(run: Pass, waiting_for: str) -> None:
    """VClusterReady False while the Service lacks what the exposure needs: its node port (a moment),
    or its load-balancer address (LoadBalancerPending: as long as no implementation serves it)."""
    exposure = run.config.vcluster.exposure
    if exposure.type is not ExposureType.LOAD_BALANCER:
        waiting(run, reasons.WAITING_FOR_CONTROL_PLANE, f"{waiting_for} to be given the node port of its https "
                "port (config vcluster.exposure: NodePort)")
        return
    implementation = (f"of class {exposure.load_balancer_class}" if exposure.load_balancer_class
                      else "(no loadBalancerClass: the cluster's default)")
    requested = f" the requested address {exposure.address}" if exposure.address else " an address"
    waiting(run, reasons.LOAD_BALANCER_PENDING, f"{waiting_for} to be given{requested} by the load balancer "
            f"{implementation} (config vcluster.exposure: LoadBalancer); if this persists, check that such an "
            "implementation runs and has a free address, and read the Service's events", WAIT_FOR_LOAD_BALANCER_SECONDS)
