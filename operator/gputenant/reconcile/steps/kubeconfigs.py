"""The owners' token kubeconfigs: issued when missing, revoked, requested, due or pointing at another server;
the others kept untouched; and the owners' OIDC identities bound inside the virtual cluster."""

from __future__ import annotations

import base64

import yaml

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import KubeconfigStatus
from gputenant.kube.applier import object_key
from gputenant.kubeconfigs import (
    MISSING,
    OIDC_ROLE,
    REVOKED,
    binding_hash,
    ca_of,
    issue_reason,
    kubeconfig_secret,
    kubeconfig_secret_of,
    oidc_kubeconfig,
    oidc_owners_binding,
    rotation_due,
    server_of,
    token_annotations,
)
from gputenant.reconcile.context import Pass
from gputenant.reconcile.ownership import adopt
from gputenant.timefmt import parse_rfc3339

CONDITION = reasons.KUBECONFIG_READY
KINDS: frozenset[str] = frozenset()


async def live_secret(run: Pass, name: str, namespace: str, component: str = "kubeconfig") -> dict | None:
    """A token Secret of the tenant from the pass's labelled LIST: the operator writes it with the
    tenant's labels (``kubeconfig_secret_of``, ``argocd.cluster``), so one absent from that LIST is
    absent (or unlabelled, and rewritten either way) and needs no GET."""
    return await run.applier.live({"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": name, "namespace": namespace, "labels": naming.tenant_labels(run.name, component)}})


async def ensure(run: Pass) -> bool:
    spec = run.plan.tenant.spec
    assert run.admin_kubeconfig is not None, "the vCluster step runs first"
    server = spec.vcluster.server_url or server_of(run.admin_kubeconfig)
    roles = [role.value for role in spec.kubeconfig.roles]
    live = {role: await live_secret(run, naming.kubeconfig_secret_name(run.name, role), run.host_namespace)
            for role in roles}
    why = {role: issue_reason(live[role], run.plan.lifetime, run.now, run.rotation_request, server, run.revocation_request)
           for role in roles}
    due = [role for role in roles if why[role]]
    issued = await run.services.issuer.issue(run.name, due, run.admin_kubeconfig, spec.vcluster.server_url,
                                             int(run.plan.lifetime.total_seconds()),
                                             revoke=[role for role in due if why[role] == REVOKED]) if due else []
    for kubeconfig in issued:
        secret = kubeconfig_secret(run.name, kubeconfig.role, run.host_namespace, kubeconfig)
        secret["metadata"]["annotations"] = token_annotations(kubeconfig.expires_at, run.rotation_request, server,
                                                              run.revocation_request)
        live[kubeconfig.role] = await run.applier.ensure(adopt(secret, run.body, run.host_namespace))
        if why[kubeconfig.role] != MISSING:
            run.rotated.append(object_key(secret))
    entries = [KubeconfigStatus.model_validate({
        "role": role, "secretName": naming.kubeconfig_secret_name(run.name, role),
        "expiresAt": (live[role] or {})["metadata"]["annotations"][naming.KUBECONFIG_EXPIRES_ANNOTATION]})
        for role in roles]
    oidc_secret = await ensure_oidc_kubeconfig(run, server)
    await remove_unwanted(run, {entry.secret_name for entry in entries} | ({oidc_secret} if oidc_secret else set()))
    run.status.kubeconfigs = entries
    for entry in entries:
        expires_at = parse_rfc3339(entry.expires_at)
        run.due(rotation_due(expires_at, run.plan.lifetime) if expires_at else None)
    await bind_oidc_owners(run)
    # A first issue (or a deleted Secret's, which is drift) is told by Ready's Event or DriftRepaired;
    # a rotation, a revocation or a new server is told here.
    reissued = [role for role in due if why[role] != MISSING]
    if reissued:
        await run.event("Normal", reasons.KUBECONFIG_ISSUED, "issued kubeconfigs: " + ", ".join(
            f"{role} ({why[role]})" for role in reissued))
    soonest = min(entry.expires_at or "" for entry in entries) if entries else "-"
    run.set(CONDITION, True, reasons.ISSUED,
            f"{len(entries)} kubeconfig(s) in {run.host_namespace}; earliest expiry {soonest}")
    return True


async def ensure_oidc_kubeconfig(run: Pass, server: str | None) -> str | None:
    """The kubelogin kubeconfig for spec.vcluster.oidc in Secret ``<tenant>-kubeconfig-oidc`` (no
    credential in it; written only when it differs), or None without OIDC."""
    oidc = run.plan.tenant.spec.vcluster.oidc
    if oidc is None or server is None:
        return None
    assert run.admin_kubeconfig is not None, "the vCluster step runs first"
    ca_data = base64.b64encode(ca_of(run.admin_kubeconfig)).decode()
    kubeconfig = yaml.safe_dump(oidc_kubeconfig(run.name, server, ca_data, oidc), sort_keys=False)
    secret = kubeconfig_secret_of(run.name, OIDC_ROLE, run.host_namespace, kubeconfig)
    await run.applier.ensure(adopt(secret, run.body, run.host_namespace))
    return secret["metadata"]["name"]


async def bind_oidc_owners(run: Pass) -> None:
    """The owners' OIDC identities bound inside the virtual cluster (spec.vcluster.oidc), written
    only when the binding differs from the one the status records."""
    assert run.admin_kubeconfig is not None and run.status.vcluster is not None, "the vCluster step runs first"
    binding = oidc_owners_binding(run.plan.tenant.spec.owners, run.plan.tenant.spec.vcluster.oidc)
    wanted = binding_hash(binding)
    if wanted == (run.status.vcluster.oidc_owners_hash or ""):
        return
    await run.services.issuer.bind_oidc_owners(run.name, run.admin_kubeconfig, binding)
    run.status.vcluster = run.status.vcluster.model_copy(update={"oidc_owners_hash": wanted or None})


async def remove_unwanted(run: Pass, wanted: set[str]) -> None:
    """Kubeconfig Secrets of roles no longer in spec.kubeconfig.roles."""
    for secret in await run.snapshot.items("v1", "Secret", run.host_namespace):
        labels = secret["metadata"].get("labels", {})
        name = secret["metadata"]["name"]
        if labels.get(naming.COMPONENT_LABEL) == "kubeconfig" and name not in wanted:
            await run.client.delete("v1", "Secret", name, secret["metadata"].get("namespace"))
