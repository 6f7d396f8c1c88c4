"""The planes run the Kubernetes version the harness was told to run: GPUTENANT_KUBE_VERSION, or the
pin (KUBE_VERSION) when it is unset.

Why a test: `make test-compat` claims the onboarding journey passed on the oldest supported minor
(v1.34). If the variable were lost on the way, or a component were started from the pinned
binaries, the journey would run on v1.35 and pass all the same. These read the version back from
what runs: the API server's /version, the kubelet's report in its Node, and each binary's own
--version, so a mixed or wrong plane fails here instead of passing silently.
"""

from __future__ import annotations

import json
import subprocess

import kubernetes

from kubeplane.tools import KUBE_BINARIES, kube_version


def test_the_api_server_serves_the_chosen_version(plane):
    with plane.api_client() as client:
        served = kubernetes.client.VersionApi(client).get_code()
    assert served.git_version == kube_version()


def test_kubectl_is_the_chosen_version_and_sees_the_server_at_it(plane):
    versions = json.loads(plane.kubectl("version", "--output=json").stdout)
    assert versions["clientVersion"]["gitVersion"] == kube_version()
    assert versions["serverVersion"]["gitVersion"] == kube_version()


def test_every_kubernetes_binary_the_plane_runs_reports_the_chosen_version(plane):
    for name in KUBE_BINARIES:
        args = ["version", "--client"] if name == "kubectl" else ["--version"]
        result = subprocess.run([str(plane.kube_bin_dir / name), *args], capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        assert kube_version() in result.stdout, f"{name}: {result.stdout}"


def test_the_node_runs_the_chosen_kubelet(node_plane):
    with node_plane.api_client() as client:
        node = kubernetes.client.CoreV1Api(client).read_node(node_plane.require_node().name)
    assert node.status.node_info.kubelet_version == kube_version()
