"""The admission guard's own latency, measured as the API server sees it but without the API server.

``probe(url, ca_file, pods, rate)`` sends, for each pod, the two AdmissionReviews the API server
would send on its creation (mutate, then validate with the mutated pod), straight to the guard's
HTTPS endpoint over kept-alive TLS connections, paced at ``rate`` pods per second, and returns the
round-trip time of both calls together per pod. End-to-end creation latency through the API
server also holds the API server's own work (which, on a machine where it shares two cores with
etcd and the operator, is most of it); this is the part the guard is answerable for.

``probe_at_priority`` runs the probe in a process of its own ahead of the rest of the machine
(niceness -10 where allowed): in a cluster the client, the API server, has CPUs of its own, and a
probe waiting for a CPU behind etcd would count its own wait against the guard.
"""

from __future__ import annotations

import base64
import gc
import http.client
import json
import multiprocessing
import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlsplit

import jsonpatch

from bench.measure import paced
from gputenant.guard.configuration import MUTATE_POD, VALIDATE_POD


def admission_review(pod: dict, namespace: str, username: str) -> dict:
    """An AdmissionReview of a dry-run CREATE of `pod` by `username`, shaped as kube-apiserver sends it."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"]["name"], "namespace": namespace, "operation": "CREATE",
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": {**pod, "metadata": {**pod["metadata"], "namespace": namespace}},
        "oldObject": None, "dryRun": True,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "dryRun": ["All"]},
    }}


class _Connections:
    """One kept-alive HTTPS connection per worker thread, as the API server keeps its own."""

    def __init__(self, url: str, ca_file: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.context = ssl.create_default_context(cafile=ca_file)
        self.local = threading.local()

    def post(self, path: str, body: dict) -> dict:
        connection = getattr(self.local, "connection", None)
        if connection is None:
            connection = self.local.connection = http.client.HTTPSConnection(self.host, self.port,
                                                                            context=self.context, timeout=10)
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"the guard answered {path} with HTTP {response.status}: {payload[:300]!r}")
        return json.loads(payload)["response"]


def review_pod(connections: _Connections, pod: dict, namespace: str, username: str) -> float:
    """Seconds the guard took to answer both webhooks for one pod; raises if it refused the pod."""
    review = admission_review(pod, namespace, username)
    began = time.perf_counter()
    mutated = connections.post(f"/{MUTATE_POD}", review)
    elapsed = time.perf_counter() - began
    if mutated.get("patch"):
        review["request"]["object"] = jsonpatch.apply_patch(
            review["request"]["object"], json.loads(base64.b64decode(mutated["patch"])))
    began = time.perf_counter()
    validated = connections.post(f"/{VALIDATE_POD}", review)
    elapsed += time.perf_counter() - began
    if not validated.get("allowed"):
        raise RuntimeError(f"the guard refused the probe's pod: {validated.get('status')}")
    return elapsed


def probe(url: str, ca_file: str, make_pod: Callable[[], dict], namespace: str, username: str,
          rate: int, count: int) -> list[float]:
    """`count` pods paced at `rate` per second; the guard's seconds per pod (both webhooks)."""
    connections = _Connections(url, ca_file)
    collecting = gc.isenabled()
    gc.disable()  # a collection of this process's heap would stop every probe thread and count against the guard
    try:
        return paced(rate, count, lambda _: review_pod(connections, make_pod(), namespace, username))[0]
    finally:
        if collecting:
            gc.enable()

PROBE_NICENESS = -10


def probe_at_priority(url: str, ca_file: str, make_pod: Callable[[], dict], namespace: str, username: str,
                      rate: int, count: int) -> tuple[list[float], int]:
    """``probe`` in a spawned process at niceness PROBE_NICENESS (unchanged where not permitted);
    the latencies and the niceness the probe ran at. `make_pod` must be importable (pickled by name)."""
    with multiprocessing.get_context("spawn").Pool(1, initializer=_raise_priority) as pool:
        return pool.apply(_probe_with_niceness, (url, ca_file, make_pod, namespace, username, rate, count))


def _raise_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, 0, PROBE_NICENESS)
    except PermissionError:
        pass  # not root: the probe runs at the niceness it was given


def _probe_with_niceness(*args) -> tuple[list[float], int]:
    return probe(*args), os.getpriority(os.PRIO_PROCESS, 0)
