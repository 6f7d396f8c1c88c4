"""kopf wiring: one idempotent pipeline for create/resume/update, a drift timer, deletion.

Loaded by ``gputenant run``. Everything the handlers share lives in `Runtime`, built at startup
from the operator configuration; the handlers only translate pipeline outcomes into kopf's
retry semantics.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional

import kopf

from gputenant import GROUP, KIND, PLURAL, VERSION, naming
from gputenant.config.models import OperatorConfig
from gputenant.kube import ApiError, KubeClient
from gputenant.reconcile import conditions as cond
from gputenant.reconcile.offboard import offboard
from gputenant.reconcile.pipeline import API_VERSION, Reconciler, now_rfc3339
from gputenant.reconcile.ports import StepError

log = logging.getLogger(__name__)

CONFIG_ENV = "GPUTENANT_CONFIG"
KUBECONFIG_ENV = "GPUTENANT_KUBECONFIG"
RESYNC_ENV = "GPUTENANT_RESYNC_SECONDS"
DELETION_RETRY_ENV = "GPUTENANT_DELETION_RETRY_SECONDS"
RESOURCE = (GROUP, VERSION, PLURAL)


@dataclass
class Runtime:
    config: OperatorConfig
    client: KubeClient
    reconciler: Reconciler
    resync_seconds: float
    deletion_retry_seconds: float
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    def lock(self, name: str) -> asyncio.Lock:
        """One pipeline run per tenant at a time (the timer and change handlers may overlap)."""
        return self.locks.setdefault(name, asyncio.Lock())


_runtime: Optional[Runtime] = None


def runtime() -> Runtime:
    if _runtime is None:
        raise kopf.TemporaryError("the operator is still starting", delay=1)
    return _runtime


def build_runtime(config: OperatorConfig, kubeconfig: Optional[str]) -> Runtime:
    from gputenant.helm import ChartRef, VClusterReleases
    from gputenant.reconcile.adapters import HelmReleases, TokenKubeconfigs

    client = KubeClient.from_kubeconfig(kubeconfig, config.field_manager)
    releases = HelmReleases(VClusterReleases(kubeconfig), ChartRef.from_config(config.vcluster))
    issuer = TokenKubeconfigs(config.field_manager)
    return Runtime(
        config=config, client=client, reconciler=Reconciler(client, config, releases, issuer),
        resync_seconds=float(os.environ.get(RESYNC_ENV, "60")),
        deletion_retry_seconds=float(os.environ.get(DELETION_RETRY_ENV, "300")))


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_) -> None:
    """Own finalizer and annotation storage (status is ours alone), then load the configuration."""
    global _runtime
    settings.persistence.finalizer = naming.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    config_path = os.environ.get(CONFIG_ENV)
    config = OperatorConfig.load(config_path) if config_path else OperatorConfig()
    _runtime = build_runtime(config, os.environ.get(KUBECONFIG_ENV) or None)
    log.info("gpu-tenant-operator started (config %s, field manager %s)", config_path or "defaults",
             config.field_manager)


@kopf.on.cleanup()
async def cleanup(**_) -> None:
    if _runtime is not None:
        await _runtime.client.close()


@kopf.on.probe(id="tenants")
async def probe(**_) -> int:
    """Liveness: the number of tenants locked for reconciling right now (proves the loop runs)."""
    return sum(lock.locked() for lock in runtime().locks.values())


async def _reconcile(body: kopf.Body, retry: int) -> None:
    rt = runtime()
    async with rt.lock(body["metadata"]["name"]):
        outcome = await rt.reconciler.reconcile(dict(body), retry=retry)
    if outcome.retry_after is not None:
        raise kopf.TemporaryError("not ready yet; see status.conditions", delay=outcome.retry_after)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
@kopf.on.field(*RESOURCE, field=("metadata", "annotations", naming.ROTATE_ANNOTATION))
async def reconcile(body: kopf.Body, retry: int, **_) -> None:
    await _reconcile(body, retry)


@kopf.timer(*RESOURCE, interval=float(os.environ.get(RESYNC_ENV, "60")), idle=5)
async def resync(body: kopf.Body, **_) -> None:
    """Drift check and kubeconfig rotation: the same pipeline; writes only what drifted."""
    rt = runtime()
    async with rt.lock(body["metadata"]["name"]):
        await rt.reconciler.reconcile(dict(body))


@kopf.on.delete(*RESOURCE)
async def delete(body: kopf.Body, **_) -> None:
    rt = runtime()
    tenant = body["metadata"]["name"]
    spec = body.get("spec") or {}
    if spec.get("preventDeletion"):
        await _report_prevented(rt, body)
        raise kopf.TemporaryError(
            "spec.preventDeletion is true; set it to false to let the deletion proceed",
            delay=rt.deletion_retry_seconds)
    try:
        async with rt.lock(tenant):
            await offboard(rt.client, rt.reconciler.releases, rt.config, tenant,
                           retain=spec.get("deletionPolicy") == "Retain")
    except StepError as error:
        raise kopf.TemporaryError(f"{error.reason}: {error.message}", delay=10) from None
    except ApiError as error:
        raise kopf.TemporaryError(str(error), delay=10) from None


async def _report_prevented(rt: Runtime, body: kopf.Body) -> None:
    status = dict(body.get("status") or {})
    now = now_rfc3339(datetime.now(timezone.utc))
    conditions = cond.set_condition(
        list(status.get("conditions") or []), cond.DELETION_PREVENTED, "True", "PreventDeletionSet",
        "deletion is blocked while spec.preventDeletion is true", body["metadata"].get("generation"), now)
    if conditions != list(status.get("conditions") or []):
        await rt.client.patch_status(API_VERSION, KIND, body["metadata"]["name"],
                                     {"conditions": cond.ordered(conditions)})
        await rt.client.post_event({**body, "apiVersion": API_VERSION, "kind": KIND}, "Warning",
                                   "DeletionPrevented",
                                   "deletion blocked by spec.preventDeletion; set it to false to proceed", now)
