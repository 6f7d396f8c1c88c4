"""kopf wiring: the indexes a pass reads instead of the API server (`reconcile.cache.WatchCache`),
the pods of the tenants' host namespaces, the KAI Queues and the GpuTenants. The pod index rides on
the pod watch the operator runs anyway (control planes, gang PodGroups), the tenant index on its
GpuTenant watch; the Queues are few and small. Each object is kept as its compact JSON
(`kube.packed`) and decoded where a pass reads it (`WatchCache`).

Each index handler is a coroutine: kopf runs plain functions in its thread pool, and what a thread
allocates lands in a malloc arena of its own, which fragments the process's memory (and the thread
hand-off costs more than the copy).

Registered into a cell's kopf registry by `gputenant.handlers.register`.
"""

from __future__ import annotations

import kopf

from gputenant import GROUP, PLURAL, VERSION, naming
from gputenant.cell import Cell
from gputenant.kube.packed import pack
from gputenant.reconcile.cache import HOST_PODS_INDEX, QUEUES_INDEX, TENANTS_INDEX
from gputenant.tenant_status.fields import has_merge_patched_status


def _kept(body: kopf.Body, spec: dict | None = None) -> dict:
    """The object as the watch last saw it, without its managedFields (nobody reads them here), its
    spec replaced by `spec` when given."""
    raw = dict(body)
    metadata = {key: value for key, value in (raw.get("metadata") or {}).items() if key != "managedFields"}
    return {**raw, "metadata": metadata, **({"spec": spec} if spec is not None else {})}


POD_SPEC_KEPT = ("nodeName", "schedulerName", "priorityClassName")
CONTAINER_KEPT = ("name", "resources")


def kept_pod(body: kopf.Body) -> dict:
    """What a pass reads of a host pod (its control plane's readiness, the tenant's view): all its
    metadata but managedFields, its status, and of its spec only where it runs and each container's
    name and resources. The rest (volumes, commands, environment, probes) is most of a pod and
    nobody here reads it; client-go's informers drop such parts with a transform likewise."""
    spec = dict(body.get("spec") or {})
    slim = {key: spec[key] for key in POD_SPEC_KEPT if key in spec}
    for containers in ("initContainers", "containers"):
        if containers in spec:
            slim[containers] = [{key: c[key] for key in CONTAINER_KEPT if key in c} for c in spec[containers]]
    return _kept(body, spec=slim)


def register(registry: kopf.OperatorRegistry, cell: Cell) -> None:
    """The three indexes, into the cell's registry."""

    def in_a_host_namespace(namespace: str | None, **_) -> bool:
        return naming.tenant_of_namespace(namespace or "", cell.config) is not None

    @kopf.index("v1", "pods", id=HOST_PODS_INDEX, when=in_a_host_namespace, registry=registry)
    async def host_pods(namespace: str | None, body: kopf.Body, **_) -> dict[str, bytes]:
        """Each pod of a host namespace (`kept_pod`), under its namespace: a pass that reads the index
        after a pod's change was handled sees the change."""
        return {namespace or "": pack(kept_pod(body))}

    @kopf.index("scheduling.run.ai", "v2", "queues", id=QUEUES_INDEX, registry=registry)
    async def queues(name: str, body: kopf.Body, **_) -> dict[str, bytes]:
        """Each Queue under its name: the queue step tells "absent" from "someone else's" from it."""
        return {name: pack(_kept(body))}

    @kopf.index(GROUP, VERSION, PLURAL, id=TENANTS_INDEX, registry=registry)
    async def tenants(name: str, body: kopf.Body, **_) -> dict[str, bytes]:
        """Each GpuTenant under its name: a pass starts from it (`Reconciler.current`). Without
        managedFields, the larger part of a tenant, unless they still hold a record of status merge
        patches, which the pass hands over once (`pipeline.release_merge_patched_status`)."""
        kept = _kept(body)
        fields = (body.get("metadata") or {}).get("managedFields") or []
        if has_merge_patched_status(fields, cell.client.user_agent):
            kept["metadata"]["managedFields"] = fields
        return {name: pack(kept)}
