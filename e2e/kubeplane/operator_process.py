"""`gputenant run` as a subprocess against a plane: the ONE launcher of the operator process that
the e2e tests, the demo and the benchmarks share, so they can SIGKILL and restart it and read its log.

The operator authenticates as its own user, ``gpu-tenant-operator`` (in system:masters; the
chart's RBAC is exercised by the tests that install the chart), by a client certificate inline in
its kubeconfig, so the audit log tells its requests apart from the tests' and the controllers'.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import kubernetes
import yaml

from gputenant.config.models import OperatorConfig

from .apiserver import SERVICE_CIDR
from .containerd import POD_CIDR
from .conversion import point_tenant_crd_here
from .fixtures import REAL_VCLUSTER_CHART
from .node import API_FORWARD_PORT
from .plane import ControlPlane
from .process import PlaneError, free_ports, preexec_for_thread, wait_for
from .tools import REPO_ROOT

GPUTENANT = Path(sys.executable).parent / "gputenant"
RESYNC_ENV = "GPUTENANT_RESYNC_SECONDS"
DELETION_RETRY_ENV = "GPUTENANT_DELETION_RETRY_SECONDS"
OPERATOR_USER = "gpu-tenant-operator"
GUARD_CONFIGURATION = "gputenant-guard"
RESYNC_SECONDS = 5
PRODUCTION_RESYNC_SECONDS = 60
"""`gputenant run`'s resync period when GPUTENANT_RESYNC_SECONDS is unset."""
DELETION_RETRY_SECONDS = 3


class OperatorProcess:
    """`gputenant run --config CONFIG`: the one launcher of the operator process for the tests, the
    demo and the benchmarks. Resyncing every `resync_seconds` (RESYNC_SECONDS: tests wait for timer
    runs; None: the production default, GPUTENANT_RESYNC_SECONDS unset), retrying a held deletion
    every `deletion_retry_seconds` (None: the production default), with `extra_args` (e.g.
    `guard_flags`); `env` adds to its environment. As `kubeconfig_path` (default: `user`, in
    system:masters); `command` runs another copy of the package (a benchmark's frozen source);
    `liveness` serves the liveness endpoint that `wait_serving` polls. Its own process group, which
    dies with the launcher when started from the main thread (`process.preexec_for_thread`)."""

    def __init__(self, plane: ControlPlane, config_path: Path, log_path: Path, extra_args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, resync_seconds: float | None = RESYNC_SECONDS, *,
                 deletion_retry_seconds: float | None = DELETION_RETRY_SECONDS, user: str = OPERATOR_USER,
                 kubeconfig_path: Path | None = None,
                 command: Sequence[str] = (), cwd: Path = REPO_ROOT, liveness: bool = False):
        self.plane = plane
        self.config_path = config_path
        self.log_path = log_path
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.user = user
        self.resync_seconds = PRODUCTION_RESYNC_SECONDS if resync_seconds is None else resync_seconds
        self._tunables = {RESYNC_ENV: resync_seconds, DELETION_RETRY_ENV: deletion_retry_seconds}
        self.kubeconfig_path = kubeconfig_path or plane.user(user, groups=["system:masters"])
        self.command = list(command) or [str(GPUTENANT)]
        self.cwd = cwd
        self.liveness_url: str | None = None
        if liveness:
            [port] = free_ports(1)
            self.liveness_url = f"http://127.0.0.1:{port}/healthz"
        self.process: subprocess.Popen | None = None

    def start(self) -> OperatorProcess:
        env = {**self.plane.env(self.kubeconfig_path), **self.env}
        for name, value in self._tunables.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = f"{value:g}"
        liveness = ["--liveness", self.liveness_url] if self.liveness_url else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.command, "run", "--config", str(self.config_path), "--kubeconfig", str(self.kubeconfig_path),
                 *liveness, *self.extra_args],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                preexec_fn=preexec_for_thread())
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("the operator was not started")
        return self.process.pid

    def check_running(self) -> None:
        """Raises PlaneError, with the log's tail, once the operator exited."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise PlaneError(f"the operator exited with {code}; last lines of {self.log_path}:\n{self.log_tail()}")

    def wait_serving(self, timeout: float = 60) -> OperatorProcess:
        """Until its liveness endpoint answers 200 (it was started with `liveness`)."""
        if self.liveness_url is None:
            raise ValueError("started without liveness=True: nothing to poll")
        url = self.liveness_url

        def serving() -> bool:
            self.check_running()
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                return False

        wait_for(serving, timeout=timeout, interval=0.2, what="the operator's liveness endpoint")
        return self

    def kill(self) -> None:
        """SIGKILL the operator and every process it started (its helm children), as the kubelet
        killing its container does: a helm left running would go on writing the release after the
        operator died, which no pod can do."""
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def guard_flags(cert_dir: Path) -> list[str]:
    """`gputenant run` flags that serve the admission guard and the GpuTenant CRD's conversion
    webhook on free loopback ports."""
    port, conversion_port = free_ports(2)
    return ["--webhook-host", "127.0.0.1", "--webhook-port", str(port), "--webhook-conversion-port",
            str(conversion_port), "--webhook-cert-dir", str(cert_dir)]


def remove_guard_configurations(plane: ControlPlane) -> None:
    """The guard's webhook configurations, removed once its operator stopped: it fails closed, so
    a configuration left behind would refuse every tenant pod of later tests. The GpuTenant CRD's
    conversion goes back to this process's webhook (kubeplane.conversion)."""
    with plane.api_client() as client:
        point_tenant_crd_here(client)
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        for delete in (admission.delete_mutating_webhook_configuration,
                       admission.delete_validating_webhook_configuration):
            try:
                delete(GUARD_CONFIGURATION)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise


