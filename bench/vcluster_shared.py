"""LIGHTWEIGHT vCluster mode, for benchmarks only (hundreds of tenants); never used by the tests
or the demo, which run the REAL vCluster on the plane's node.

A real vCluster takes about 300 MiB and 25-60 s of a 2-core machine (docs/performance.md), so 200
or 500 of them do not fit. What is real here: the real upstream chart's Helm release, the
StatefulSet it renders and that StatefulSet's Pod, created by the real statefulset controller once
the namespace's admission (quota, LimitRange, Pod Security) lets it in; the plane has no node, so
the Pod stays unscheduled. What stands in: the vCluster process and the kubelet's report of it. When a
Pod labelled ``app=vcluster`` appears, this marks it Running and Ready and writes ``vc-<release>``
the way vCluster's syncer does, with a kubeconfig for ONE
virtual kube-apiserver shared by all tenants (a real kube-apiserver on the plane's etcd),
authenticating as a per-tenant identity (``vcluster-<release>.<namespace>`` in system:masters).
Objects the operator creates inside "its" virtual cluster (ServiceAccounts, bindings,
TokenRequests) therefore land in the one shared apiserver; they are never on the host, so host
request counts are exact.

Both the operator and the baseline scripts are measured against this same stand-in, so its lag
(one watch event and one Secret create) weighs on both alike.
"""

from __future__ import annotations

import base64
import threading
import time

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from kubeplane import ControlPlane, VirtualAPIServer
from kubeplane.kubeconfig import kubeconfig

LIGHTWEIGHT_VCLUSTER_NOTICE = (
    "vCluster mode: LIGHTWEIGHT (bench/vcluster_shared.py). Each tenant's release is the real chart and its "
    "Pod is real but has no node (the stand-in marks it Ready); one shared kube-apiserver stands in for every "
    "tenant's vCluster, because hundreds of real vClusters (about 300 MiB each) do not fit here. Real vCluster start time and "
    "memory: docs/performance.md.")
POD_SELECTOR = "app=vcluster"
SHARED_VIRTUAL_NAME = "bench-shared"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class SharedVirtualCluster:
    """``with SharedVirtualCluster(plane) as sim:`` plays every tenant's vCluster pod until the
    block ends. ``written`` maps (namespace, release) to the monotonic time its Secret appeared."""

    def __init__(self, plane: ControlPlane):
        self.plane = plane
        self.written: dict[tuple[str, str], float] = {}
        self.errors: list[str] = []
        self.virtual: VirtualAPIServer | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shared-vcluster-sim", daemon=True)

    def __enter__(self) -> SharedVirtualCluster:
        self.virtual = self.plane.start_virtual_apiserver(SHARED_VIRTUAL_NAME)
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        if self.virtual:
            self.virtual.stop()

    def secrets_written(self, namespaces: set[str]) -> int:
        return sum(1 for namespace, _ in self.written if namespace in namespaces)

    def last_written(self, namespaces: set[str]) -> float | None:
        stamps = [stamp for (namespace, _), stamp in self.written.items() if namespace in namespaces]
        return max(stamps) if stamps else None

    def _run(self) -> None:
        with self.plane.api_client() as api:
            core = kubernetes.client.CoreV1Api(api)
            resource_version = None
            while not self._stop.is_set():
                try:
                    if resource_version is None:
                        listing = core.list_pod_for_all_namespaces(label_selector=POD_SELECTOR)
                        for pod in listing.items:
                            self._serve(core, pod)
                        resource_version = listing.metadata.resource_version
                    stream = kubernetes.watch.Watch().stream(
                        core.list_pod_for_all_namespaces, label_selector=POD_SELECTOR,
                        resource_version=resource_version, timeout_seconds=2)
                    for event in stream:
                        resource_version = event["object"].metadata.resource_version
                        if event["type"] == "ADDED":
                            self._serve(core, event["object"])
                        if self._stop.is_set():
                            break
                except ApiException as error:
                    if error.status == 410:  # the watch expired: list again
                        resource_version = None
                        continue
                    self.errors.append(repr(error))
                    time.sleep(0.5)
                except Exception as error:  # keep simulating; the run reports errors at the end
                    self.errors.append(repr(error))
                    resource_version = None
                    time.sleep(0.5)

    def _serve(self, core: kubernetes.client.CoreV1Api, pod) -> None:
        namespace = pod.metadata.namespace
        release = (pod.metadata.labels or {}).get("release")
        if not release or pod.metadata.deletion_timestamp or (namespace, release) in self.written:
            return
        identity = f"vcluster-{release}.{namespace}"
        pair = self.plane.ca.client_pair(identity, ["system:masters"])
        config = kubeconfig(self.virtual.url, self.virtual.ca_pem, f"vcluster_{release}_{namespace}",
                            cert_pem=pair.cert_pem, key_pem=pair.key_pem)
        secret = kubernetes.client.V1Secret(
            metadata=kubernetes.client.V1ObjectMeta(
                name=f"vc-{release}", namespace=namespace,
                labels={"app": "vcluster", "vcluster-name": release}),
            type="Opaque",
            data={"config": _b64(yaml.safe_dump(config, sort_keys=False).encode()),
                  "certificate-authority": _b64(self.virtual.ca_pem),
                  "client-certificate": _b64(pair.cert_pem), "client-key": _b64(pair.key_pem)})
        try:
            core.create_namespaced_secret(namespace, secret)
        except ApiException as error:
            if error.status != 409:
                raise
        self._report_ready(core, pod)
        self.written[(namespace, release)] = time.monotonic()

    @staticmethod
    def _report_ready(core: kubernetes.client.CoreV1Api, pod) -> None:
        """The pod's status as a kubelet reports a started vCluster: Running and Ready. The operator
        calls a control plane up only when its StatefulSet's pod is ready at the current revision
        (gputenant.reconcile.controlplane), and this pod has no node, hence no kubelet."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = [{"type": kind, "status": "True", "lastTransitionTime": now} for kind in ("Ready", "ContainersReady")]
        core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace,
                                         {"status": {"phase": "Running", "conditions": ready}})
