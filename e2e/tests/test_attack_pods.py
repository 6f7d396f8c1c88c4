"""A hostile tenant against the admission guard, on the real apiserver (issue 12, classes 1-6).

The tenant is cluster-admin of its vCluster, so its pods reach the host namespace shaped however it
likes, written by the vCluster syncer's ServiceAccount. Every attack (the table in
e2e/cases/pod_attacks.py and the tests below) is sent as that ServiceAccount (a client certificate
whose user is ``system:serviceaccount:<ns>:vc-<tenant>``, bound to ``edit`` there), on CREATE or
UPDATE, and each is either refused (the rule ids in the message are asserted) or neutralised (the
stored object is read back). GPU nodes are not part of the plane: what a pod would do on one is
argued in docs/threat-model.md, which names these tests.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from cases.pod_attacks import (
    ATTACKS,
    CONFIG,
    EXTRA_SPEC,
    INTERNAL,
    QUOTA,
    TENANT_CRD,
    TRUST,
    TRUSTED,
    UNTRUSTED,
    Attack,
    env,
    gpu_pod,
    guard_prefix,
    named,
    namespace,
    pod,
    stored_prefix,
    syncer,
)
from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant
from gputenant.guard import kai_sharing
from gputenant.guard.gang_groups import GangGroups
from gputenant.guard.gangs import POD_GROUP_ANNOTATION, VIRTUAL_OWNERS_ANNOTATION
from gputenant.guard.keys import GANG_SIZE_ANNOTATION
from gputenant.guard.standalone import GuardThread
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.render.tenant import POD_GROUPS_QUOTA, render_tenant
from kubeplane import wait_for
from kubeplane.builders import container
from kubeplane.fixtures import guard_serves, install_crds, remove_tenants
from kubeplane.operator_process import remove_guard_configurations
from kubeplane.tools import REPO_ROOT


def test_at_least_45_attacks_over_classes_1_to_6():
    assert len(ATTACKS) >= 45 and {a.threat for a in ATTACKS} >= {1, 3, 4, 5}
    assert len({a.id for a in ATTACKS}) == len(ATTACKS)


# -- the guarded plane -------------------------------------------------------------------------


def tenant_object(name: str) -> dict:
    spec = {"trust": TRUST[name], "owners": [{"kind": "User", "name": f"{name}-owner"}], "gpu": {"quota": 1, "limit": 1},
            **EXTRA_SPEC.get(name, {})}
    return {"apiVersion": "gputenant.io/v1alpha1", "kind": "GpuTenant", "metadata": {"name": name}, "spec": spec}


@dataclass
class Plane:
    plane: Any
    identities: dict[str, Path]

    def api(self, identity: str) -> kubernetes.client.ApiClient:
        return self.plane.api_client(self.identities[identity])

    def as_syncer(self, tenant: str) -> kubernetes.client.ApiClient:
        return self.api(syncer(tenant))


@pytest.fixture(scope="module")
def attacked(plane, tmp_path_factory):
    if not TENANT_CRD.is_file():
        pytest.skip("crds/tenant.yaml is missing: generate it with `gputenant crd`")
    install_crds(plane, TENANT_CRD)
    # The GPU Operator installs this RuntimeClass on every GPU cluster; without it the API server's
    # RuntimeClass plugin would refuse the attack before the guard sees it.
    plane.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}))
    identities = {}
    with plane.api_client() as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        rbac = kubernetes.client.RbacAuthorizationV1Api(client)
        for name in TRUST:
            body = tenant_object(name)
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", body)
            rendered = render_tenant(GpuTenant.model_validate(body), decide(name, GpuTenant.model_validate(body).spec,
                                                                            CONFIG), CONFIG)
            labels = next(o for o in rendered.objects if o["kind"] == "Namespace")["metadata"]["labels"]
            labels = {k: v for k, v in labels.items() if not k.startswith("pod-security.")}
            plane.create_namespace(namespace(name), labels=labels)
            if name == QUOTA:
                for kind in ("ResourceQuota", "LimitRange"):
                    document = next(o for o in rendered.objects if o["kind"] == kind)
                    plane.kubectl("apply", "-f", "-", input=json.dumps(document))
            rbac.create_namespaced_role(namespace(name), {
                "metadata": {"name": "syncer"},
                "rules": [{"apiGroups": [""], "resources": ["pods", "pods/ephemeralcontainers"], "verbs": ["*"]}]})
            rbac.create_namespaced_role_binding(namespace(name), {
                "metadata": {"name": "syncer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
                "subjects": [{"kind": "ServiceAccount", "name": f"vc-{name}", "namespace": namespace(name)}]})
            identities[syncer(name)] = plane.user(syncer(name), ["system:serviceaccounts",
                                                                 f"system:serviceaccounts:{namespace(name)}"])
    # The plane's API server presents a webhook client certificate and the guard requires it, as in
    # production with --webhook-client-ca: every attack also proves the API server gets through.
    guard = GuardThread(plane.kubeconfig_path, CONFIG, cert_dir=tmp_path_factory.mktemp("attack-guard-certs"),
                        client_ca_file=plane.webhook_client_ca_path).start()
    try:
        for name in TRUST:
            wait_for(lambda name=name: guard_serves(plane, namespace(name)), timeout=60, what=f"the guard to serve {namespace(name)}")
        yield Plane(plane, identities)
    finally:
        guard.stop()
        remove_guard_configurations(plane)
        remove_tenants(plane, {name: namespace(name) for name in TRUST})


def rules_named(error: ApiException) -> set[str]:
    message = json.loads(error.body)["message"] if error.body else str(error)
    return set(re.findall(r"\[([a-z-]+)\]", message))


def carry_out(attacked: Plane, attack: Attack) -> dict:
    """Send the attack as the tenant's syncer; returns the stored pod (raises ApiException if refused)."""
    ns = namespace(attack.tenant)
    with attacked.as_syncer(attack.tenant) as client:
        core = kubernetes.client.CoreV1Api(client)
        created = client.sanitize_for_serialization(core.create_namespaced_pod(ns, attack.manifest))
        if attack.operation == "CREATE":
            return created
        name = created["metadata"]["name"]
        if attack.ephemeral is not None:
            result = core.patch_namespaced_pod_ephemeralcontainers(
                name, ns, {"spec": {"ephemeralContainers": [attack.ephemeral]}})
        else:
            result = core.patch_namespaced_pod(name, ns, attack.update(created))
        return client.sanitize_for_serialization(result)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: f"{a.threat}-{a.operation.lower()}-{a.id}")
