"""The upstream KAI-Scheduler and GPU Operator CRDs install into the plane and accept the objects
the operator writes, and the project's minimal Queue CRD accepts the same Queue.

The upstream files are read-only data next to the clone (../shared/third_party); where they are
absent the upstream checks are skipped and the minimal CRD still runs.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from gputenant.config.models import OperatorConfig
from gputenant.render import render_parent_queues
from kubeplane.fixtures import (
    MINIMAL_QUEUE_CRD,
    THIRD_PARTY_DIR,
    UPSTREAM_CLUSTERPOLICY_CRD,
    UPSTREAM_PODGROUP_CRD,
    UPSTREAM_QUEUE_CRD,
    install_crds,
    install_kai_queue_crd,
)

needs_upstream = pytest.mark.skipif(
    not THIRD_PARTY_DIR.is_dir(),
    reason=f"upstream CRDs not present at {THIRD_PARTY_DIR} (read-only data beside the clone)")

QUEUE_SPEC = {
    "displayName": "Team A",
    "parentQueue": "gpu-tenants",
    "priority": 100,
    "resources": {
        "gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1},
        "cpu": {"quota": 16000, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": 64000, "limit": -1, "overQuotaWeight": 1},
    },
}


@pytest.fixture
def custom(plane):
    with plane.api_client() as api:
        yield client.CustomObjectsApi(api)


@pytest.fixture
def restore_queue_crd(plane):
    """Tests here swap the Queue CRD; leave the one every other test expects."""
    yield
    install_kai_queue_crd(plane)


def create_and_read_back(custom: client.CustomObjectsApi, group: str, version: str, plural: str,
                         body: dict, namespace: str | None = None) -> dict:
    """Create `body` and return it as stored, then delete it. A spec that comes back unchanged
    proves the schema accepted every field instead of pruning it."""
    name = body["metadata"]["name"]
    if namespace:
        custom.create_namespaced_custom_object(group, version, namespace, plural, copy.deepcopy(body))
        stored = custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
    else:
        custom.create_cluster_custom_object(group, version, plural, copy.deepcopy(body))
        stored = custom.get_cluster_custom_object(group, version, plural, name)
        custom.delete_cluster_custom_object(group, version, plural, name)
    return stored


def queue(name: str) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": copy.deepcopy(QUEUE_SPEC)}


@needs_upstream
def test_upstream_queue_crd_accepts_a_team_queue(plane, custom, restore_queue_crd):
    assert install_crds(plane, UPSTREAM_QUEUE_CRD) == ["queues.scheduling.run.ai"]
    stored = create_and_read_back(custom, "scheduling.run.ai", "v2", "queues", queue("upstream-team-a"))
    assert stored["spec"] == QUEUE_SPEC


@needs_upstream
@pytest.mark.parametrize("crd", ["upstream", "minimal"])
def test_queue_crds_keep_every_field_of_a_parent_queue(plane, custom, restore_queue_crd, crd):
    """The operator's department queue (top-level, -1 for unlimited) is stored unpruned."""
    install_crds(plane, UPSTREAM_QUEUE_CRD if crd == "upstream" else MINIMAL_QUEUE_CRD)
    config = OperatorConfig.model_validate({"defaultParentQueue": f"{crd}-tenants", "parentQueues": [
        {"name": f"{crd}-research", "displayName": "Research", "priority": 200,
         "resources": {"gpu": {"quota": 8, "limit": 12.5, "overQuotaWeight": 2}}}]})
    for parent in render_parent_queues(config):
        stored = create_and_read_back(custom, "scheduling.run.ai", "v2", "queues", parent)
        assert stored["spec"] == parent["spec"]


def test_minimal_queue_crd_accepts_a_team_queue(plane, custom, restore_queue_crd):
    assert install_crds(plane, MINIMAL_QUEUE_CRD) == ["queues.scheduling.run.ai"]
    stored = create_and_read_back(custom, "scheduling.run.ai", "v2", "queues", queue("minimal-team-a"))
    assert stored["spec"] == QUEUE_SPEC


def spec_schema(path: Path) -> dict:
    [crd] = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    [version] = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


def typed_fields(schema: dict, prefix: str = "") -> dict[str, str]:
    fields = {}
    for name, child in schema.get("properties", {}).items():
        fields[prefix + name] = child.get("type")
        fields.update(typed_fields(child, f"{prefix}{name}."))
    return fields


@needs_upstream
def test_minimal_queue_crd_is_a_subset_of_upstream():
    minimal, upstream = typed_fields(spec_schema(MINIMAL_QUEUE_CRD)), typed_fields(spec_schema(UPSTREAM_QUEUE_CRD))
    assert {field: kind for field, kind in minimal.items() if upstream.get(field) != kind} == {}


@needs_upstream
def test_upstream_podgroup_crd_accepts_a_gang(plane, custom):
    install_crds(plane, UPSTREAM_PODGROUP_CRD)
    namespace = plane.create_namespace(f"podgroup-{uuid.uuid4().hex[:6]}").metadata.name
    try:
        spec = {"minMember": 2, "queue": "team-a", "priorityClassName": "train"}
        stored = create_and_read_back(custom, "scheduling.run.ai", "v2alpha2", "podgroups", {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "gang"}, "spec": spec}, namespace=namespace)
        assert stored["spec"] == spec
    finally:
        client.CoreV1Api(custom.api_client).delete_namespace(namespace)


@needs_upstream
def test_upstream_clusterpolicy_crd_accepts_a_device_plugin_config(plane, custom):
    install_crds(plane, UPSTREAM_CLUSTERPOLICY_CRD)
    required = ["daemonsets", "dcgm", "dcgmExporter", "driver", "gfd", "nodeStatusExporter", "toolkit"]
    spec = {**{name: {} for name in required},
            "operator": {"defaultRuntime": "containerd"},
            "devicePlugin": {"config": {"name": "time-slicing-config", "default": "any"}},
            "mig": {"strategy": "mixed"}}
    stored = create_and_read_back(custom, "nvidia.com", "v1", "clusterpolicies", {
        "apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"}, "spec": spec})
    assert stored["spec"]["devicePlugin"]["config"] == spec["devicePlugin"]["config"]
    assert stored["spec"]["mig"] == {"strategy": "mixed"}
