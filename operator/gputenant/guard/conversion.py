"""The GpuTenant CRD's conversion webhook: ``api.conversion.review`` served over HTTPS on a port of
its own, and the CRD's ``spec.conversion`` kept pointing at it with the guard's CA bundle.

A port of its own because the API server calls conversion webhooks without a client certificate
(apiextensions-apiserver builds their client from an empty kubeconfig), while the admission port
answers only callers that present one. Nothing is lost by that: a conversion answer is a pure
function of the objects in the request, and says nothing about the cluster.

While no replica answers, the API server fails every request that needs a conversion (HTTP 500,
``conversion webhook for gputenant.io/<version>, Kind=GpuTenant failed``); requests in the version an
object is stored in need none and keep working (docs/api-versions.md, "When the operator is down").
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp.web

from gputenant.api.conversion import review
from gputenant.api.crd import CONVERSION_PATH, conversion
from gputenant.api.group import GROUP, PLURAL
from gputenant.guard.configuration import SERVICE_HOST
from gputenant.kube import KubeClient, holds
from gputenant.kube.storage_migration import CRD_API

log = logging.getLogger(__name__)

CRD_NAME = f"{PLURAL}.{GROUP}"
MAX_REVIEW_BYTES = 32 << 20
"""A list read through the other version is converted in one review: a few thousand tenants with
their annotations and managedFields. Larger lists should page (kubectl and Argo CD do)."""
CONCURRENT_REVIEWS = 1
"""Reviews decoded and converted at once, in a thread: the guard's event loop also answers the pod
webhooks (which fail closed after 10 s), so a large or hostile body must not hold it."""


def _converted(text: str) -> dict[str, Any]:
    """The answer to a request body, or ValueError when it is no ConversionReview."""
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("kind") != "ConversionReview":
        raise ValueError("not a ConversionReview")
    return review(body)


class ConversionServer:
    """``POST /convert`` over TLS with ``cert_file``/``key_file``; ``start`` again after they change.
    While ``draining`` is set every answer closes its connection, as the admission port's do
    (``server.DRAIN_SECONDS``), so the API server does not reuse one the server is about to close."""

    def __init__(self, listen: str, port: int, cert_file: Path, key_file: Path, draining: threading.Event | None = None):
        self.listen = listen
        self.port = port
        self.cert_file = cert_file
        self.key_file = key_file
        self.draining = draining or threading.Event()
        self._runner: aiohttp.web.AppRunner | None = None
        self._reviews = asyncio.Semaphore(CONCURRENT_REVIEWS)

    async def _answer(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        text = await request.text()
        async with self._reviews:
            try:
                answer = await asyncio.get_running_loop().run_in_executor(None, _converted, text)
            except ValueError as error:
                response: aiohttp.web.Response = aiohttp.web.json_response(
                    {"message": f"not a ConversionReview: {error}"}, status=400)
            else:
                response = aiohttp.web.json_response(answer)
        if self.draining.is_set():
            response.force_close()
        return response

    async def start(self) -> None:
        await self.stop()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        app = aiohttp.web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.add_routes([aiohttp.web.post(CONVERSION_PATH, self._answer)])
        runner = aiohttp.web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        await aiohttp.web.TCPSite(runner, self.listen, self.port, ssl_context=context).start()
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def conversion_client_config(webhook_client_config: dict[str, Any], port: int) -> dict[str, Any]:
    """The CRD's webhook clientConfig for the conversion port, from kopf's {url, caBundle} of the
    admission port: a Service's own name becomes a ``service`` reference (as the admission
    configurations do), any other host a URL."""
    url = urlsplit(webhook_client_config["url"])
    service = SERVICE_HOST.fullmatch(url.hostname or "")
    config: dict[str, Any]
    if service:
        config = {"service": {"namespace": service["namespace"], "name": service["name"], "port": port,
                              "path": CONVERSION_PATH}}
    else:
        host = f"[{url.hostname}]" if ":" in (url.hostname or "") else url.hostname
        config = {"url": urlunsplit(("https", f"{host}:{port}", CONVERSION_PATH, "", ""))}
    if webhook_client_config.get("caBundle"):
        config["caBundle"] = webhook_client_config["caBundle"]
    return config


async def sync_crd_conversion(client: KubeClient, client_config: dict[str, Any]) -> bool:
    """Point the CRD's conversion at ``client_config`` unless it already does; whether it wrote."""
    desired = {"apiVersion": CRD_API[0], "kind": CRD_API[1],
               "metadata": {"name": CRD_NAME}, "spec": {"conversion": conversion(client_config)}}
    live = await client.get(*CRD_API, CRD_NAME)
    if live is None:
        log.warning("CRD %s is missing: no conversion webhook to point at this guard", CRD_NAME)
        return False
    if holds(desired, live):
        return False
    # A merge patch, so the other of url and service is removed (an apply would keep the one the
    # chart wrote beside it, and the API server refuses a clientConfig with both).
    patch = conversion({"url": None, "service": None, "caBundle": None, **client_config})
    await client.patch(*CRD_API, CRD_NAME, {"spec": {"conversion": patch}})
    return True
