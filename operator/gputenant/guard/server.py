"""The guard's HTTPS endpoint: kopf's WebhookServer, plus what kopf does not do for us: generated
certificates renewed before expiry, webhook configurations with a namespace selector kept in sync
with the server's URL and CA bundle, callers authenticated by client certificate, pod reviews
and Service reviews answered without kopf's handler machinery (``pod_reviews``, ``service_reviews``), and no memory kept per reviewed
object."""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import logging
import socket
import ssl
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp.web
import kopf

from gputenant.config.models import OperatorConfig
from gputenant.guard.certs import CertificatePaths, ensure_certificates
from gputenant.guard.configuration import sync_webhook_configurations
from gputenant.guard.conversion import ConversionServer, conversion_client_config, sync_crd_conversion
from gputenant.guard.flags import CERT_WITHOUT_KEY
from gputenant.guard.pod_reviews import PodReviews, route
from gputenant.guard.service_reviews import ServiceReviews
from gputenant.kube import ApiError, KubeClient

log = logging.getLogger(__name__)

RENEWAL_CHECK_SECONDS = 3600.0
DRAIN_SECONDS = 3.0
"""How long a stopping guard keeps answering, each answer closing its connection: the API server
keeps reusing a connection it opened to this replica before the Service dropped it, and closing
one it is about to reuse resets the review it sends (a refused pod, the webhooks failing closed)."""


class DrainingWebhookServer(kopf.WebhookServer):
    """kopf's server, whose answers say `Connection: close` once ``draining`` is set, so each client
    drops its connection to this replica after the answer instead of the server closing it under a
    request in flight."""

    draining: threading.Event

    async def _serve(self, fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:  # type: ignore[override]
        response = await kopf.WebhookServer._serve(fn, request)
        if self.draining.is_set():
            response.force_close()
        return response


class GuardServer:
    """Set as ``settings.admission.server``. With ``cert_file``/``key_file`` it serves those (kopf
    reloads them when they change, e.g. from cert-manager); without, it generates a CA and a leaf
    for ``hostnames`` in ``cert_dir`` and renews them. Every time the server (re)starts, the
    webhook configurations are applied with its URL and CA bundle.

    With ``client_ca_file`` only callers with a client certificate signed by it get an answer
    (the API server presents one through its admission configuration's kubeconfig): the answers
    name tenants' pods and quotas, and tenant pods can reach the operator's network. With
    ``client_ca_from_cluster`` that CA is read at start from ``CLUSTER_CLIENT_CA``, where the API
    server publishes the CA of its front-proxy certificate (the chart's default).

    ``pod_reviews`` (set by ``standalone.GuardThread``, which holds the guard's decisions) answers
    the pod webhooks; a server without it refuses to start rather than leave pods to kopf.

    With ``conversion_port`` it also serves the GpuTenant CRD's conversion webhook there, with the
    same certificate, and points the CRD at it (``guard.conversion``)."""

    def __init__(self, client: KubeClient, config: OperatorConfig, *, host: str = "127.0.0.1", port: int | None = 9443,
                 listen: str | None = None, hostnames: list[str] | None = None,
                 cert_dir: Path | None = None, cert_file: Path | None = None, key_file: Path | None = None,
                 ca_file: Path | None = None, client_ca_file: Path | None = None, renewal_check_seconds: float = RENEWAL_CHECK_SECONDS,
                 file_check_interval: float = 60.0, client_ca_from_cluster: bool = False,
                 conversion_port: int | None = None):
        if (cert_file is None) != (key_file is None):
            raise ValueError(CERT_WITHOUT_KEY)
        self.client = client
        self.config = config
        self.host = host
        self.port = port
        self.listen = listen or host
        self.hostnames = hostnames or [host]
        self.generated = cert_file is None or key_file is None
        if cert_file is None or key_file is None:
            self.cert_dir = Path(cert_dir or tempfile.mkdtemp(prefix="gputenant-guard-"))
            paths = CertificatePaths.in_directory(self.cert_dir)
            self.cert_file, self.key_file, self.ca_file = paths.cert, paths.key, paths.ca_bundle
        else:
            self.cert_file, self.key_file, self.ca_file = cert_file, key_file, ca_file or cert_file
        self.client_ca_file = client_ca_file
        self.client_ca_from_cluster = client_ca_from_cluster
        self.renewal_check_seconds = renewal_check_seconds
        self.file_check_interval = file_check_interval
        self.pod_reviews: PodReviews | None = None
        self.draining = threading.Event()
        self.service_reviews: ServiceReviews | None = None
        self.conversion_port = conversion_port

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.renewal_check_seconds)
            if ensure_certificates(self.cert_dir, self.hostnames):
                log.info("renewed the admission guard's serving certificate in %s", self.cert_dir)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        if self.pod_reviews is None or self.service_reviews is None:
            raise RuntimeError("the guard's server has no pod or Service reviews to serve their webhooks with")
        served = route(without_object_memory(fn), self.pod_reviews, self.service_reviews)
        if self.generated:
            ensure_certificates(self.cert_dir, self.hostnames)
        if self.client_ca_from_cluster and self.client_ca_file is None:
            self.client_ca_file = await cluster_client_ca(self.client)
        if not self.port:
            self.port = _free_port(self.listen)
        server = DrainingWebhookServer(addr=self.listen, port=self.port, host=self.host, certfile=str(self.cert_file),
                                    pkeyfile=str(self.key_file), cafile=str(self.ca_file),
                                    file_check_interval=self.file_check_interval,
                                    verify_mode=ssl.CERT_REQUIRED if self.client_ca_file else None,
                                    verify_cafile=str(self.client_ca_file) if self.client_ca_file else None)
        server.draining = self.draining
        renewer = asyncio.create_task(self._renew_forever()) if self.generated else None
        converter = (ConversionServer(self.listen, self.conversion_port, self.cert_file, self.key_file, self.draining)
                     if self.conversion_port else None)
        keeper: asyncio.Task | None = None
        try:
            async for client_config in server(served):
                written = await sync_webhook_configurations(self.client, self.config, dict(client_config))
                log.info("admission guard serving at %s; %d webhook configurations updated",
                         client_config["url"], written)
                if converter is not None:
                    await converter.start()
                    if keeper is not None:
                        keeper.cancel()
                    keeper = asyncio.create_task(self._keep_crd_conversion(
                        conversion_client_config(dict(client_config), converter.port)))
                yield client_config
        finally:
            for task in (renewer, keeper):
                if task is not None:
                    task.cancel()
            if converter is not None:
                await converter.stop()

    async def _keep_crd_conversion(self, client_config: dict) -> None:
        """Point the CRD's conversion at this server now and every ``renewal_check_seconds``: a
        CRD re-applied from its file (GitOps, ``kubectl apply``) names the chart's Service and no
        CA bundle, and would otherwise stay so until the next certificate renewal."""
        while True:
            try:
                if await sync_crd_conversion(self.client, client_config):
                    log.info("the GpuTenant CRD's conversion webhook now points at this guard")
            except ApiError as error:
                log.warning("cannot point the GpuTenant CRD's conversion webhook at this guard: %s", error)
            await asyncio.sleep(self.renewal_check_seconds)


