"""Run the admission guard alone, in a background thread: a kopf operator whose registry holds only
the guard, on an event loop of its own. Reconciliation keeps its event loop busy for seconds while
many tenants onboard; pod reviews answered from that loop queue behind it (p99 83.7 ms at 50 pods/s
during a 200-tenant onboarding), so ``gputenant run`` serves the guard from this thread. The
end-to-end tests and ``bench/webhook_latency.py`` use it the same way."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import kopf
import kubernetes

from gputenant.config.models import OperatorConfig
from gputenant.guard.server import GuardServer
from gputenant.guard.webhook import Guard, register
from gputenant.kube import KubeClient


def _connection(kubeconfig: Path) -> kopf.ConnectionInfo:
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return kopf.ConnectionInfo(server=configuration.host, ca_path=configuration.ssl_ca_cert,
                               certificate_path=configuration.cert_file, private_key_path=configuration.key_file)


ServerFactory = Callable[[KubeClient], GuardServer]


class GuardThread:
    """``with GuardThread(kubeconfig, config) as guard:`` serves the guard on 127.0.0.1 with generated
    certificates and registered webhook configurations until the block ends. `make_server` builds
    another server (e.g. ``server_from_args``) from the thread's own client; without `kubeconfig`
    the thread logs in as kopf does by default (in-cluster service account)."""

    def __init__(self, kubeconfig: Optional[Path], config: OperatorConfig, *, cert_dir: Optional[Path] = None,
                 port: Optional[int] = None, file_check_interval: float = 60.0,
                 client_ca_file: Optional[Path] = None, make_server: Optional[ServerFactory] = None):
        self.config = config
        self.registry = kopf.OperatorRegistry()
        self.client = KubeClient.from_kubeconfig(str(kubeconfig) if kubeconfig else None, config.field_manager)
        self.guard: Guard = register(self.registry, config, self.client)
        if kubeconfig is not None:
            connection = _connection(Path(kubeconfig))
            kopf.on.login(registry=self.registry)(lambda **_: connection)
        else:
            kopf.on.login(registry=self.registry)(kopf.login_via_client)
        self.server = make_server(self.client) if make_server else GuardServer(
            self.client, config, host="127.0.0.1", port=port, cert_dir=cert_dir,
            file_check_interval=file_check_interval, client_ca_file=client_ca_file)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._ready = threading.Event()
        self.error: Optional[BaseException] = None

    async def _main(self) -> None:
        settings = kopf.OperatorSettings()
        settings.admission.server = self.server
        settings.posting.enabled = False
        settings.watching.server_timeout = 300
        try:
            await kopf.operator(registry=self.registry, settings=settings, clusterwide=True, standalone=True,
                                stop_flag=self._stop, ready_flag=self._ready)
        finally:
            await self.client.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # surfaced to the caller by start()/stop()
            self.error = error
            self._ready.set()

    def start(self, timeout: float = 60) -> "GuardThread":
        self._thread = threading.Thread(target=self._run, name="gputenant-guard", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self.error:
            raise RuntimeError(f"the admission guard did not start: {self.error!r}")
        return self

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> "GuardThread":
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()

