"""Run the admission guard alone: a kopf operator whose registry holds only the guard, on an event
loop of its own, in a thread (``GuardThread``: the end-to-end tests, the benchmark) or in a child
process (``GuardProcess``: ``gputenant run``). Reconciliation keeps the operator's event loop, and
its interpreter, busy for seconds while many tenants onboard; pod reviews answered from there queue
behind it, so the operator serves the guard from a process with an interpreter of its own."""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf

from gputenant.config.models import OperatorConfig
from gputenant.guard.parent import CHECK_SECONDS, watch_parent
from gputenant.guard.pod_reviews import DecisionObserver, PodReviews
from gputenant.guard.server import DRAIN_SECONDS, GuardServer, server_from_args
from gputenant.guard.service_reviews import ServiceReviews
from gputenant.guard.webhook import Guard, register
from gputenant.kube import KubeClient
from gputenant.kube.client import USER_AGENT

ServerFactory = Callable[[KubeClient], GuardServer]
GUARD_USER_AGENT = f"{USER_AGENT}-guard"
"""The guard's requests, told apart from the reconciler's in the API server's audit log."""


class GuardThread:
    """``with GuardThread(kubeconfig, config) as guard:`` serves the guard on 127.0.0.1 with generated
    certificates and registered webhook configurations until the block ends. `make_server` builds
    another server (e.g. ``server_from_args``) from the thread's own client; without `kubeconfig`
    the thread logs in as kopf does by default (in-cluster service account)."""

    def __init__(self, kubeconfig: Path | None, config: OperatorConfig, *, cert_dir: Path | None = None,
                 port: int | None = None, file_check_interval: float = 60.0,
                 client_ca_file: Path | None = None, make_server: ServerFactory | None = None,
                 observe: DecisionObserver | None = None):
        self.config = config
        self.registry = kopf.OperatorRegistry()
        self.client = KubeClient.from_kubeconfig(str(kubeconfig) if kubeconfig else None, config.field_manager,
                                                 user_agent=GUARD_USER_AGENT)
        self.guard: Guard = register(self.registry, config, self.client)
        if kubeconfig is not None:
            connection = self.client.kopf_connection()
            kopf.on.login(registry=self.registry)(lambda **_: connection)
        else:
            kopf.on.login(registry=self.registry)(kopf.login_via_client)
        self.server = make_server(self.client) if make_server else GuardServer(
            self.client, config, host="127.0.0.1", port=port, cert_dir=cert_dir,
            file_check_interval=file_check_interval, client_ca_file=client_ca_file)
        self.server.pod_reviews = PodReviews(self.guard, observe)
        self.server.service_reviews = ServiceReviews(self.guard)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.error: BaseException | None = None

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

    def start(self, timeout: float = 60) -> GuardThread:
        self._thread = threading.Thread(target=self._run, name="gputenant-guard", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self.error:
            raise RuntimeError(f"the admission guard did not start: {self.error!r}")
        return self

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> GuardThread:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()



class GuardProcess:
    """``GuardThread`` in a child process (spawned, so it shares no lock or loop with the parent),
    serving with the ``gputenant run`` webhook flags in `server_args`. ``start`` returns once the
    guard serves, or raises with the child's error. The child's decisions reach `observe` (the
    operator's metrics) in this process through a queue, drained by a thread of its own."""

    def __init__(self, kubeconfig: Path | None, config: OperatorConfig, server_args: argparse.Namespace,
                 observe: DecisionObserver | None = None):
        self._context = multiprocessing.get_context("spawn")
        self._arguments = (str(kubeconfig) if kubeconfig else None, config.model_dump_json(by_alias=True),
                           server_args)
        self._stop = self._context.Event()
        self._outcome = self._context.Queue()
        self._decisions = self._context.Queue() if observe is not None else None
        self._observe = observe
        self._drain: threading.Thread | None = None
        self._process: Any | None = None

    def start(self, timeout: float = 120) -> GuardProcess:
        self._process = self._context.Process(target=_serve_in_child, name="gputenant-guard", daemon=True,
                                              args=(*self._arguments, self._stop, self._outcome,
                                                    self._decisions, os.getpid()))
        self._process.start()
        if self._decisions is not None:
            self._drain = threading.Thread(target=self._drain_decisions, name="gputenant-guard-decisions",
                                           daemon=True)
            self._drain.start()
        try:
            error = self._outcome.get(timeout=timeout)
        except queue.Empty:
            error = f"no answer in {timeout:g} s"
        if error:
            self.stop()
            raise RuntimeError(f"the admission guard did not start: {error}")
        return self

    @property
    def alive(self) -> bool:
        """Started and still running (a guard that crashed reads False)."""
        return self._process is not None and self._process.is_alive()

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        if self._process is not None:
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.terminate()
        if self._decisions is not None and self._drain is not None:
            self._decisions.put(None)
            self._drain.join(timeout)

    def _drain_decisions(self) -> None:
        assert self._decisions is not None and self._observe is not None
        while (batch := self._decisions.get()) is not None:
            for decision in batch:
                self._observe(*decision)


def _serve_in_child(kubeconfig: str | None, config_json: str, server_args: argparse.Namespace,
                    stop: Any, outcome: Any, decisions: Any = None, parent_pid: int | None = None) -> None:
    parent_gone = watch_parent(parent_pid, on_gone=stop.set) if parent_pid is not None else threading.Event()
    # A spawned process starts with Python's default logging: log as `gputenant run` was told to.
    verbose = getattr(server_args, "verbose", False)
    kopf.configure(verbose=verbose,
                   log_format=kopf.LogFormat.JSON if getattr(server_args, "json_logs", False) else kopf.LogFormat.FULL)
    if not verbose:
        # This process reconciles nothing: its per-object log is kopf's "Handler ... succeeded" line
        # and aiohttp's access line for every review of every tenant pod. The decisions are counted
        # in the metrics instead.
        for logger in ("kopf.objects", "aiohttp.access"):
            logging.getLogger(logger).setLevel(logging.WARNING)
    config = OperatorConfig.model_validate_json(config_json)

    def make_server(client: KubeClient) -> GuardServer:
        server = server_from_args(server_args, client, config)
        if server is None:
            raise ValueError("the guard process needs --webhook-host")
        return server

    sender = _BatchedSender(decisions) if decisions is not None else None
    try:
        thread = GuardThread(Path(kubeconfig) if kubeconfig else None, config, make_server=make_server,
                             observe=sender).start()
    except BaseException as error:  # reported to the parent, which raises it
        outcome.put(repr(error))
        return
    outcome.put("")
    while not stop.wait(CHECK_SECONDS) and not parent_gone.is_set():
        pass
    if parent_gone.is_set():
        logging.getLogger(__name__).warning("the operator (pid %s) is gone; the admission guard stops", parent_pid)
        for channel in (outcome, decisions):
            if channel is not None:
                channel.cancel_join_thread()  # nobody reads them any more: exit without flushing
        thread.stop(timeout=10)
        return
    # Stopped by the operator (a rollout, a drain): keep answering a while, closing each connection
    # after its answer, before the server goes (server.DRAIN_SECONDS).
    thread.server.draining.set()
    time.sleep(DRAIN_SECONDS)
    thread.stop()
    if sender is not None:
        sender.stop()


class _BatchedSender:
    """An observer that hands decisions to the parent in batches, every `interval` seconds: one
    queue write per batch instead of a wake-up of the queue's feeder thread on every review."""

    def __init__(self, decisions: Any, interval: float = 0.5):
        self._decisions = decisions
        self._interval = interval
        self._pending: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flush_forever, name="gputenant-guard-decisions", daemon=True)
        self._thread.start()

    def __call__(self, rule: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self._pending.append((rule, outcome, seconds))

    def _flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self._decisions.put_nowait(batch)

    def _flush_forever(self) -> None:
        while not self._stop.wait(self._interval):
            self._flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._flush()
