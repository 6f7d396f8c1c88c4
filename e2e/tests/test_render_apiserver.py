"""Rendered objects against a real kube-apiserver (kubeplane): schema, RBAC, CRD and admission.

1. Every object `render_tenant` produces for the examples is accepted by server-side dry-run
   apply with strict field validation, the KAI Queue against the real upstream CRD when
   ../shared/third_party is present (else the project's minimal one).
2. Admission proof for the vCluster control plane, host-side only (no vCluster needs to start,
   so this runs on the node-less plane): the test plays the StatefulSet controller's part. It
   renders the real upstream chart (../shared/third_party) with `helm template` and the rendered
   values, takes the StatefulSet's pod template and creates it as a Pod (with the `data`
   claim volume the controller would add) in a namespace carrying the rendered Namespace,
   ResourceQuota and LimitRange. The real API server's PodSecurity, LimitRanger and ResourceQuota
   admission decide. The chart's default values (root, no CPU limit) must be rejected.
"""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from gputenant import naming
from gputenant.api.v1alpha1 import GpuTenant, Trust
from gputenant.config.models import OperatorConfig
from gputenant.policy.choose import decide
from gputenant.render import render_parent_queues, render_tenant
from kubeplane import CommandError, wait_for
from kubeplane.fixtures import REAL_VCLUSTER_CHART, install_kai_queue_crd

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "examples" / "tenants").glob("*.yaml"))
CONFIG = OperatorConfig.load(REPO_ROOT / "examples" / "config.yaml")


@pytest.fixture(scope="module")
def queue_crd(plane) -> Path:
    return install_kai_queue_crd(plane)


@pytest.fixture(scope="module")
def core(plane):
    with plane.api_client() as client:
        yield kubernetes.client.CoreV1Api(client)


def tenant_named(name: str, trust: Trust) -> GpuTenant:
    return GpuTenant.model_validate({"metadata": {"name": name}, "spec": {
        "trust": trust.value, "owners": [{"kind": "User", "name": f"{name}-owner"}],
        "members": [{"kind": "ServiceAccount", "name": "ci", "namespace": "default", "role": "edit"}],
        "gpu": {"quota": 1}}})


def rendered(tenant: GpuTenant):
    decision = decide(tenant.name, tenant.spec, CONFIG)
    assert decision.possible, decision.message
    return render_tenant(tenant, decision, CONFIG)


def apply(plane, objects: list[dict], *, dry_run: bool) -> str:
    arguments = ["apply", "--server-side", f"--field-manager={CONFIG.field_manager}", "--validate=strict", "-f", "-"]
    if dry_run:
        arguments.insert(1, "--dry-run=server")
    return plane.kubectl(*arguments, input=yaml.safe_dump_all(objects)).stdout


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_every_rendered_object_passes_server_side_dry_run(plane, queue_crd, example):
    document = yaml.safe_load(example.read_text())
    document["metadata"]["name"] = f"dry-{document['metadata']['name']}"
    result = rendered(GpuTenant.from_body(document))
    namespace, *rest = result.objects
    apply(plane, [namespace], dry_run=False)  # namespaced objects need their namespace to exist
    output = apply(plane, result.objects, dry_run=True)
    for obj in result.objects:
        assert f"{obj['metadata']['name']} serverside-applied (server dry run)" in output, (obj["kind"], output)
    assert len(output.strip().splitlines()) == len(result.objects)
    assert rest[-1]["kind"] == "Queue", f"Queue checked against {queue_crd}"


def test_dry_run_catches_an_unknown_queue_field(plane, queue_crd):
    """The check above can fail: a field the CRD does not know is rejected."""
    result = rendered(tenant_named("dry-bad-queue", Trust.TRUSTED))
    queue = result.objects[-1]
    queue["spec"]["resources"]["gpu"]["guaranteed"] = 1
    with pytest.raises(CommandError, match=r"\.spec\.resources\.gpu\.guaranteed: field not declared in schema"):
        apply(plane, [queue], dry_run=True)


def test_parent_queues_pass_server_side_dry_run_and_every_tenant_queue_names_one(plane, queue_crd):
    parents = render_parent_queues(CONFIG)
    output = apply(plane, parents, dry_run=True)
    assert [f"queue.scheduling.run.ai/{q['metadata']['name']} serverside-applied (server dry run)" for q in parents] \
        == output.strip().splitlines(), f"checked against {queue_crd}"
    tenant_queue = rendered(tenant_named("dry-default-parent", Trust.TRUSTED)).objects[-1]
    assert tenant_queue["spec"]["parentQueue"] == CONFIG.default_parent_queue
    assert CONFIG.default_parent_queue in [q["metadata"]["name"] for q in parents]


# -- admission proof ---------------------------------------------------------------------------

