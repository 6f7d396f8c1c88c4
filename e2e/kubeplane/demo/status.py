"""The demo's status table and its verdict: all Ready, still converging, or stopped for good.

Pure functions over GpuTenant bodies, so the watch loop in `session` only fetches and prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputenant.api import conditions
from gputenant.api.conditions import READY
from gputenant.api.v1alpha1 import GpuTenant, KubeconfigRole
from gputenant.tables import align_columns

CONVERGING_REASONS = frozenset({
    conditions.PROGRESSING,                # Ready=Unknown while parts are pending
    conditions.CONTROL_PLANE_STARTING,     # no control-plane pod ready yet (starting, restarting, waking)
    conditions.CONTROL_PLANE_ROLLING_OUT,  # a new StatefulSet revision rolling out
    conditions.WAITING_FOR_CONTROL_PLANE,  # the pod is ready, vc-<release> or its node port not there yet
    conditions.CONTROL_PLANE_NOT_ANSWERING,  # the pod is ready, its API not answering at the endpoint yet
    conditions.CONTROL_PLANE_POD_REFUSED,  # its pod refused (quota, admission); looked at again each pass
    conditions.WAITING_FOR_ACCESS,         # the operator's RoleBinding is not in force yet
    conditions.OBJECT_NOT_OWNED,           # an object in the way; retried until it is removed
    conditions.API_UNAVAILABLE,            # a transient API error; the operator retries with backoff
    conditions.HELM_UNAVAILABLE,           # a transient Helm error; retried
    conditions.TOKEN_REQUEST_FAILED,       # the virtual apiserver did not answer yet; retried
})
"""Ready=False reasons after which the operator tries again by itself. Any other reason is
permanent: the operator stops until the tenant's spec changes, so waiting longer is pointless."""


@dataclass(frozen=True)
class TenantRow:
    name: str
    trust: str
    mode: str
    pool: str
    gpus: str
    ready: str
    reason: str
    message: str


def _ready_condition(body: dict) -> dict:
    for condition in (body.get("status") or {}).get("conditions") or []:
        if condition.get("type") == READY:
            return condition
    return {}


def _observed(body: dict) -> bool:
    """Whether the status describes the current spec (the operator has seen this generation)."""
    status = body.get("status") or {}
    return status.get("observedGeneration") == body["metadata"].get("generation")


def _gpus(spec: dict) -> str:
    gpu = spec.get("gpu") or {}
    quota, limit = gpu.get("quota"), gpu.get("limit")
    if quota is None:
        return "-"
    return f"{quota:g}" if limit is None or limit == quota else f"{quota:g} (max {limit:g})"


def tenant_row(body: dict) -> TenantRow:
    spec = body.get("spec") or {}
    sharing = (body.get("status") or {}).get("sharing") or {}
    ready = _ready_condition(body) if _observed(body) else {}
    return TenantRow(
        name=body["metadata"]["name"], trust=spec.get("trust") or "-", mode=sharing.get("mode") or "-",
        pool=sharing.get("pool") or "-", gpus=_gpus(spec), ready=ready.get("status", "Unknown"),
        reason=ready.get("reason", "Pending"), message=ready.get("message", "waiting for the operator"))


def format_table(rows: list[TenantRow]) -> str:
    header = ("NAME", "TRUST", "MODE", "POOL", "GPUS", "READY", "REASON")
    cells = [header] + [(r.name, r.trust, r.mode, r.pool, r.gpus, r.ready, r.reason) for r in rows]
    return align_columns(cells)


@dataclass
class Verdict:
    rows: list[TenantRow]
    failed: list[TenantRow] = field(default_factory=list)
    """Tenants that are Ready=False for a permanent reason."""
    missing: list[str] = field(default_factory=list)

    @property
    def all_ready(self) -> bool:
        return not self.missing and all(row.ready == "True" for row in self.rows)


def assess(bodies: list[dict], expected: list[str]) -> Verdict:
    """Rows for the expected tenants (in that order) and which of them failed for good."""
    by_name = {body["metadata"]["name"]: body for body in bodies}
    rows = [tenant_row(by_name[name]) for name in expected if name in by_name]
    failed = [row for row in rows if row.ready == "False" and row.reason not in CONVERGING_REASONS]
    return Verdict(rows=rows, failed=failed, missing=[name for name in expected if name not in by_name])


def failure_report(rows: list[TenantRow]) -> str:
    return "\n".join(f"tenant {row.name}: Ready=False, reason {row.reason}: {row.message}" for row in rows)


def pick_demo_tenant(tenants: list[GpuTenant]) -> str | None:
    """A tenant whose view kubeconfig works from this machine: it issues the view role and sets no
    public spec.vcluster.serverURL (which would point its kubeconfig at a host that is not here)."""
    for tenant in tenants:
        if KubeconfigRole.VIEW in tenant.spec.kubeconfig.roles and tenant.spec.vcluster.server_url is None:
            return tenant.metadata.name
    return None
