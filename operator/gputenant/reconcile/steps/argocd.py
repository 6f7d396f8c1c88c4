"""The Argo CD cluster Secret: a token of Argo CD's own ServiceAccount in the virtual cluster, issued
and rotated like the kubeconfigs; removed when registration is disabled or moved."""

from __future__ import annotations

from pydantic import ValidationError

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.api.hub import ArgoCDSpec, ArgoCDStatus
from gputenant.argocd import bearer_token_of, cluster_secret
from gputenant.kube import ApiError
from gputenant.kube.applier import object_key
from gputenant.kubeconfigs import (
    ARGOCD_ROLE,
    MISSING,
    ca_of,
    issue_reason,
    recorded_annotations,
    rotation_due,
    server_of,
    token_annotations,
    token_of,
)
from gputenant.reconcile.context import Pass
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.steps.kubeconfigs import live_secret
from gputenant.timefmt import parse_rfc3339

CONDITION = reasons.ARGOCD_READY
KINDS: frozenset[str] = frozenset()


async def ensure(run: Pass) -> bool:
    argocd = run.plan.tenant.spec.argocd
    name = naming.argocd_secret_name(run.name)
    wanted = (argocd.namespace, name) if argocd.enabled else None
    recorded = run.status.argocd
    moved = recorded is not None and (recorded.namespace, recorded.secret_name) != wanted
    if not run.never_reconciled and (moved or not run.recheck):
        await remove_secrets(run, keep=wanted)
        if moved:
            run.status.argocd = None
    if not argocd.enabled:
        run.set(CONDITION, True, reasons.NOT_REQUESTED, "spec.argocd.enabled is false; no cluster Secret")
        return True
    if await run.client.get("v1", "Namespace", argocd.namespace) is None:
        raise StepError(reasons.ARGOCD_NAMESPACE_MISSING, f"namespace {argocd.namespace} (spec.argocd.namespace) "
                        "does not exist; install Argo CD there or set spec.argocd.namespace", transient=True)
    admin = run.admin_kubeconfig
    assert admin is not None, "the vCluster step runs first"
    server = run.plan.tenant.spec.vcluster.server_url or server_of(admin)
    live = await live_secret(run, name, argocd.namespace, "argocd")
    why = issue_reason(live, run.plan.lifetime, run.now, run.rotation_request, server)
    if why or live is None:
        [issued] = await run.services.issuer.issue(run.name, [ARGOCD_ROLE], admin, server,
                                                   int(run.plan.lifetime.total_seconds()))
        token = token_of(issued.kubeconfig_yaml)
        annotations = token_annotations(issued.expires_at, run.rotation_request, server)
    else:
        token = bearer_token_of(live)
        annotations = recorded_annotations(live)
    secret = cluster_secret(run.name, argocd.namespace, server or "", ca_of(admin), token, project=argocd.project)
    secret["metadata"]["annotations"] = annotations
    await run.applier.ensure(secret)
    run.status.argocd = ArgoCDStatus(namespace=argocd.namespace, secret_name=name)
    expires_at = parse_rfc3339(annotations.get(naming.KUBECONFIG_EXPIRES_ANNOTATION))
    run.due(rotation_due(expires_at, run.plan.lifetime) if expires_at else None)
    if why and why != MISSING:
        run.rotated.append(object_key(secret))
    if why:
        await run.event("Normal", reasons.ARGOCD_TOKEN_ISSUED,
                        f"Argo CD cluster Secret {argocd.namespace}/{name}: token issued ({why})")
    run.set(CONDITION, True, reasons.REGISTERED, f"cluster Secret {argocd.namespace}/{name} for {server}; "
            f"token expires {annotations[naming.KUBECONFIG_EXPIRES_ANNOTATION]}")
    return True


def argocd_namespaces(body: dict) -> list[str]:
    """Where the tenant's Argo CD cluster Secret may be: spec.argocd.namespace while registration is
    enabled, the namespace the status records a Secret written in (`status.argocd`), so a moved or
    disabled registration is found and removed; and always Argo CD's default namespace, for a
    Secret whose pass ended before it could record it. The operator may list Secrets only in
    namespaces it is granted, so it never lists them cluster-wide."""
    found = {ArgoCDSpec().namespace}
    try:
        argocd = ArgoCDSpec.model_validate((body.get("spec") or {}).get("argocd") or {})
    except ValidationError:
        argocd = ArgoCDSpec()
    if argocd.enabled:
        found.add(argocd.namespace)
    recorded = ((body.get("status") or {}).get("argocd") or {}).get("namespace")
    if isinstance(recorded, str) and recorded:
        found.add(recorded)
    return sorted(found)


async def remove_secrets(run: Pass, keep: tuple[str, str] | None) -> None:
    """Delete the tenant's Argo CD cluster Secrets other than `keep` (namespace, name). A
    namespace the operator may not list Secrets in (other than the wanted one, whose refusal
    is the step's error) cannot hold one: it could not have been written there. Not asked before
    the tenant's first status (no earlier pass can have written one), nor by a look again at a
    waiting tenant unless the registration the status records is not the wanted one: a
    registration moves or ends with a spec change, whose own full pass removes it, and a look again
    that runs before that pass must not record the new one over the old."""
    for namespace in sorted({run.host_namespace, *argocd_namespaces(run.body)}):
        try:
            secrets = await run.snapshot.items("v1", "Secret", namespace)
        except ApiError as error:
            if error.forbidden and (keep is None or namespace != keep[0]):
                continue
            raise
        for secret in secrets:
            metadata = secret["metadata"]
            if (metadata.get("labels") or {}).get(naming.COMPONENT_LABEL) != "argocd":
                continue
            if (namespace, metadata["name"]) != keep:
                await run.client.delete("v1", "Secret", metadata["name"], namespace)
