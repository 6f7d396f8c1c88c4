"""A SIMULATION of the vCluster control-plane pod, because no container can run here.

What is real: the host StatefulSet (rendered by Helm from the chart), its Pod (created by the real
statefulset controller once the namespace's admission lets it in: quota, LimitRange, Pod Security,
webhooks) and the virtual cluster's API (a real second kube-apiserver from
`ControlPlane.start_virtual_apiserver`, with its own objects and service-account signing key).

What is simulated: the vCluster process itself. `VClusterSimulator` watches the host for
StatefulSets labelled ``app=vcluster``; when a StatefulSet's first Pod exists it starts that
release's virtual apiserver, does what vCluster's embedded controller-manager would do for a fresh
cluster (aggregate the bootstrap ClusterRoles such as ``view``), and writes the Secret
``vc-<release>`` the way vCluster's syncer does. When the StatefulSet goes away it stops that
apiserver and deletes nothing else (vCluster's data and Secret outlive its pod the same way).
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlparse

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from .kubeconfig import kubeconfig
from .plane import ControlPlane, VirtualAPIServer, wait_for

log = logging.getLogger(__name__)

SIMULATOR_FIELD_MANAGER = "vcluster"
"""vCluster's syncer writes ``vc-<release>``; the simulator writes it under the same manager name."""
REACHABILITY_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True)
class _ReleaseKey:
    namespace: str
    release: str

    @property
    def virtual_name(self) -> str:
        """Unique per host namespace; also a serving-cert SAN, like vCluster's ``<name>.<ns>``."""
        return f"{self.release}.{self.namespace}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _reachable(url: str) -> bool:
    """Whether something accepts TCP connections at the URL's host and port."""
    parsed = urlparse(url)
    if parsed.scheme not in ("https", "http") or not parsed.hostname:
        return False
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=REACHABILITY_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def _matches(labels: dict[str, str], selector) -> bool:
    """A ClusterRole label selector; the bootstrap aggregation rules use matchLabels only."""
    if selector.match_expressions:
        raise NotImplementedError("the simulator aggregates ClusterRoles by matchLabels only")
    return all(labels.get(key) == value for key, value in (selector.match_labels or {}).items())


