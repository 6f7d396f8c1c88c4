"""A stopping guard keeps answering for server.DRAIN_SECONDS, each answer closing its connection, so
the API server drops its connections to this replica instead of the replica closing one under a
review in flight (a rollout's refused pod, seen once in 353 creations before)."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import aiohttp.test_utils
import aiohttp.web

from gputenant.guard.server import DrainingWebhookServer


async def answer(draining: bool) -> tuple[str | None, dict]:
    server = DrainingWebhookServer(addr="127.0.0.1", port=1)
    server.draining = threading.Event()
    if draining:
        server.draining.set()

    async def fn(request: dict, **_: object) -> dict:
        return {"response": {"uid": request["request"]["uid"], "allowed": True}}

    async def serve(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await server._serve(fn, request)

    app = aiohttp.web.Application()
    app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
    async with aiohttp.test_utils.TestClient(aiohttp.test_utils.TestServer(app)) as client:
        reply = await client.post("/validate-pod", json={"request": {"uid": "u-1"}})
        return reply.headers.get("Connection"), await reply.json()


def test_a_serving_guard_keeps_connections_alive():
    connection, body = asyncio.run(answer(draining=False))
    assert connection in (None, "keep-alive") and body["response"]["allowed"] is True


def test_a_draining_guard_answers_and_closes_the_connection():
    connection, body = asyncio.run(answer(draining=True))
    assert connection == "close" and body["response"]["uid"] == "u-1"
