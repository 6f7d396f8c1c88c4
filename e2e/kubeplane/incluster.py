"""The operator installed in-cluster from its own chart on a plane with a real node: its image
imported into the node's containerd, `helm install` with the plane's helm, the host routed to the
guard's Service (service_routes.py), and everything removed again by `uninstall`. By default the
chart is the source tree's (charts/gpu-tenant-operator) and the image operator_image.py's; a
release's packaged chart and image archive (`python -m release`) can be given instead."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import kubernetes
import yaml

from .node import API_FORWARD_PORT
from .operator_image import CHART, operator_image
from .operator_process import GUARD_CONFIGURATION, cluster_networks, remove_guard_configurations
from .plane import ControlPlane
from .process import wait_for
from .service_routes import remove_service_route, route_service_to_node
from .tools import REPO_ROOT

RELEASE = "gpu-tenant-operator"
"""The chart's full name is then the release name, as in docs/install.md."""


def real_vcluster_values(plane: ControlPlane, chart_repository_url: str) -> dict:
    """The chart's `config` for an in-cluster operator that runs real vClusters on the plane's node:
    examples/config.yaml, the vCluster chart from `chart_repository_url` (as from charts.loft.sh),
    exposed by NodePort at the node's address (no cluster DNS serves the host's pods here), the API
    server where pods reach it. Creates the device-plugin namespace the example's pools need (a
    prerequisite, docs/install.md)."""
    config = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    for set_by_chart in ("operatorNamespace", "operatorServiceAccount", "tenantNamespaceClusterRole"):
        config.pop(set_by_chart, None)
    node_ip = plane.require_node().network.node_ip
    config["vcluster"].update(repository=chart_repository_url, exposure={"type": "NodePort", "address": node_ip})
    config.update(apiServerNetworks=[f"{node_ip}/32"], apiServerPort=API_FORWARD_PORT)
    namespace = config["devicePluginConfigMap"]["namespace"]
    if plane.kubectl("get", "namespace", namespace, check=False).returncode:
        plane.create_namespace(namespace)
    return config


@dataclass
class InClusterOperator:
    plane: ControlPlane
    namespace: str
    values: dict = field(default_factory=dict)
    chart: Path = CHART
    image_archive: Path | None = None
    guard_ip: str | None = None

    @property
    def service_account(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{RELEASE}"

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={RELEASE}"

    def install(self, values_dir: Path, timeout: float = 240) -> InClusterOperator:
        """Import the image, install the chart and wait until the Deployment is available and
        the guard's webhook configurations name its Service."""
        archive = self.image_archive or operator_image(self.plane.bin_dir)[1]
        self.plane.require_node().containerd.import_images([archive])
        values_file = values_dir / "operator-values.yaml"
        values = {"crd": {"install": False}, **self.values}
        # The chart's default clusterNetworks (every private range) hold the host's end of the node's
        # link too, from where this API server calls the guard; a platform names its own networks.
        values["config"] = {"clusterNetworks": cluster_networks(self.plane), **values.get("config", {})}
        values_file.write_text(yaml.safe_dump(values))
        self.plane.helm("install", RELEASE, str(self.chart), "--namespace", self.namespace, "--create-namespace",
                        "--values", str(values_file))
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            self.guard_ip = core.read_namespaced_service(f"{RELEASE}-guard", self.namespace).spec.cluster_ip  # type: ignore[union-attr]
        route_service_to_node(self.plane.require_node(), self.guard_ip)  # type: ignore[arg-type]
        try:
            wait_for(self.available, timeout=timeout, interval=1, what=f"deployment {RELEASE} available")
            wait_for(self.guard_registered, timeout=60, interval=0.5, what="the guard's webhook configurations")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{self.describe()}") from None
        return self

    def upgrade(self, values_dir: Path, values: dict, timeout: float = 240) -> None:
        """`helm upgrade` with the install's values and `values` on top, then wait until the new
        pods have replaced every old one."""
        self.values = {**self.values, **values}
        values_file = values_dir / "operator-upgrade-values.yaml"
        merged = {"crd": {"install": False}, **self.values}
        merged["config"] = {"clusterNetworks": cluster_networks(self.plane), **merged.get("config", {})}
        values_file.write_text(yaml.safe_dump(merged))
        self.plane.helm("upgrade", RELEASE, str(self.chart), "--namespace", self.namespace, "--values", str(values_file))
        try:
            wait_for(self.rolled_out, timeout=timeout, interval=1, what=f"deployment {RELEASE} rolled out")
        except TimeoutError as error:
            raise AssertionError(f"{error}\n{self.describe()}") from None

    def rolled_out(self) -> bool:
        """The latest template runs in every replica and no old pod is left."""
        with self.plane.api_client() as client:
            deployment = kubernetes.client.AppsV1Api(client).read_namespaced_deployment(RELEASE, self.namespace)
        status, wanted = deployment.status, deployment.spec.replicas
        generation = deployment.metadata.generation if deployment.metadata else None
        return status is not None and (status.observed_generation or 0) >= (generation or 0) \
            and status.replicas == status.updated_replicas == status.available_replicas == wanted \
            and len(self.pods()) == wanted

    def available(self) -> bool:
        with self.plane.api_client() as client:
            deployment = kubernetes.client.AppsV1Api(client).read_namespaced_deployment(RELEASE, self.namespace)
        wanted = deployment.spec.replicas
        status = deployment.status
        if status is None:
            return False
        return (status.available_replicas or 0) == wanted and (status.updated_replicas or 0) == wanted

    def guard_registered(self) -> bool:
        with self.plane.api_client() as client:
            admission = kubernetes.client.AdmissionregistrationV1Api(client)
            try:
                hooks = admission.read_validating_webhook_configuration(GUARD_CONFIGURATION).webhooks
            except kubernetes.client.ApiException as error:
                if error.status == 404:
                    return False
                raise
        return all(hook.client_config.service is not None
                   and hook.client_config.service.namespace == self.namespace for hook in hooks)  # type: ignore[union-attr]

    def pods(self) -> list[kubernetes.client.V1Pod]:
        with self.plane.api_client() as client:
            return kubernetes.client.CoreV1Api(client).list_namespaced_pod(
                self.namespace, label_selector=self.selector).items

    def describe(self) -> str:
        """The operator pods' state and logs, for failure messages."""
        lines = [self.plane.kubectl("get", "pods,events", "-n", self.namespace, "-o", "wide", check=False).stdout]
        for pod in self.pods():
            lines.append(f"--- logs of {pod.metadata.name}")  # type: ignore[union-attr]
            lines.append(self.plane.kubectl("logs", "-n", self.namespace, pod.metadata.name, "--tail=40",  # type: ignore[arg-type, union-attr]
                                            check=False).stdout)
        return "\n".join(lines)

    def uninstall(self) -> None:
        self.plane.helm("uninstall", RELEASE, "--namespace", self.namespace, "--wait", check=False)
        remove_guard_configurations(self.plane)
        self.plane.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        if self.guard_ip:
            remove_service_route(self.plane.require_node(), self.guard_ip)