class VClusterSimulator:
    """Plays the vCluster pod's part for every ``app=vcluster`` StatefulSet on the plane.

    ``start()`` runs a polling thread; ``stop()`` ends it and stops the virtual apiservers it
    started. Errors inside the thread are kept in ``errors`` and named by `wait_for_control_plane`,
    so a broken simulation fails the test that waits on it instead of hanging silently.
    """

    def __init__(self, plane: ControlPlane, *, poll_seconds: float = 0.25):
        self.plane = plane
        self.poll_seconds = poll_seconds
        self.errors: list[str] = []
        self._running: dict[_ReleaseKey, VirtualAPIServer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> VClusterSimulator:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="vcluster-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=30)
            self._thread = None
        with self._lock:
            for virtual in self._running.values():
                virtual.stop()
            self._running.clear()

    def __enter__(self) -> VClusterSimulator:
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()

    # -- queries ------------------------------------------------------------------------------

    def virtual(self, release: str, namespace: str) -> VirtualAPIServer | None:
        """The running virtual apiserver of a release, or None."""
        with self._lock:
            return self._running.get(_ReleaseKey(namespace, release))

    def wait_for_control_plane(self, release: str, namespace: str, timeout: float = 60) -> VirtualAPIServer:
        """Wait until the release's virtual apiserver runs and ``vc-<release>`` is written."""
        def ready() -> VirtualAPIServer | None:
            virtual = self.virtual(release, namespace)
            return virtual if virtual and self._secret_exists(release, namespace) else None
        try:
            return wait_for(ready, timeout=timeout, what=f"the simulated vCluster {namespace}/{release}")
        except TimeoutError as error:
            detail = f"; simulator errors: {self.errors[-3:]}" if self.errors else ""
            raise TimeoutError(f"{error}{detail}") from None

    def admin_kubeconfig(self, release: str, namespace: str) -> dict:
        """The kubeconfig in ``vc-<release>``, as the operator reads it."""
        with self.plane.api_client() as api:
            secret = kubernetes.client.CoreV1Api(api).read_namespaced_secret(f"vc-{release}", namespace)
        return yaml.safe_load(base64.b64decode(secret.data["config"]))

    def wait_for_shutdown(self, release: str, namespace: str, timeout: float = 60) -> None:
        wait_for(lambda: self.virtual(release, namespace) is None, timeout=timeout,
                 what=f"the simulated vCluster {namespace}/{release} to stop")

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        with self.plane.api_client() as api:
            self._apps = kubernetes.client.AppsV1Api(api)
            self._core = kubernetes.client.CoreV1Api(api)
            while not self._stop.is_set():
                try:
                    self._sync_once()
                except Exception as error:  # keep simulating; the waiting test reports it
                    log.exception("vcluster simulator iteration failed")
                    self.errors.append(repr(error))
                self._stop.wait(self.poll_seconds)

    def _sync_once(self) -> None:
        statefulsets = self._apps.list_stateful_set_for_all_namespaces(label_selector="app=vcluster").items
        present: dict[_ReleaseKey, object] = {}
        for statefulset in statefulsets:
            labels = statefulset.metadata.labels or {}
            key = _ReleaseKey(statefulset.metadata.namespace, labels.get("release", statefulset.metadata.name))
            present[key] = statefulset
        with self._lock:
            gone = [key for key in self._running if key not in present]
        for key in gone:
            self._shut_down(key)
        secrets = {(s.metadata.namespace, s.metadata.name) for s in self._core.list_secret_for_all_namespaces(
            label_selector="app=vcluster,vcluster-name").items}
        for key, statefulset in present.items():
            running = self.virtual(key.release, key.namespace)
            if running is None:
                if self._pod_exists(statefulset):
                    self._bring_up(key)
            elif (key.namespace, f"vc-{key.release}") not in secrets:
                self._write_kubeconfig_secret(key, running)

    def _pod_exists(self, statefulset) -> bool:
        """Whether the statefulset controller created the first Pod, i.e. it passed admission."""
        try:
            pod = self._core.read_namespaced_pod(f"{statefulset.metadata.name}-0", statefulset.metadata.namespace)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        owners = pod.metadata.owner_references or []
        return any(owner.uid == statefulset.metadata.uid for owner in owners) and pod.metadata.deletion_timestamp is None

    def _bring_up(self, key: _ReleaseKey) -> None:
        log.info("vcluster simulator: starting the virtual apiserver of %s/%s", key.namespace, key.release)
        virtual = self.plane.start_virtual_apiserver(key.virtual_name)
        with self._lock:
            self._running[key] = virtual
        with virtual.api_client() as api:
            _aggregate_cluster_roles(kubernetes.client.RbacAuthorizationV1Api(api))
        self._write_kubeconfig_secret(key, virtual)

    def _shut_down(self, key: _ReleaseKey) -> None:
        log.info("vcluster simulator: StatefulSet of %s/%s is gone; stopping its apiserver", key.namespace, key.release)
        with self._lock:
            virtual = self._running.pop(key)
        virtual.stop()

    # -- what vCluster writes -----------------------------------------------------------------

    def _export_settings(self, key: _ReleaseKey) -> dict:
        """``exportKubeConfig`` from the release's config Secret ``vc-config-<release>``, which is
        where vCluster reads its configuration from."""
        try:
            secret = self._core.read_namespaced_secret(f"vc-config-{key.release}", key.namespace)
        except ApiException as error:
            if error.status == 404:
                return {}
            raise
        encoded = (secret.data or {}).get("config.yaml")
        values = yaml.safe_load(base64.b64decode(encoded)) if encoded else {}
        return (values or {}).get("exportKubeConfig") or {}

    def _write_kubeconfig_secret(self, key: _ReleaseKey, virtual: VirtualAPIServer) -> None:
        """``vc-<release>`` with keys config, certificate-authority, client-certificate and
        client-key, labels app=vcluster and vcluster-name, owned by the Service ``<release>``.

        The kubeconfig's server is ``exportKubeConfig.server`` when something answers there, else
        the virtual apiserver's real loopback URL (vCluster's own default, https://localhost:8443,
        only works through a port-forward, which has no equivalent here).
        """
        export = self._export_settings(key)
        wanted_server = export.get("server")
        server = wanted_server if wanted_server and _reachable(wanted_server) else virtual.url
        context = export.get("context") or f"vcluster_{key.release}_{key.namespace}"
        config = kubeconfig(server, virtual.ca_pem, context, cert_pem=virtual.admin_client_cert_pem,
                            key_pem=virtual.admin_client_key_pem)
        metadata = {"name": f"vc-{key.release}", "namespace": key.namespace,
                    "labels": {"app": "vcluster", "vcluster-name": key.release}}
        service = self._service(key)
        if service is not None:
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Service", "name": service.metadata.name,
                                            "uid": service.metadata.uid}]
        body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "data": {
            "config": _b64(yaml.safe_dump(config, sort_keys=False).encode()),
            "certificate-authority": _b64(virtual.ca_pem),
            "client-certificate": _b64(virtual.admin_client_cert_pem),
            "client-key": _b64(virtual.admin_client_key_pem),
        }}
        self._core.patch_namespaced_secret(metadata["name"], key.namespace, body, field_manager=SIMULATOR_FIELD_MANAGER,
                                           force=True, _content_type="application/apply-patch+yaml")

    def _service(self, key: _ReleaseKey):
        try:
            return self._core.read_namespaced_service(key.release, key.namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _secret_exists(self, release: str, namespace: str) -> bool:
        with self.plane.api_client() as api:
            try:
                kubernetes.client.CoreV1Api(api).read_namespaced_secret(f"vc-{release}", namespace)
            except ApiException as error:
                if error.status == 404:
                    return False
                raise
        return True


def _aggregate_cluster_roles(rbac: kubernetes.client.RbacAuthorizationV1Api) -> None:
    """What the clusterrole-aggregation controller in vCluster's controller-manager does: fill each
    aggregated ClusterRole (admin, edit, view, ...) with the rules of the roles its selectors match.
    The virtual apiserver has no controller-manager, so without this ``view`` grants nothing."""
    roles = rbac.list_cluster_role().items
    serialize = rbac.api_client.sanitize_for_serialization
    for role in roles:
        if not role.aggregation_rule or not role.aggregation_rule.cluster_role_selectors:
            continue
        rules: list[dict] = []
        for source in sorted(roles, key=lambda r: r.metadata.name):
            if source.metadata.name == role.metadata.name:
                continue
            labels = source.metadata.labels or {}
            if any(_matches(labels, selector) for selector in role.aggregation_rule.cluster_role_selectors):
                rules.extend(rule for rule in serialize(source.rules or []) if rule not in rules)
        if rules != serialize(role.rules or []):
            rbac.patch_cluster_role(role.metadata.name, {"rules": rules})