def test_attack_is_refused_or_neutralised(attacked, attack):
    if attack.refused:
        with pytest.raises(ApiException) as refused:
            carry_out(attacked, attack)
        assert rules_named(refused.value) == set(attack.refused), json.loads(refused.value.body or "{}").get("message")
    else:
        assert attack.stored(carry_out(attacked, attack)) == attack.expect


# -- 2. identity -------------------------------------------------------------------------------


def test_a_namespace_labelled_as_a_tenants_is_not_that_tenant(attacked):
    """Someone with namespace rights labels a namespace as tenant atk-ts's (Trusted, the weakest rules):
    it is not the namespace the operator recorded for atk-ts, so its pods are refused outright."""
    impostor = "impostor-of-atk-ts"
    attacked.plane.create_namespace(impostor, labels=naming.tenant_labels(TRUSTED, "namespace"))
    try:
        with attacked.plane.api_client() as client:
            with pytest.raises(ApiException) as refused:
                kubernetes.client.CoreV1Api(client).create_namespaced_pod(impostor, pod())
        assert json.loads(refused.value.body)["message"].endswith(
            f"namespace {impostor} is labelled gputenant.io/tenant but is not the host namespace of any GpuTenant "
            "the admission guard knows; pods here are refused (if the tenant was just created, retry in a few seconds)")
    finally:
        with attacked.plane.api_client() as client:
            kubernetes.client.CoreV1Api(client).delete_namespace(impostor)


