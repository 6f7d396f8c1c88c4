"""Tenant pod creations at a steady rate from a thread, each outcome recorded with its time: what a
test counts while the admission guard's replicas are replaced (an upgrade, a lost leader). Server-side
dry runs: every webhook is called, nothing is stored."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterable

import kubernetes

from .images import TEST_IMAGE

CREATIONS_PER_SECOND = 5

CUT_CONNECTION = ("connection reset by peer", "use of closed network connection", ": EOF")
"""How the API server reports a webhook call it sent on a keep-alive connection the replica closed
at that instant. HTTP/1.1 cannot announce a close and the API server retries no webhook POST
(kubernetes/kubernetes#127335, open), so a replica that stops can cut one such call."""

MOST_CUT_CONNECTIONS = 1
"""What the rollout tests tolerate of CUT_CONNECTION per stream: a refusal by a replica, an
unreachable guard or a timeout is never tolerated."""


def probe_pod(number: int) -> dict:
    """A pod every trust level's Pod Security admits, asking for no GPU."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"probe-{number}"},
            "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                         "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "main", "image": TEST_IMAGE, "command": ["sleep", "60"],
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                                   "limits": {"cpu": "100m", "memory": "32Mi"}},
                                     "securityContext": {"allowPrivilegeEscalation": False,
                                                         "capabilities": {"drop": ["ALL"]}}}]}}


def _message(error: kubernetes.client.ApiException) -> str:
    """The Status's message (where the API server names the webhook and the transport's error)."""
    try:
        return str(json.loads(error.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        return str(error.body or "")


def rollout_failures(outcomes: Iterable[str]) -> tuple[Counter[str], Counter[str]]:
    """Split what was not admitted into (refused or failed, cut connections): the second is the
    API server's 500 for a webhook call on a connection the replica closed under it."""
    refused: Counter[str] = Counter()
    cut: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome == "admitted":
            continue
        is_cut = outcome.startswith("500 ") and "failed calling webhook" in outcome and any(
            words in outcome for words in CUT_CONNECTION)
        (cut if is_cut else refused)[outcome] += 1
    return refused, cut


class CreationStream:
    """`with CreationStream(plane, namespace) as stream:` ... `stream.outcomes`: (monotonic time,
    "admitted" or the refusal or error)."""

    def __init__(self, plane, namespace: str):
        self.plane = plane
        self.namespace = namespace
        self.outcomes: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            number = 0
            while not self._stop.is_set():
                number += 1
                started = time.monotonic()
                try:
                    core.create_namespaced_pod(self.namespace, probe_pod(number), dry_run="All",  # type: ignore[arg-type]
                                               _request_timeout=15)
                    outcome = "admitted"
                except kubernetes.client.ApiException as error:
                    outcome = f"{error.status} {error.reason}: {_message(error)[:400]}"
                except Exception as error:  # noqa: BLE001 (a connection error is an outcome to count)
                    outcome = f"error: {error!r}"[:200]
                self.outcomes.append((started, outcome))
                self._stop.wait(max(0.0, 1 / CREATIONS_PER_SECOND - (time.monotonic() - started)))

    def __enter__(self) -> CreationStream:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(30)
