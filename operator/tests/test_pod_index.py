"""The host-pod index keeps a slim pod (gputenant.indexes.kept_pod): every reader a pass runs on
host pods (the control plane's readiness, the tenant's view, the HAMi library's delivery) answers
the same on it as on the whole pod, and it is a fraction of the pod's size."""

from __future__ import annotations

import json

import kopf
import pytest

from gputenant.api.hub import GpuTenant
from gputenant.guard.hami_caps import INIT_CONTAINER
from gputenant.indexes import kept_pod
from gputenant.policy.choose import decide
from gputenant.pools.hami_library import library_failure
from gputenant.reconcile.controlplane import control_plane_pods, judge, pod_detail, pod_ready, pod_signature
from gputenant.render.tenant_view import (
    FRACTION_ANNOTATION,
    VIRTUAL_NAME_ANNOTATION,
    VIRTUAL_NAMESPACE_ANNOTATION,
    pod_signature_for_view,
    pod_units,
    queued_pods,
    units_per_device,
)
from kubeplane.builders import operator_config, sharing_pools, tenant


def container(name: str, limits: dict[str, str] | None = None) -> dict:
    """A container as the API server returns it: most of it is what no pass reads."""
    return {"name": name, "image": f"registry.example.com/{name}:1.0", "args": [f"--flag-{i}=value" for i in range(20)],
            "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(15)],
            "volumeMounts": [{"name": f"vol-{i}", "mountPath": f"/mnt/{i}"} for i in range(6)],
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8443, "scheme": "HTTPS"}, "periodSeconds": 2},
            "resources": {"limits": limits or {"cpu": "1"}, "requests": {"cpu": "100m"}},
            "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False}}


def pod(name: str, labels: dict, annotations: dict, containers: list[dict], status: dict, node: str = "") -> kopf.Body:
    spec = {"containers": containers, "initContainers": [container(INIT_CONTAINER)],
            "volumes": [{"name": f"vol-{i}", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
                        for i in range(6)], "schedulerName": "kai-scheduler", "serviceAccountName": "default",
            **({"nodeName": node} if node else {})}
    return kopf.Body({"apiVersion": "v1", "kind": "Pod", "spec": spec, "status": status, "metadata": {
        "name": name, "namespace": "tenant-team-a", "uid": f"uid-{name}", "resourceVersion": "7", "labels": labels,
        "annotations": annotations, "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}] * 5}})


CONTROL_PLANE = pod("team-a-0", {"app": "vcluster", "release": "team-a", "controller-revision-hash": "team-a-5d"}, {},
                    [container("syncer")], {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                                            "containerStatuses": [{"name": "syncer", "ready": True,
                                                                   "state": {"running": {}}}]}, node="node-1")
STARTING = pod("team-a-1", {"app": "vcluster", "release": "team-a", "controller-revision-hash": "team-a-5d"}, {},
               [container("syncer")], {"phase": "Pending", "containerStatuses": [
                   {"name": "syncer", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]})
GPU_POD = pod("train-x-default-vc", {"vcluster.loft.sh/managed-by": "team-a"},
              {VIRTUAL_NAME_ANNOTATION: "train", VIRTUAL_NAMESPACE_ANNOTATION: "default"},
              [container("trainer", {"nvidia.com/gpu": "2"})],
              {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": "no node"}],
               "initContainerStatuses": [{"name": INIT_CONTAINER, "state": {"waiting": {
                   "reason": "ImagePullBackOff", "message": "pull failed"}}}]})
FRACTION_POD = pod("frac-x-default-vc", {}, {VIRTUAL_NAME_ANNOTATION: "frac", VIRTUAL_NAMESPACE_ANNOTATION: "default",
                                              FRACTION_ANNOTATION: "0.5"}, [container("worker")],
                   {"phase": "Running"}, node="gpu-node-1")
PODS = [CONTROL_PLANE, STARTING, GPU_POD, FRACTION_POD]


@pytest.mark.parametrize("whole", PODS, ids=lambda p: p["metadata"]["name"])
def test_every_reader_of_a_host_pod_answers_the_same_on_thekept_pod(whole):
    kept = kept_pod(whole)
    whole = json.loads(json.dumps(dict(whole)))
    for reader in (pod_ready, pod_detail, library_failure, pod_signature_for_view,
                   lambda p: pod_signature(None, p), lambda p: pod_units(p, {"nvidia.com/gpu": 1.0})):
        assert reader(kept) == reader(whole)
    assert "managedFields" not in kept["metadata"]
    assert len(json.dumps(kept)) < len(json.dumps(whole)) / 2


def test_the_control_plane_and_the_view_read_fromkept_pods_as_from_whole_ones():
    config = operator_config(*sharing_pools())
    body = GpuTenant.model_validate(tenant("team-a", "Trusted", gpus=2))
    decision = decide("team-a", body.spec, config)
    kept = [kept_pod(p) for p in PODS]
    whole = [json.loads(json.dumps(dict(p))) for p in PODS]
    statefulset = {"metadata": {"name": "team-a", "generation": 1}, "spec": {"replicas": 2},
                   "status": {"observedGeneration": 1, "updateRevision": "team-a-5d", "readyReplicas": 1}}
    assert judge(statefulset, control_plane_pods(kept, "team-a")) == judge(statefulset, control_plane_pods(whole, "team-a"))
    assert units_per_device(decision)
    assert queued_pods(kept, decision) == queued_pods(whole, decision)
    assert [p.name for p in queued_pods(kept, decision)] == ["frac", "train"]