def test_a_tenant_recreated_under_the_same_name_is_judged_by_its_new_trust(attacked):
    """Deleted and re-created at generation 1 again with a lower trust: the guard's decision cache
    is keyed by uid, so the old Trusted decision does not leak into the Internal tenant."""
    knob = pod(container(**env("CUDA_DISABLE_CONTROL", "true")))
    ns = namespace(TRUSTED)
    with attacked.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        assert core.create_namespaced_pod(ns, knob, dry_run="All").metadata.namespace == ns
        custom.delete_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", TRUSTED)
        lowered = tenant_object(TRUSTED)
        lowered["spec"]["trust"] = "Internal"
        custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", lowered)

        def refused_now() -> bool:
            try:
                core.create_namespaced_pod(ns, knob, dry_run="All")
            except ApiException as error:
                return "[isolation-env]" in (error.body or "")
            return False
        try:
            wait_for(refused_now, timeout=30, what="the re-created tenant's Internal rules")
        finally:
            custom.delete_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", TRUSTED)
            custom.create_cluster_custom_object("gputenant.io", "v1alpha1", "gputenants", tenant_object(TRUSTED))


def test_two_pods_pre_set_one_prefix(attacked):
    """Two fraction pods whose host names share their first 33 characters (all KAI keeps of them) and one
    pre-set prefix in KAI's form: KAI's binder would write both GPUs into one ConfigMap. The guard gives
    each stored pod its own prefix."""
    names = [f"{'twin' * 9}-{n}" for n in range(2)]
    preset = f"{names[0][:33]}-b2x9kzq-shared-gpu"
    with attacked.as_syncer(INTERNAL) as client:
        core = kubernetes.client.CoreV1Api(client)
        stored = [client.sanitize_for_serialization(core.create_namespaced_pod(namespace(INTERNAL), named(
            gpu_pod(INTERNAL, annotations={kai_sharing.CONFIGMAP_ANNOTATION: preset}), name))) for name in names]
    prefixes = [stored_prefix(p) for p in stored]
    assert prefixes == [guard_prefix(name, INTERNAL) for name in names]
    assert len(set(prefixes)) == 2 and preset not in prefixes


def test_kai_may_still_group_a_pod_the_tenant_may_not(attacked):
    """The platform side of an UPDATE: KAI's pod-grouper writes pod-group-name onto a tenant pod
    (refused from the tenant's syncer, see update-adds-a-pod-group-annotation)."""
    kai = "system:serviceaccount:kai-scheduler:podgrouper"
    ns = namespace(INTERNAL)
    identity = attacked.plane.user(kai, ["system:serviceaccounts"])
    with attacked.plane.api_client() as client:
        kubernetes.client.RbacAuthorizationV1Api(client).create_namespaced_role_binding(ns, {
            "metadata": {"name": "podgrouper"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "syncer"},
            "subjects": [{"kind": "ServiceAccount", "name": "podgrouper", "namespace": "kai-scheduler"}]})
    with attacked.as_syncer(INTERNAL) as client:
        name = kubernetes.client.CoreV1Api(client).create_namespaced_pod(ns, gpu_pod(INTERNAL)).metadata.name
    with attacked.plane.api_client(identity) as client:
        grouped = kubernetes.client.CoreV1Api(client).patch_namespaced_pod(
            name, ns, {"metadata": {"annotations": {"pod-group-name": f"pg-{name}"}}})
    assert grouped.metadata.annotations["pod-group-name"] == f"pg-{name}"


# -- 4. HAMi shares, and what admission cannot see ---------------------------------------------


def test_shares_are_counted_by_the_queue_and_whole_gpus_by_nobody(attacked):
    """atk-quota (Internal, gpu.limit 1) holds 4 quarter shares. A KAI fraction carries no resource the
    API server can count (KAI's reservation pod holds the GPU), so a fifth share is admitted and waits
    in KAI's queue (e2e/tests/test_hami_kai.py shows the queue hold it); the ResourceQuota grants no
    whole GPU, behind the guard's own refusal."""
    ns = namespace(QUOTA)
    with attacked.as_syncer(QUOTA) as client:
        core = kubernetes.client.CoreV1Api(client)
        admitted = [core.create_namespaced_pod(ns, gpu_pod(QUOTA)) for _ in range(5)]
    assert [p.metadata.annotations["gpu-fraction"] for p in admitted] == ["0.25"] * 5
    with attacked.plane.api_client() as client:
        quota = kubernetes.client.CoreV1Api(client).read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, ns)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "0"
    assert not {key for key in quota.spec.hard if "gpumem" in key or "gpucores" in key}


