"""KAI's vocabulary against the real KAI-Scheduler v0.12.0: a label KAI's GPU-sharing code reads keeps a
whole GPU reserved, charged to no queue; the guard refuses it, and the pool report names the leak.

KAI's binder keeps a GPU's reservation pod while any Pending or Running pod carries the GPU's group,
as `runai-gpu-group` or as the multi-GPU `runai-gpu-group/<group>` label
(pkg/binder/binding/resourcereservation, v0.12.0). The GPU nodes and the reservation pods' GPU report
are SIMULATED (test_hami_kai.py says how); the scheduler, the binder and their decisions are real.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import jsonpatch
import kubernetes
import pytest
from test_hami_kai import POOL, TIMEOUT, internal_tenant_on, tenant_pod

from gputenant.guard.kai_vocabulary import GPU_GROUP_LABEL, MULTI_GPU_GROUP_PREFIX
from gputenant.guard.mutation import mutate_pod
from gputenant.guard.rules import validate_pod
from gputenant.kube import KubeClient
from gputenant.pools.apply import collect_pool_reports
from gputenant.pools.leaks import SETTLING
from kubeplane import wait_for
from kubeplane.gpu_nodes import RESERVATION_NAMESPACE
from kubeplane.kai_fixtures import KaiCluster

pytestmark = pytest.mark.plane

KEPT_SECONDS = 15
"""How long the orphaned reservation is watched to stay: the binder syncs a group on every pod event of it."""


def keeper(model, decision, namespace: str, group: str) -> dict:
    """The tenant's pod that only holds the GPU group: gated, so it stays Pending and is never scheduled."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "keeper", "namespace": namespace, "labels": {f"{MULTI_GPU_GROUP_PREFIX}{group}": group}},
           "spec": {"schedulingGates": [{"name": "example.com/hold"}],
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "idle", "image": "registry.example/idle:1", "securityContext": {
                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    return jsonpatch.apply_patch(pod, mutate_pod(pod, model.metadata.name, decision))


def reports(kai_cluster: KaiCluster, now: datetime):
    async def collect():
        async with KubeClient.from_kubeconfig(str(kai_cluster.plane.kubeconfig_path),
                                              kai_cluster.config.field_manager) as client:
            return await collect_pool_reports(client, kai_cluster.config, now=now)
    return {report.name: report for report in asyncio.run(collect())}


def test_a_pending_pods_gpu_group_label_keeps_no_reservation(kai_cluster: KaiCluster):
    with internal_tenant_on(kai_cluster, "vocab") as (model, decision, objects), \
            kai_cluster.plane.api_client() as client:
        core = kubernetes.client.CoreV1Api(client)
        [namespace] = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
        core.create_namespaced_pod(namespace, tenant_pod(model, decision, namespace, "share"))
        share = wait_for(lambda: (lambda p: p if p.status.phase == "Running" else None)(
            core.read_namespaced_pod("share", namespace)), timeout=TIMEOUT, what="the share Running")
        group = share.metadata.labels[GPU_GROUP_LABEL]
        [reservation] = core.list_namespaced_pod(RESERVATION_NAMESPACE, label_selector=f"{GPU_GROUP_LABEL}={group}").items

        attack = keeper(model, decision, namespace, group)
        refused = {v.rule for v in validate_pod(attack, model.metadata.name, model.spec.trust, decision,
                                                config=kai_cluster.config)}
        assert "scheduler-key" in refused, "the guard admits a tenant pod that keeps another GPU's reservation"

        # What the label did before the guard refused it: the share ends, its reservation stays.
        core.create_namespaced_pod(namespace, attack)
        core.delete_namespaced_pod("share", namespace, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=share").items,
                 timeout=TIMEOUT, what="the share gone")
        time.sleep(KEPT_SECONDS)
        kept = core.list_namespaced_pod(RESERVATION_NAMESPACE, label_selector=f"{GPU_GROUP_LABEL}={group}").items
        assert [p.metadata.uid for p in kept] == [reservation.metadata.uid], "KAI kept the GPU for the pending pod"

        [problem] = reports(kai_cluster, datetime.now(UTC) + SETTLING)[POOL].problems
        assert problem.startswith("UnexplainedReservation: 1 GPU(s)")
        assert f"{reservation.metadata.name} on {reservation.spec.node_name} (group {group})" in problem

        # Deleting the pod need not free the GPU: KAI syncs a group on the events of pods that carry the plain
        # group label, and this one carries only the multi-GPU one. The report's advice is the cleanup.
        core.delete_namespaced_pod("keeper", namespace, grace_period_seconds=0)
        core.delete_collection_namespaced_pod(RESERVATION_NAMESPACE, label_selector=f"{GPU_GROUP_LABEL}={group}")
        wait_for(lambda: not reports(kai_cluster, datetime.now(UTC) + SETTLING)[POOL].problems, timeout=TIMEOUT,
                 what="the report clean once the reservation is gone")