class _NoObjectMemory:
    """kopf keeps a memory per object named in an admission UPDATE (for handlers that also watch
    it) and forgets it only on a watch event; the guard watches no pods, so every pod ever updated
    would stay in memory. The guard's handlers use no memo, so each review gets a fresh one."""

    async def recall_memo(self, raw_body: dict, *, memobase: kopf.Memo | None = None,
                          ephemeral: bool = False) -> kopf.Memo:
        return copy.copy(memobase) if memobase is not None else kopf.Memo()


def without_object_memory(fn):
    """kopf's webhook function (a partial of its admission entry point) with no per-object memory."""
    return functools.partial(fn, memories=_NoObjectMemory())


CLUSTER_CLIENT_CA = ("kube-system", "extension-apiserver-authentication", "requestheader-client-ca-file")
"""Where the API server publishes the CA of its front-proxy (requestheader) client certificate."""


async def cluster_client_ca(client: KubeClient) -> Path:
    """The front-proxy CA the API server publishes, in a file of its own; RuntimeError naming the fix
    when it publishes none (the guard then does not start, and its webhooks refuse: fail closed)."""
    namespace, name, key = CLUSTER_CLIENT_CA
    config_map = await client.get("v1", "ConfigMap", name, namespace)
    pem = ((config_map or {}).get("data") or {}).get(key)
    if not pem:
        raise RuntimeError(
            f"the API server publishes no {key} in ConfigMap {namespace}/{name}, so the admission guard cannot "
            "tell the API server from other callers; start kube-apiserver with --requestheader-client-ca-file and "
            "--proxy-client-cert-file and present that certificate to webhooks (docs/install.md, \"The guard's "
            "callers\"), or set the chart's webhook.clientCA to ConfigMap or None")
    path = Path(tempfile.mkdtemp(prefix="gputenant-guard-client-ca-")) / "ca.crt"
    path.write_text(pem)
    log.info("the admission guard answers only callers with a client certificate from %s/%s %s",
             namespace, name, key)
    return path


def _free_port(address: str) -> int:
    """A port chosen once, so restarts on renewed certificates keep the webhook URL."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def server_from_args(args: argparse.Namespace, client: KubeClient, config: OperatorConfig) -> GuardServer | None:
    """A GuardServer from the flags of `guard.flags.add_webhook_arguments`, or None if --webhook-host is unset."""
    if not args.webhook_host:
        return None
    return GuardServer(client, config, host=args.webhook_host, port=args.webhook_port, listen=args.webhook_listen,
                       cert_dir=args.webhook_cert_dir, cert_file=args.webhook_cert, key_file=args.webhook_key,
                       ca_file=args.webhook_ca, client_ca_file=args.webhook_client_ca,
                       client_ca_from_cluster=args.webhook_client_ca_from_cluster,
                       conversion_port=args.webhook_conversion_port)
