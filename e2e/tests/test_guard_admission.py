"""The admission guard in front of the real apiserver: its webhook server runs on loopback with TLS
(generated certificates), registered by its own webhook configurations; GpuTenants are real objects
of the generated CRD; every pod is created by the tenant's own identity (a client-certificate user
bound to `edit` in the host namespace) and the outcome is read back from the apiserver.

The host namespaces carry the labels the renderer gives them except the Pod Security level: Pod
Security is a separate layer (restricted for Untrusted) whose messages would stand in front of the
guard's for privileged and host-namespace pods; these tests pin down the guard's own answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from cases.admission_table import (
    ALL_MODES,
    CONFIG,
    HAMI,
    MIG,
    MODE_NAMES,
    POOL_KEY,
    QUEUE,
    SHARE,
    TENANT_CRD,
    TIME_SLICING,
    Admitted,
    Mode,
    caps_view,
    cases,
    denied,
    untouched,
)
from gputenant import naming
from gputenant.guard import hami_caps
from gputenant.guard.standalone import GuardThread
from kubeplane import wait_for
from kubeplane.builders import container, pod
from kubeplane.fixtures import guard_serves, install_crds, remove_tenants
from kubeplane.operator_process import remove_guard_configurations


def test_every_mode_has_at_least_25_cases():
    assert {MODE_NAMES[m]: len(cases(m)) >= 25 for m in ALL_MODES} == {name: True for name in MODE_NAMES.values()}


# -- the guarded plane -------------------------------------------------------------------------


def tenant_object(mode: Mode) -> dict:
    spec = {"trust": mode.trust, "owners": [{"kind": "User", "name": f"{mode.tenant}-owner"}],
            "gpu": {"quota": 1, "limit": 1}}
    for key, value in mode.extra_spec.items():
        spec[key] = {**spec.get(key, {}), **value}
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": mode.tenant}, "spec": spec}


@dataclass
class Guarded:
    plane: object
    guard: GuardThread
    users: dict[str, Path]

    def create(self, mode: Mode, manifest: dict) -> dict:
        with self.plane.api_client(self.users[mode.tenant]) as client:
            created = kubernetes.client.CoreV1Api(client).create_namespaced_pod(mode.namespace, manifest)
            return client.sanitize_for_serialization(created)


@pytest.fixture(scope="module")
def guarded(plane, tmp_path_factory):
    if not TENANT_CRD.is_file():
        pytest.skip("crds/tenant.yaml is missing: generate it with `gputenant crd`")
    install_crds(plane, TENANT_CRD)
    users = {}
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for mode in ALL_MODES:
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", tenant_object(mode))
            plane.create_namespace(mode.namespace, labels={
                **naming.tenant_labels(mode.tenant, "namespace"), naming.TRUST_LABEL: mode.trust})
            user = f"{mode.tenant}-dev"
            users[mode.tenant] = plane.user(user)
            rbac.create_namespaced_role_binding(mode.namespace, {
                "metadata": {"name": "tenant-edit"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path_factory.mktemp("guard-certs")).start()
    try:
        for mode in ALL_MODES:
            wait_for(lambda mode=mode: guard_serves(plane, mode.namespace), timeout=60, what=f"the guard to serve {mode.namespace}")
        yield Guarded(plane, guard, users)
    finally:
        guard.stop()
        remove_guard_configurations(plane)
        remove_tenants(plane, {mode.tenant: mode.namespace for mode in ALL_MODES})


def admitted_view(stored: dict) -> Admitted:
    spec = stored["spec"]
    return Admitted(
        labels=stored["metadata"].get("labels", {}), scheduler=spec["schedulerName"],
        node_selector=spec.get("nodeSelector", {}),
        # DefaultTolerationSeconds adds node.kubernetes.io/* tolerations to every pod; not the guard's.
        tolerations=[t for t in spec.get("tolerations", []) if not t["key"].startswith("node.kubernetes.io/")],
        limits=[(c.get("resources") or {}).get("limits", {}) for c in spec.get("initContainers", []) + spec["containers"]],
        caps=caps_view(spec))


@pytest.mark.parametrize("mode", ALL_MODES, ids=lambda m: MODE_NAMES[m])
def test_pod_table(guarded, mode):
    """Every case of the mode, created as the tenant; all mismatches reported together."""
    mismatches = []
    for case in cases(mode):
        try:
            stored = guarded.create(mode, case.manifest)
        except ApiException as error:
            message = json.loads(error.body)["message"] if error.body else str(error)
            if case.message != message:
                mismatches.append(f"{case.id}: rejected with {message!r}, expected "
                                  f"{'admission' if case.admitted else repr(case.message)}")
            continue
        if case.admitted is None:
            mismatches.append(f"{case.id}: admitted, expected rejection {case.message!r}")
        elif admitted_view(stored) != case.admitted:
            mismatches.append(f"{case.id}: stored {admitted_view(stored)}, expected {case.admitted}")
    assert mismatches == []


def test_a_tenant_cannot_use_another_tenants_queue_or_pool(guarded):
    manifest = pod(container(limits={"nvidia.com/gpu": "1"}), labels={QUEUE: MIG.tenant},
                   nodeSelector={POOL_KEY: MIG.pool})
    with pytest.raises(ApiException) as refused:
        guarded.create(TIME_SLICING, manifest)
    assert json.loads(refused.value.body)["message"] == denied(
        TIME_SLICING,
        f"[queue-label] label {QUEUE}=mig-team names another queue; pods of this tenant use queue ts-team (remove the label)",
        f"[node-selector] nodeSelector {POOL_KEY}=mig leaves the tenant's pool; it must be {POOL_KEY}=ts (remove it)")


def test_pod_outside_tenant_namespaces_passes_untouched(guarded):
    """Not even sent to the guard: the namespace selector leaves it out, so a privileged GPU pod
    with a foreign queue is stored exactly as written."""
    guarded.plane.create_namespace("no-tenant")
    manifest = pod(container(limits={"nvidia.com/gpu": "3"}, securityContext={"privileged": True}),
                   labels={QUEUE: "ts-team"}, hostPID=True)
    with guarded.plane.api_client() as client:
        stored = client.sanitize_for_serialization(
            kubernetes.client.CoreV1Api(client).create_namespaced_pod("no-tenant", manifest))
    assert admitted_view(stored) == untouched(manifest)
    assert stored["spec"]["hostPID"] is True


def test_webhook_configurations_select_only_tenant_namespaces_and_fail_closed(guarded):
    with guarded.plane.api_client() as client:
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        mutating = client.sanitize_for_serialization(admission.read_mutating_webhook_configuration("gputenant-guard"))
        validating = client.sanitize_for_serialization(admission.read_validating_webhook_configuration("gputenant-guard"))
    selector = {"matchExpressions": [
        {"key": "gputenant.io/tenant", "operator": "Exists"},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["gpu-tenant-operator", "kube-node-lease", "kube-public", "kube-system"]}]}
    pod_hooks = [mutating["webhooks"][0], validating["webhooks"][0]]
    assert [(h["name"], h["failurePolicy"], h["namespaceSelector"]) for h in pod_hooks] == [
        ("pods.mutate.gputenant.io", "Fail", selector), ("pods.validate.gputenant.io", "Fail", selector)]
    assert all(h["clientConfig"]["url"].startswith("https://127.0.0.1:") for h in pod_hooks)


def test_tenant_update_withdrawing_a_mig_profile_in_use_is_refused(guarded):
    stored = guarded.create(MIG, pod(container(limits={"nvidia.com/mig-1g.10gb": "1"})))
    name = stored["metadata"]["name"]
    with guarded.plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        with pytest.raises(ApiException) as refused:
            custom.patch_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", MIG.tenant,
                                               {"spec": {"sharing": {"mig": {"profile": "2g.20gb"}}}})
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "gputenants.validate.gputenant.io" denied the request: '
                              "[gpu-resource-in-use] the change withdraws what running pods of tenant mig-team use: "
                              "MIG profile 1g.10gb is used by ")
    assert f"{MIG.namespace}/{name}" in message
    assert message.endswith("; delete those pods first, then change the tenant")


def test_tenant_quota_above_what_the_pool_can_still_give_is_refused(guarded):
    with guarded.plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        with pytest.raises(ApiException) as refused:
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", {
                "apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": "greedy"},
                "spec": {"trust": "Trusted", "owners": [{"kind": "User", "name": "g"}], "gpu": {"quota": 8, "limit": 8}}})
    assert json.loads(refused.value.body)["message"] == (
        'admission webhook "gputenants.validate.gputenant.io" denied the request: [pool-capacity] gpu.quota 8 of '
        "tenant greedy does not fit pool ts: it has 8 GPUs and 1 are guaranteed to other tenants (ts-team: 1); "
        "lower gpu.quota to at most 7 or choose another pool with gpu.pool")



def test_updates_keep_the_queue_label_and_ephemeral_containers_are_checked(guarded):
    stored = guarded.create(HAMI, pod(annotations=SHARE))
    name = stored["metadata"]["name"]
    with guarded.plane.api_client(guarded.users[HAMI.tenant]) as client:
        core = kubernetes.client.CoreV1Api(client)
        relabelled = core.patch_namespaced_pod(name, HAMI.namespace, [
            {"op": "remove", "path": "/metadata/labels/kai.scheduler~1queue"},
            {"op": "add", "path": "/metadata/labels/stage", "value": "eval"}])
        assert relabelled.metadata.labels == {QUEUE: HAMI.tenant, "stage": "eval"}
        with pytest.raises(ApiException) as foreign:
            core.patch_namespaced_pod(name, HAMI.namespace, {"metadata": {"labels": {QUEUE: "ts-team"}}})
    assert json.loads(foreign.value.body)["message"] == denied(
        HAMI, f"[queue-label] label {QUEUE}=ts-team names another queue; pods of this tenant use queue hami-team "
              "(remove the label)")
    with guarded.plane.api_client() as client:
        with pytest.raises(ApiException) as debug:
            kubernetes.client.CoreV1Api(client).patch_namespaced_pod_ephemeralcontainers(name, HAMI.namespace, {
                "spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox",
                                                  "securityContext": {"privileged": True}}]}})
    assert json.loads(debug.value.body)["message"] == denied(
        HAMI, "[privileged] ephemeral container debug is privileged; privileged containers see every GPU of the "
              "node (remove securityContext.privileged)")


def test_a_capped_share_pod_costs_one_call_of_the_mutating_webhook(guarded):
    """The guard gives its init container the pod's own token mount, so the ServiceAccount plugin's second
    pass changes nothing and the API server does not call the mutating webhook again (reinvocationPolicy
    IfNeeded): one call per pod, not two. The stored pod is what the plugin would have made."""
    mutate = "pods.mutate.gputenant.io"
    before = guarded.plane.admission_webhooks()[mutate][1]
    stored = guarded.create(HAMI, pod(annotations=SHARE))
    assert guarded.plane.admission_webhooks()[mutate][1] - before == 1

    def token_mounts(container: dict) -> list[dict]:
        return [m for m in container["volumeMounts"] if m["mountPath"] == hami_caps.SERVICE_ACCOUNT_TOKEN_PATH]
    init, main = stored["spec"]["initContainers"][0], stored["spec"]["containers"][0]
    assert init["name"] == hami_caps.INIT_CONTAINER
    assert token_mounts(init) == token_mounts(main) and token_mounts(main)[0]["name"].startswith("kube-api-access-")
