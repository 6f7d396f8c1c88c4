"""One run of the local demo: start everything, watch the tenants, print how to use one, stop.

Everything is real except the GPU nodes: the plane has a real node (containerd, kubelet) running
each tenant's REAL vCluster from the upstream chart, with the project's images imported and the
real local-path-provisioner as default StorageClass for its data; the operator, on the host,
reaches each vCluster by NodePort at the node's address. kwok keeps the pools' GPU nodes
(kubeplane.gpu_nodes) Ready, as no GPU is here. The operator serves its admission guard on
loopback, registered before the tenants are applied, so their pods (the vCluster pod included) are
admitted through it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import kubernetes
import yaml

from gputenant import GROUP, PLURAL, VERSION
from gputenant.api.v1alpha1 import GpuTenant, SubjectKind
from gputenant.config.models import OperatorConfig
from kubeplane import PlaneError, wait_for
from kubeplane.demo.defaults import (
    LOCAL_CHART,
    SIMULATION_NOTICE,
    SOURCE_ROOT,
    TENANT_CRD,
)
from kubeplane.demo.inputs import (
    DevError,
    DevOptions,
    expose_at_node,
    load_tenant_manifests,
    local_operator_config,
    simulated_gpu_nodes,
    with_local_kubernetes,
)
from kubeplane.demo.status import assess, failure_report, format_table, pick_demo_tenant
from kubeplane.gpu_nodes import GpuNode
from kubeplane.operator_process import OperatorProcess
from kubeplane.process import free_ports

if TYPE_CHECKING:
    from kubeplane import ControlPlane
    from kubeplane.argocd import ArgoCD
    from kubeplane.kwok import Kwok
    from kubeplane.storage import LocalPathProvisioner

FIELD_MANAGER = "platform-engineer"
"""Who applies the example tenants: the demo's stand-in for the person running kubectl."""
POLL_SECONDS = 1.0
MAX_DIRECTORY_LENGTH = 56
"""The kubelet's longest socket path is the directory plus ~50 characters
(`/node/kubelet/root/device-plugins/kubelet.sock`), and a Unix socket path has at most 107 bytes."""
GUARD_CONFIGURATION = "gputenant-guard"