def test_a_process_that_unsets_its_own_limits_is_admitted_as_documented(attacked):
    """No admission check reads a container's command: a tenant whose program unsets HAMi's variables
    (or calls the driver directly) is admitted. docs/trust-levels.md states this limit."""
    sneaky = gpu_pod(INTERNAL)
    sneaky["spec"]["containers"][0]["command"] = ["sh", "-c", "unset CUDA_DEVICE_MEMORY_LIMIT; exec python train.py"]
    with attacked.as_syncer(INTERNAL) as client:
        stored = kubernetes.client.CoreV1Api(client).create_namespaced_pod(namespace(INTERNAL), sneaky)
    assert stored.spec.containers[0].command[2].startswith("unset CUDA_DEVICE_MEMORY_LIMIT")
    assert "a process that unsets a variable itself" in (REPO_ROOT / "docs" / "trust-levels.md").read_text()


# -- gangs: admission writes nothing; the operator writes the PodGroup, owned by its members ------


def gang_pod(tenant: str, size: int = 2, **fields) -> dict:
    """A GPU pod of a virtual Job asking for a gang, as vCluster syncs it (the virtual owner recorded)."""
    owners = json.dumps([{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": str(uuid.uuid4()),
                          "controller": True}])
    manifest = gpu_pod(tenant, **fields)
    manifest["metadata"].setdefault("annotations", {}).update(
        {GANG_SIZE_ANNOTATION: str(size), VIRTUAL_OWNERS_ANNOTATION: owners})
    return manifest


def pod_groups(plane, ns: str) -> list[dict]:
    with plane.api_client() as client:
        return kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", ns, "podgroups")["items"]


def test_a_refused_gang_pod_leaves_no_pod_group(attacked):
    """Before admission decided, the mutating webhook wrote the gang's PodGroup: every refused pod left one
    behind, uncounted. Now admission writes nothing."""
    ns = namespace(UNTRUSTED)
    with attacked.as_syncer(UNTRUSTED) as client, pytest.raises(ApiException) as refused:
        kubernetes.client.CoreV1Api(client).create_namespaced_pod(ns, gang_pod(UNTRUSTED, labels={"project": TRUSTED}))
    assert rules_named(refused.value) == {"scheduler-key"}
    assert pod_groups(attacked.plane, ns) == []


def test_the_operator_writes_a_gangs_pod_group_owned_by_its_members_and_counted(attacked):
    ns = namespace(QUOTA)
    first = gang_pod(QUOTA)
    with attacked.as_syncer(QUOTA) as client:
        core = kubernetes.client.CoreV1Api(client)
        members = [client.sanitize_for_serialization(core.create_namespaced_pod(ns, first)) for _ in range(2)]
    assert pod_groups(attacked.plane, ns) == [], "admission wrote nothing"

    async def handle(pods: list[dict]) -> None:
        async with KubeClient.from_kubeconfig(str(attacked.plane.kubeconfig_path), CONFIG.field_manager) as client:
            groups = GangGroups(lambda: client)
            for pod in pods:
                await groups.on_event(None, pod)
    asyncio.run(handle(members))
    [group] = pod_groups(attacked.plane, ns)
    assert group["metadata"]["name"] == members[0]["metadata"]["annotations"][POD_GROUP_ANNOTATION]
    assert group["spec"] == {"minMember": 2, "queue": QUOTA}
    assert [(o["name"], o["uid"], o.get("controller")) for o in group["metadata"]["ownerReferences"]] == [
        (m["metadata"]["name"], m["metadata"]["uid"], None) for m in members]
    asyncio.run(handle(members))
    assert pod_groups(attacked.plane, ns)[0]["metadata"]["resourceVersion"] == group["metadata"]["resourceVersion"]

    with attacked.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        wait_for(lambda: core.read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, ns).status.used.get(
            POD_GROUPS_QUOTA) == "1", timeout=60, what="the tenant's quota to count the PodGroup")
        for member in members:
            core.delete_namespaced_pod(member["metadata"]["name"], ns, grace_period_seconds=0)
    wait_for(lambda: pod_groups(attacked.plane, ns) == [], timeout=120,
             what="the garbage collector to delete the PodGroup with its last member")