def cluster_networks(plane: ControlPlane) -> list[str]:
    """The plane's own networks, as a platform names its pod, service and node CIDRs. The host's
    end of the node's link, where the API server calls webhooks from, is outside them."""
    return [POD_CIDR, SERVICE_CIDR, f"{plane.require_node().network.node_ip}/32"]


def real_vcluster_config(plane: ControlPlane, path: Path, extra_pools: Sequence[dict] = ()) -> Path:
    """examples/config.yaml with the upstream chart from ../shared/third_party, exposed by
    NodePort at the node's address: the operator runs on the host, outside the node's network
    namespace, so that address is the one it (and the kubeconfigs it issues) can reach. The
    plane's own networks are its clusterNetworks (pods, Services, the node), and the API server
    is where pods reach it: the node's address, on the forwarder's port. `extra_pools` are added to
    the example's pools (a test's own arrangement)."""
    node_ip = plane.require_node().network.node_ip
    document = yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text())
    document["vcluster"].update(localPath=str(REAL_VCLUSTER_CHART),
                                exposure={"type": "NodePort", "address": node_ip})
    document.update(clusterNetworks=cluster_networks(plane), apiServerNetworks=[f"{node_ip}/32"],
                    apiServerPort=API_FORWARD_PORT)
    document["pools"].extend(extra_pools)
    OperatorConfig.model_validate(document)
    path.write_text(yaml.safe_dump(document))
    return path


@contextmanager
def guarded_operator(plane: ControlPlane, directory: Path, extra_pools: Sequence[dict] = (),
                     resync_seconds: int | None = RESYNC_SECONDS) -> Iterator[OperatorProcess]:
    """The operator with `real_vcluster_config` (plus `extra_pools`) and its guard on loopback, files in
    `directory`, resyncing every `resync_seconds` (None: production); stopped, and its webhook
    configurations removed, on exit."""
    running = OperatorProcess(plane, real_vcluster_config(plane, directory / "config.yaml", extra_pools),
                              plane.log_dir / "operator.log", extra_args=guard_flags(directory / "guard-certs"),
                              resync_seconds=resync_seconds).start()
    try:
        yield running
    finally:
        running.stop()
        remove_guard_configurations(plane)


def guard_in_place(plane: ControlPlane, running: OperatorProcess) -> bool:
    """Whether `running`'s guard has registered its webhook configurations and pointed the GpuTenant
    CRD's conversion at itself (with guard_flags), as a chart's readiness probe waits for the guard."""
    with plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        configurations = client.sanitize_for_serialization(admission.list_validating_webhook_configuration())
        if GUARD_CONFIGURATION not in [c["metadata"]["name"] for c in configurations.get("items") or []]:
            return False
        if "--webhook-conversion-port" not in running.extra_args:
            return True
        crd = client.sanitize_for_serialization(
            kubernetes.client.ApiextensionsV1Api(client).read_custom_resource_definition("gputenants.gputenant.io"))
    port = running.extra_args[running.extra_args.index("--webhook-conversion-port") + 1]
    client_config = ((crd["spec"].get("conversion") or {}).get("webhook") or {}).get("clientConfig") or {}
    return client_config.get("url") == f"https://127.0.0.1:{port}/convert" and bool(client_config.get("caBundle"))


def wait_for_guard(plane: ControlPlane, running: OperatorProcess, timeout: float = 90) -> None:
    """Until `guard_in_place`; AssertionError with the operator's log when it does not come."""
    try:
        wait_for(lambda: guard_in_place(plane, running), timeout=timeout, interval=0.5,
                 what="the operator's guard and conversion webhook to be in place")
    except TimeoutError as error:
        raise AssertionError(f"{error}\noperator log:\n{running.log_tail()}") from None