def chart_pod(plane, release: str, namespace: str, values: dict | None) -> tuple[dict, dict]:
    """The chart's ServiceAccount and its StatefulSet's pod template as a Pod named like the
    StatefulSet controller names it, with the `data` claim volume the controller adds."""
    arguments = ["template", release, str(REAL_VCLUSTER_CHART), "-n", namespace]
    if values is not None:
        arguments += ["-f", "-"]
    documents = [doc for doc in yaml.safe_load_all(
        plane.helm(*arguments, input=yaml.safe_dump(values) if values is not None else None).stdout) if doc]
    [statefulset] = [doc for doc in documents if doc["kind"] == "StatefulSet"]
    template = statefulset["spec"]["template"]
    spec = template["spec"]
    # the chart also renders the virtual cluster's workload ServiceAccount; the pod runs as this one
    [service_account] = [doc for doc in documents if doc["kind"] == "ServiceAccount"
                         and doc["metadata"]["name"] == spec["serviceAccountName"]]
    pod_name = f"{release}-0"
    for claim in statefulset["spec"].get("volumeClaimTemplates", []):
        claim_name = claim["metadata"]["name"]
        spec["volumes"].append({"name": claim_name,
                                "persistentVolumeClaim": {"claimName": f"{claim_name}-{pod_name}"}})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": pod_name, "namespace": namespace, "labels": template["metadata"]["labels"]},
           "spec": spec}
    return service_account, pod


def prepare_namespace(plane, core, objects: list[dict], service_account: dict) -> str:
    """Apply the rendered Namespace (+ quota objects) for real and the chart's ServiceAccount,
    then wait until the ServiceAccount and quota admission can see them."""
    apply(plane, objects, dry_run=False)
    namespace = objects[0]["metadata"]["name"]
    apply(plane, [service_account], dry_run=False)
    wait_for(lambda: core.list_namespaced_service_account(namespace, field_selector=
             f"metadata.name={service_account['metadata']['name']}").items, what="chart ServiceAccount")
    wait_for(lambda: core.read_namespaced_resource_quota(naming.RESOURCE_QUOTA_NAME, namespace).status.hard,
             what="ResourceQuota status")
    return namespace


def create_pod(core, pod: dict) -> str | None:
    """Create the Pod; None when admitted, else the API server's refusal message."""
    try:
        core.create_namespaced_pod(pod["metadata"]["namespace"], pod)
    except ApiException as error:
        assert error.status == 403, error.body
        return json.loads(error.body)["message"]
    return None


def quota_objects(result) -> list[dict]:
    return [obj for obj in result.objects if obj["kind"] in ("Namespace", "ResourceQuota", "LimitRange")]


@pytest.mark.parametrize("trust", list(Trust), ids=lambda trust: trust.value)
def test_rendered_control_plane_is_admitted_at_every_trust_level(plane, core, trust):
    name = f"adm-{trust.value.lower()}"
    result = rendered(tenant_named(name, trust))
    release, namespace = naming.release_name(name), naming.host_namespace(name, CONFIG)
    service_account, pod = chart_pod(plane, release, namespace, result.vcluster_values)
    prepare_namespace(plane, core, quota_objects(result), service_account)
    assert create_pod(core, pod) is None
    admitted = core.read_namespaced_pod(pod["metadata"]["name"], namespace)
    syncer = next(c for c in admitted.spec.containers if c.name == "syncer")
    assert syncer.security_context.run_as_user != 0
    assert syncer.resources.limits["cpu"] == "2"  # ours, not the LimitRange default of 1


def test_chart_defaults_are_rejected_by_restricted_pod_security(plane, core):
    name = "adm-default-untrusted"
    result = rendered(tenant_named(name, Trust.UNTRUSTED))
    release, namespace = naming.release_name(name), naming.host_namespace(name, CONFIG)
    service_account, pod = chart_pod(plane, release, namespace, values=None)
    prepare_namespace(plane, core, quota_objects(result), service_account)
    message = create_pod(core, pod)
    assert message is not None, "the chart's root control plane was admitted into a restricted namespace"
    assert 'violates PodSecurity "restricted:v1.34"' in message  # the namespace's pinned version
    assert "runAsNonRoot != true" in message and "runAsUser=0" in message
    assert "seccompProfile" in message and "capabilities" in message


def test_without_limits_the_quota_rejects_the_chart_default_but_not_the_rendered_values(plane, core):
    """loft-sh/vcluster#1746: a quota on limits.cpu rejects a control plane that states none. The
    namespace here has the rendered quota but no LimitRange, so nothing fills the limit in."""
    name = "adm-nolimitrange"
    result = rendered(tenant_named(name, Trust.TRUSTED))
    release, namespace = naming.release_name(name), naming.host_namespace(name, CONFIG)
    objects = [obj for obj in quota_objects(result) if obj["kind"] != "LimitRange"]
    service_account, default_pod = chart_pod(plane, release, namespace, values=None)
    prepare_namespace(plane, core, objects, service_account)
    message = create_pod(core, default_pod)
    assert message is not None, "the chart's default control plane passed a limits.cpu quota without limits"
    assert f"failed quota: {naming.RESOURCE_QUOTA_NAME}: must specify limits.cpu for: syncer" in message
    _, rendered_pod = chart_pod(plane, release, namespace, result.vcluster_values)
    assert create_pod(core, rendered_pod) is None
