"""Dynamic volume provisioning for a plane with a node: Rancher's local-path-provisioner (built
from its Go module by tools/build.sh) as a process of the plane, and a default StorageClass
naming it, so a PersistentVolumeClaim (vCluster's data volume) gets a real PersistentVolume.

The persistent-volume binder, which hands claims to the provisioner and binds them to the
volumes it writes, runs here as a second kube-controller-manager with only that controller (no
leader election, like the plane's own): planes that provision nothing keep their controller set.
The provisioner watches the claims handed to it, runs a helper pod on the node that creates the volume's directory under `<plane>/node/local-path`,
and writes a hostPath PersistentVolume pinned to the node; deleting the claim runs the teardown
helper and removes the PersistentVolume. Its helper pods use the project's busybox test image.
"""

from __future__ import annotations

import json

import kubernetes
import yaml

from .apiserver import https_status
from .images import TEST_IMAGE
from .plane import ControlPlane
from .process import Process, free_ports, wait_until_serving

PROVISIONER_NAME = "rancher.io/local-path"
NAMESPACE = "local-path-storage"
SERVICE_ACCOUNT = "local-path-provisioner-service-account"
CONFIG_MAP = "local-path-config"
STORAGE_CLASS = "local-path"
BINDER_CONTROLLER = "persistentvolume-binder-controller"
STARTED_LOG_LINE = "Started provisioner controller"
"""What sig-storage-lib-external-provisioner logs once its informers have synced."""

SETUP_SCRIPT = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
"""World-writable, as upstream's: hostPath volumes ignore fsGroup, and vCluster runs non-root."""
TEARDOWN_SCRIPT = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def helper_pod(image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
            "spec": {"containers": [{"name": "helper-pod", "image": image}]}}


class LocalPathProvisioner:
    """`LocalPathProvisioner().start(plane)` (a plane with a node), then `stop()`."""

    def __init__(self) -> None:
        self._processes: list[Process] = []

    def start(self, plane: ControlPlane) -> LocalPathProvisioner:
        if plane.node is None:
            raise ValueError("the local-path provisioner needs a plane with a node (ControlPlane(node=True))")
        volumes_dir = plane.node.directory / "local-path"
        config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [str(volumes_dir)]}]}
        with plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            core.create_namespace({"metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]
            core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": SERVICE_ACCOUNT}})  # type: ignore[arg-type]
            core.create_namespaced_config_map(NAMESPACE, {  # type: ignore[arg-type]
                "metadata": {"name": CONFIG_MAP},
                "data": {"config.json": json.dumps(config), "setup": SETUP_SCRIPT,
                         "teardown": TEARDOWN_SCRIPT, "helperPod.yaml": yaml.safe_dump(helper_pod(TEST_IMAGE))}})
            kubernetes.client.StorageV1Api(client).create_storage_class({  # type: ignore[arg-type]
                "metadata": {"name": STORAGE_CLASS,
                             "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": PROVISIONER_NAME, "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer"})
        try:
            self._start_binder(plane)
            self._start_provisioner(plane)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_binder(self, plane: ControlPlane) -> None:
        name = "persistentvolume-binder"
        directory = plane.directory / "storage"
        directory.mkdir(exist_ok=True)
        ca_file = directory / "ca.crt"
        ca_file.write_bytes(plane.ca_pem)
        cert, key = plane.ca.serving_pair(name, ["localhost"], ["127.0.0.1"]).write(directory, "binder-serving")
        [port] = free_ports(1)
        binder = Process(name, [
            str(plane.kube_bin_dir / "kube-controller-manager"), f"--kubeconfig={plane.user(name, groups=['system:masters'])}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}", "--leader-elect=false", f"--controllers={BINDER_CONTROLLER}",
            "--use-service-account-credentials=false", "--profiling=false"], plane.log_dir / f"{name}.log")
        self._processes.append(binder)
        wait_until_serving(binder, lambda: https_status(port, "/healthz", ca_file) == 200,
                           f"{name} /healthz on port {port}")

    def _start_provisioner(self, plane: ControlPlane) -> None:
        name = "local-path-provisioner"
        kubeconfig = plane.user(name, groups=["system:masters"])
        log_path = plane.log_dir / f"{name}.log"
        provisioner = Process(name, [
            str(plane.bin_dir / name), "--debug", "start", f"--kubeconfig={kubeconfig}",
            f"--namespace={NAMESPACE}", f"--configmap-name={CONFIG_MAP}", f"--helper-image={TEST_IMAGE}",
            f"--service-account-name={SERVICE_ACCOUNT}", f"--provisioner-name={PROVISIONER_NAME}"], log_path)
        self._processes.append(provisioner)
        wait_until_serving(provisioner, lambda: STARTED_LOG_LINE in log_path.read_text(errors="replace"),
                           f"{name} watching claims")

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