class Session:
    """Starts the pieces in order and stops whatever was started, in reverse, on any exit."""

    def __init__(self, options: DevOptions, out: TextIO = sys.stdout):
        self.options = options
        self.out = out
        self.started_at = time.monotonic()
        self._plane: ControlPlane | None = None
        self.kwok: Kwok | None = None
        self.provisioner: LocalPathProvisioner | None = None
        self._operator: OperatorProcess | None = None
        self.argocd: ArgoCD | None = None
        self._table_lines = 0

    @property
    def plane(self) -> ControlPlane:
        """The plane start_plane() started; every later step runs on it."""
        if self._plane is None:
            raise DevError("the control plane is not started")
        return self._plane

    @property
    def operator(self) -> OperatorProcess:
        """The operator start_operator() started."""
        if self._operator is None:
            raise DevError("the operator is not started")
        return self._operator

    # -- output ---------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started_at:6.1f}s] {message}", file=self.out, flush=True)

    def show_table(self, table: str, previous: str | None) -> None:
        """Redraw in place on a terminal; elsewhere (CI, tests) print only when the table changes."""
        if table == previous:
            return
        if self.out.isatty() and self._table_lines:
            self.out.write(f"\x1b[{self._table_lines}F\x1b[J")
        elif not self.out.isatty():
            self.say("tenants:")
        self.out.write(table + "\n")
        self.out.flush()
        self._table_lines = table.count("\n") + 1

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> int:
        """The whole demo; returns the exit status. Always stops what it started."""
        try:
            return self._run()
        except DevError as error:
            print(f"kubeplane.demo: {error}", file=sys.stderr)
            return 2
        except PlaneError as error:
            print(f"kubeplane.demo: {error}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            self.say("interrupted")
            return 130
        finally:
            self.stop()

    def _run(self) -> int:
        for required in (TENANT_CRD, LOCAL_CHART / "Chart.yaml"):
            if not required.is_file():
                raise DevError(f"{required} is missing: the local demo runs from a source checkout of "
                               "gpu-tenant-operator (git clone, then `make dev`) beside ../shared/third_party")
        options = self.options
        if len(str(options.directory.absolute())) > MAX_DIRECTORY_LENGTH:
            raise DevError(f"--dir {options.directory}: at most {MAX_DIRECTORY_LENGTH} characters as an absolute "
                           "path (the node's kubelet sockets live under it, and a Unix socket path has at most 107 "
                           "bytes); pass a shorter directory, e.g. --dir /tmp/gputenant-dev")
        manifests = load_tenant_manifests(options.tenants_path)
        config_document = local_operator_config(options.config_path)
        config = OperatorConfig.model_validate(config_document)
        nodes = simulated_gpu_nodes(options.config_path, config)

        print(SIMULATION_NOTICE, file=self.out, flush=True)
        self.start_plane()
        self.prepare_node(config)
        self.install_crds()
        self.create_gpu_nodes(config, nodes)
        self.start_operator(expose_at_node(config_document, self.plane.require_node().network.node_ip))
        if options.argocd:
            self.start_argocd()
        self.apply_tenants(manifests)

        names = [m["metadata"]["name"] for m in manifests]
        if not self.watch(names):
            return 1
        self.say(f"all {len(names)} tenants are Ready")
        self.print_pools()
        self.print_usage([GpuTenant.from_body(m) for m in manifests])
        if options.exit_when_ready:
            return 0
        print("Running until Ctrl-C (or SIGTERM); then everything above is stopped.", file=self.out, flush=True)
        return self.wait_for_interrupt()

    def start_plane(self) -> None:
        from kubeplane import ControlPlane

        directory = self.options.directory
        self.say(f"starting the local control plane in {directory} (etcd, kube-apiserver, "
                 "kube-controller-manager, kube-scheduler and a node: containerd and kubelet; tools built by "
                 "`make tools`)")
        directory.mkdir(parents=True, exist_ok=True)
        self._plane = ControlPlane(directory, node=True).start()
        # The operator and its helm calls inherit the plane's kubeconfig, pinned tools and helm homes.
        os.environ.update(self.plane.env())
        # As the server reports it, so a run on another version (GPUTENANT_KUBE_VERSION) says which.
        with self.plane.api_client() as client:
            served = kubernetes.client.VersionApi(client).get_code().git_version
        self.say(f"control plane up at {self.plane.api_url} (Kubernetes {served}), node at "
                 f"{self.plane.require_node().network.node_ip}, in {self.plane.start_seconds:.1f}s")

    def prepare_node(self, config: OperatorConfig) -> None:
        """The vCluster images (written by the project from binaries built from Go modules) in the
        node's containerd, the configuration's CPU-pool labels on the node (the guard sends tenant
        pods without GPUs there) and a default StorageClass for the vCluster's data claim."""
        from kubeplane.fixtures import label_cpu_node
        from kubeplane.storage import LocalPathProvisioner
        from kubeplane.vcluster_images import vcluster_images

        images = vcluster_images(self.plane.bin_dir)
        self.plane.require_node().containerd.import_images(list(images.values()))
        label_cpu_node(self.plane, config.cpu_pool.node_selector)
        self.provisioner = LocalPathProvisioner().start(self.plane)
        self.say(f"imported {', '.join(images)} into the node; local-path-provisioner is the default StorageClass")

    def install_crds(self) -> None:
        from kubeplane.fixtures import UPSTREAM_QUEUE_CRD, install_crds, install_kai_queue_crd

        install_crds(self.plane, TENANT_CRD)
        queue_crd = install_kai_queue_crd(self.plane)
        source = "upstream KAI-Scheduler" if queue_crd == UPSTREAM_QUEUE_CRD else "the project's minimal"
        self.say(f"installed CRDs: {TENANT_CRD.relative_to(SOURCE_ROOT)} and {source} Queue CRD ({queue_crd})")

    def create_gpu_nodes(self, config: OperatorConfig, nodes: list[GpuNode]) -> None:
        from kubeplane.gpu_nodes import create_nodes
        from kubeplane.kwok import Kwok

        self.kwok = Kwok().start(self.plane)
        with self.plane.api_client() as client:
            create_nodes(client, nodes)
        self.plane.create_namespace(config.device_plugin_config_map.namespace)
        written = asyncio.run(self._apply_pools(config))
        self.say(f"created {len(nodes)} GPU nodes for {len(config.pools)} pools, SIMULATED by kwok "
                 f"(no GPUs here: Nodes labelled and sized as the GPU Operator leaves them, kept Ready by "
                 f"kwok, which runs the pods bound to them without containers); "
                 f"pool configuration applied to {written} objects")

    async def _apply_pools(self, config: OperatorConfig) -> int:
        from gputenant.kube import KubeClient
        from gputenant.pools.apply import apply_pools

        async with KubeClient.from_kubeconfig(str(self.plane.kubeconfig_path), config.field_manager) as client:
            result = await apply_pools(client, config)
        return len(result.written)

    def start_argocd(self) -> None:
        from kubeplane.argocd import ArgoCD

        self.say("starting Argo CD (redis, repo server, application and ApplicationSet controllers, "
                 "built by `make tools`)")
        argocd = ArgoCD(self.options.directory / "argocd").start(self.plane)
        self.argocd = argocd
        print(argocd.how_to_use(), file=self.out, flush=True)

    def start_operator(self, config_document: dict) -> None:
        config_path = self.options.directory / "operator-config.yaml"
        config_path.write_text(yaml.safe_dump(config_document, sort_keys=False))
        log_path = self.plane.log_dir / "operator.log"
        guard_port, conversion_port = free_ports(2)
        self._operator = OperatorProcess(
            self.plane, config_path, log_path, ["--webhook-host", "127.0.0.1", "--webhook-port", str(guard_port),
                                                "--webhook-conversion-port", str(conversion_port),
                                                "--webhook-cert-dir", str(self.options.directory / "guard-certs")],
            resync_seconds=None, deletion_retry_seconds=None, kubeconfig_path=self.plane.kubeconfig_path).start()
        self.say(f"started the operator (pid {self.operator.pid}, log {log_path}); vClusters exposed by NodePort "
                 f"at {config_document['vcluster']['exposure']['address']}")
        self.wait_for_guard()
        self.say(f"admission guard serving at https://127.0.0.1:{guard_port} (webhook configurations "
                 f"{GUARD_CONFIGURATION})")

    def wait_for_guard(self, timeout: float = 60) -> None:
        """Until the operator has registered its webhook configurations, so the tenants' pods go
        through the guard from the first one."""
        with self.plane.api_client() as client:
            admission = kubernetes.client.AdmissionregistrationV1Api(client)

            def registered() -> bool:
                self.operator.check_running()
                try:
                    admission.read_validating_webhook_configuration(GUARD_CONFIGURATION)
                except kubernetes.client.ApiException as error:
                    if error.status == 404:
                        return False
                    raise
                return True
            try:
                wait_for(registered, timeout=timeout, interval=0.5, what="the admission guard")
            except TimeoutError:
                raise DevError(f"the operator did not register its admission guard within {timeout:g}s; "
                               f"see {self.plane.log_dir / 'operator.log'}") from None

    def apply_tenants(self, manifests: list[dict]) -> None:
        from kubeplane.tools import pinned_versions

        version = pinned_versions()["kube"]
        result = self.plane.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                                    input=yaml.safe_dump_all(with_local_kubernetes(manifests, version)))
        self.say(f"kubectl apply -f {self.options.tenants_path} (spec.vcluster.kubernetesVersion {version}, "
                 "the distro image built here, where unset):\n" + result.stdout.rstrip())

    def watch(self, names: list[str]) -> bool:
        """Refresh the table until every tenant is Ready (True); False when it cannot get there."""
        deadline = time.monotonic() + self.options.timeout_seconds
        previous = None
        reported: set[tuple[str, str]] = set()
        with self.plane.api_client() as client:
            custom = kubernetes.client.CustomObjectsApi(client)
            while True:
                self.operator.check_running()
                bodies = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]  # type: ignore[index]
                verdict = assess(bodies, names)
                table = format_table(verdict.rows)
                self.show_table(table, previous)
                previous = table
                if verdict.all_ready:
                    return True
                new_failures = [row for row in verdict.failed if (row.name, row.reason) not in reported]
                if new_failures:
                    print(failure_report(new_failures), file=self.out, flush=True)
                    self._table_lines = 0  # the next table goes below the report, not over it
                    reported.update((row.name, row.reason) for row in new_failures)
                    if self.options.exit_when_ready:
                        self.say("stopping: a tenant failed for a reason the operator does not retry; "
                                 "fix its spec (kubectl edit gputenant NAME) and run again")
                        return False
                if time.monotonic() > deadline:
                    waiting = [row for row in verdict.rows if row.ready != "True"]
                    print(failure_report(waiting), file=self.out)
                    self.say(f"gave up after {self.options.timeout_seconds:g}s; operator log: "
                             f"{self.plane.log_dir / 'operator.log'}")
                    return False
                time.sleep(POLL_SECONDS)

    def print_pools(self) -> None:
        pools = self._command("pools", "--config", str(self.options.directory / "operator-config.yaml"))
        print(f"\n$ gputenant pools\n{pools.rstrip()}\n", file=self.out, flush=True)

    def _command(self, *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "gputenant.cli", *args], check=True,
                              capture_output=True, text=True).stdout

    def print_usage(self, tenants: list[GpuTenant]) -> None:
        name = pick_demo_tenant(tenants)
        if name is None:
            print("No tenant issues a view kubeconfig usable from here; see docs/local-demo.md.", file=self.out)
            return
        tenant = next(t for t in tenants if t.metadata.name == name)
        path = f"{shlex.quote(str(Path(sys.executable).parent))}:{shlex.quote(str(self.plane.bin_dir))}"
        print("\n".join([
            f"Use tenant {name}'s view kubeconfig with kubectl. From another shell:",
            "",
            f'    export PATH={path}:"$PATH"',
            f"    export KUBECONFIG={shlex.quote(str(self.plane.kubeconfig_path))}",
            f"    gputenant kubeconfig {name} --role view > team.kubeconfig",
            "    kubectl --kubeconfig team.kubeconfig get namespaces",
            "",
            "KUBECONFIG above is the host plane's admin. The kubeconfig Secret is readable only by the",
            f"tenant's owners; {self.owner_hint(tenant)}",
            "The namespaces listed are the virtual cluster's (its real vCluster, reached by NodePort at the",
            f"node's address {self.plane.require_node().network.node_ip}), not the host's.",
            "",
        ]), file=self.out, flush=True)

    def owner_hint(self, tenant: GpuTenant) -> str:
        """A kubeconfig for one of the tenant's owners, to show the same command works for them."""
        owner = tenant.spec.owners[0]
        if owner.kind is SubjectKind.GROUP:
            user, groups, who = f"{owner.name}-member", [owner.name], f"a member of group {owner.name}"
        elif owner.kind is SubjectKind.SERVICE_ACCOUNT:
            user, groups = f"system:serviceaccount:{owner.namespace}:{owner.name}", ["system:serviceaccounts"]
            who = f"ServiceAccount {owner.namespace}/{owner.name}"
        else:
            user, groups, who = owner.name, [], f"user {owner.name}"
        path = self.plane.user(user, groups)
        return f"as {who}, add --kubeconfig {shlex.quote(str(path))} to the gputenant command."

    def wait_for_interrupt(self) -> int:
        """Until Ctrl-C or SIGTERM (both arrive as KeyboardInterrupt); 1 if the operator dies."""
        try:
            while True:
                self.operator.check_running()
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            self.say("stopping")
            return 0

    def stop(self) -> None:
        """Argo CD, then the operator (so it acts on nothing while the rest goes), then the provisioner and kwok,
        then the plane (with its node and the vCluster pods on it). A second Ctrl-C must not cut this short and leave
        processes."""
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            if self.argocd is not None:
                self.argocd.stop()
                self.argocd = None
            if self._operator is not None:
                self._operator.stop()
                self._operator = None
            if self.provisioner is not None:
                self.provisioner.stop()
                self.provisioner = None
            if self.kwok is not None:
                self.kwok.stop()
                self.kwok = None
            if self._plane is not None:
                self._plane.stop()
                self.say(f"stopped everything; logs kept in {self._plane.log_dir}")
                self._plane = None
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
