"""The operator's KAI Queues are real scheduling input: the real KAI-Scheduler (its five
components, kubeplane.kai) places GPU pods on SIMULATED GPU nodes (kwok, kubeplane.gpu_nodes).

Each tenant goes through the operator's own pure steps: `decide` picks its pool and queue grant,
`render_tenant` renders the objects the operator applies (the Queue among them), and the admission
guard's `mutate_pod` steers its pods (queue label, schedulerName, the pool's nodeSelector and
tolerations) exactly as the webhook would. The parent queues (the configured department `research`
and the default parent queue) are applied by the operator's own GPU pools code, `apply_pools`, as
`gputenant run` does at startup. The host ResourceQuota is left out on purpose: it caps
the namespace's GPU requests at the same limit and would refuse pod N+1 at admission, before the
scheduler ever sees it; these tests are about what the scheduler enforces.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import jsonpatch
import kubernetes
import pytest
import yaml

from gputenant.api.v1alpha1 import GpuTenant
from gputenant.guard.mutation import mutate_pod
from gputenant.kube import KubeClient
from gputenant.policy.choose import decide
from gputenant.policy.decision import Decision
from gputenant.pools.apply import apply_pools
from gputenant.render.tenant import render_tenant
from kubeplane import wait_for
from kubeplane.kai import QUEUE_LABEL, SCHEDULER_NAME
from kubeplane.kai_fixtures import EXCLUSIVE_POOL, EXCLUSIVE_POOL_GPUS, KaiCluster

pytestmark = pytest.mark.plane

PODGROUPS = ("scheduling.run.ai", "v2alpha2", "podgroups")
BINDREQUESTS = ("scheduling.run.ai", "v1alpha2", "bindrequests")
PARENT_QUEUE = "research"
"""The department queue the tenants name as spec.gpu.parentQueue (examples/config.yaml parentQueues)."""
TIMEOUT = 60


class Tenant:
    """One tenant as the operator sees it: its decision and rendered host objects."""

    def __init__(self, cluster: KaiCluster, name: str, spec: dict):
        self.cluster = cluster
        self.model = GpuTenant.model_validate({"metadata": {"name": name}, "spec": spec})
        self.decision: Decision = decide(name, self.model.spec, cluster.config)
        assert self.decision.possible, self.decision.message
        self.objects = render_tenant(self.model, self.decision, cluster.config).objects
        [self.namespace] = [o["metadata"]["name"] for o in self.objects if o["kind"] == "Namespace"]
        [self.queue] = [o for o in self.objects if o["kind"] == "Queue"]

    @property
    def queue_name(self) -> str:
        return self.queue["metadata"]["name"]

    def pod(self, name: str, gpus: int = 1) -> dict:
        """A pod as the tenant writes it (Pod Security "restricted"), asking for `gpus` of the
        resource its grant names (nvidia.com/gpu, a MIG profile, ...), then as the admission guard
        mutates it."""
        resource = self.decision.pod_rules.gpu_resources[0]
        pod = {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534,
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "train", "image": "registry.example/train:1",
                    "resources": {"limits": {resource: str(gpus)}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
            },
        }
        return jsonpatch.apply_patch(pod, mutate_pod(pod, self.model.name, self.decision))


class Tenants:
    """Applies tenants and pods; removes them after the test so that the next one finds the
    simulated GPUs free."""

    def __init__(self, cluster: KaiCluster):
        self.cluster = cluster
        self.plane = cluster.plane
        self.created: list[Tenant] = []

    def apply(self, name: str, spec: dict) -> Tenant:
        tenant = Tenant(self.cluster, name, spec)
        objects = [o for o in tenant.objects if o["kind"] != "ResourceQuota"]
        self.plane.kubectl("apply", "--server-side", "--field-manager=gpu-tenant-operator", "-f", "-",
                           input=yaml.safe_dump_all(objects))
        self.created.append(tenant)
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            wait_for(lambda: core.list_namespaced_service_account(
                tenant.namespace, field_selector="metadata.name=default").items,
                timeout=TIMEOUT, what=f"ServiceAccount {tenant.namespace}/default")
        return tenant

    def create_pods(self, tenant: Tenant, count: int, gpus: int = 1) -> list[str]:
        names = [f"{tenant.model.name}-{index}" for index in range(count)]
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            for name in names:
                core.create_namespaced_pod(tenant.namespace, tenant.pod(name, gpus))
        return names

    def pods(self, tenant: Tenant) -> list[kubernetes.client.V1Pod]:
        with self.plane.api_client() as client:
            return kubernetes.client.CoreV1Api(client).list_namespaced_pod(tenant.namespace).items

    def running(self, tenant: Tenant) -> list[kubernetes.client.V1Pod]:
        return [pod for pod in self.pods(tenant)
                if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None]

    def delete_all(self) -> None:
        for tenant in self.created:
            self.plane.kubectl("delete", "namespace", tenant.namespace, "--wait=false")
            self.plane.kubectl("delete", "queue", tenant.queue_name, "--ignore-not-found")
        with self.plane.api_client() as client:
            core = kubernetes.client.CoreV1Api(client)
            wait_for(lambda: not [pod for tenant in self.created
                                  for pod in core.list_namespaced_pod(tenant.namespace).items],
                     timeout=TIMEOUT, what="the tenants' pods to be gone")


@pytest.fixture(scope="module")
def parent_queues(kai_cluster: KaiCluster) -> list[str]:
    """The parent queues of the configuration, applied by the operator's GPU pools loop (which also
    writes the device-plugin ConfigMap, hence its namespace)."""
    config = kai_cluster.config
    namespace = config.device_plugin_config_map.namespace
    if kai_cluster.plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:  # test_hami_kai.py may have made it
        kai_cluster.plane.create_namespace(namespace)

    async def apply():
        async with KubeClient.from_kubeconfig(str(kai_cluster.plane.kubeconfig_path), config.field_manager) as client:
            return await apply_pools(client, config)
    result = asyncio.run(apply())
    assert not result.plan.problems, result.plan.problems
    names = [queue.name for queue in config.platform_parent_queues()]
    # written now, or already by an earlier module's round (nothing is written when nothing changed)
    assert all(kai_cluster.plane.cluster_object("scheduling.run.ai", "v2", "queues", name) for name in names), \
        result.written
    return names


@pytest.fixture
def tenants(kai_cluster: KaiCluster, parent_queues: list[str]) -> Iterator[Tenants]:
    created = Tenants(kai_cluster)
    yield created
    created.delete_all()


def exclusive(quota: int, limit: int) -> dict:
    return {"trust": "Internal", "owners": [{"kind": "User", "name": "alice@example.com"}],
            "sharing": {"mode": "Exclusive"},
            "gpu": {"quota": quota, "limit": limit, "parentQueue": PARENT_QUEUE}}


def custom(plane, group_version_plural: tuple[str, str, str], namespace: str) -> list[dict]:
    with plane.api_client() as client:
        return kubernetes.client.CustomObjectsApi(client).list_namespaced_custom_object(
            *group_version_plural[:2], namespace, group_version_plural[2])["items"]


def podgroup_of(plane, namespace: str, pod: str) -> dict | None:
    owned = [group for group in custom(plane, PODGROUPS, namespace)
             if any(ref["name"] == pod for ref in group["metadata"].get("ownerReferences", []))]
    return owned[0] if owned else None


def scheduled_condition(pod: kubernetes.client.V1Pod):
    return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


def test_kai_binds_each_tenants_gpu_pod_to_a_node_of_its_pool(kai_cluster: KaiCluster, tenants: Tenants):
    notebooks = tenants.apply("notebooks", {
        "trust": "Trusted", "owners": [{"kind": "User", "name": "bob@example.com"}],
        "gpu": {"quota": 1, "parentQueue": PARENT_QUEUE}})
    training = tenants.apply("training", exclusive(quota=1, limit=1))
    external = tenants.apply("external", {
        "trust": "Untrusted", "owners": [{"kind": "User", "name": "carol@example.com"}],
        "gpu": {"quota": 1, "parentQueue": PARENT_QUEUE}})
    assert notebooks.decision.pool.name == "a100-timeslice"
    assert training.decision.pool.name == EXCLUSIVE_POOL
    assert external.decision.pool.name == "h100-mig-small"

    for tenant in (notebooks, training, external):
        [name] = tenants.create_pods(tenant, 1)
        [pod] = wait_for(lambda tenant=tenant: tenants.running(tenant), timeout=TIMEOUT, what=f"{name} Running")
        pool = tenant.decision.pool.name
        assert pod.spec.scheduler_name == SCHEDULER_NAME
        assert pod.metadata.labels[QUEUE_LABEL] == tenant.queue_name
        assert pod.spec.node_name in kai_cluster.node_names(pool), \
            f"{name} on {pod.spec.node_name}, not in pool {pool} {sorted(kai_cluster.node_names(pool))}"
        # The path through KAI: the pod-grouper put the pod in the tenant's queue, the scheduler
        # asked the binder to bind it there (no other scheduler runs on this plane).
        group = podgroup_of(kai_cluster.plane, tenant.namespace, name)
        assert group and group["spec"]["queue"] == tenant.queue_name
        [bind] = [b for b in custom(kai_cluster.plane, BINDREQUESTS, tenant.namespace)
                  if b["spec"]["podName"] == name]
        assert bind["spec"]["selectedNode"] == pod.spec.node_name


def test_queue_limit_keeps_pod_n_plus_one_pending_until_one_of_n_goes(kai_cluster: KaiCluster,
                                                                      tenants: Tenants):
    limit = 2
    capped = tenants.apply("capped", exclusive(quota=limit, limit=limit))
    assert capped.queue["spec"]["resources"]["gpu"]["limit"] == limit
    assert limit < EXCLUSIVE_POOL_GPUS, "the pool must have room: the queue limit is what holds the pod"
    tenants.create_pods(capped, limit + 1)

    def over_limit() -> kubernetes.client.V1Pod | None:
        pending = [pod for pod in tenants.pods(capped) if pod.status.phase == "Pending"]
        condition = scheduled_condition(pending[0]) if len(pending) == 1 else None
        if len(tenants.running(capped)) == limit and condition and condition.message.startswith("OverLimit"):
            return pending[0]
        return None
    held = wait_for(over_limit, timeout=TIMEOUT, what=f"{limit} pods Running and one held by the queue limit")
    condition = scheduled_condition(held)
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert capped.queue_name in condition.message and f"Limit is {limit} GPUs" in condition.message
    group = podgroup_of(kai_cluster.plane, capped.namespace, held.metadata.name)
    reasons = [reason for c in group["status"]["schedulingConditions"] for reason in c.get("reasons", [])]
    assert any(r["reason"] == "OverLimit" and r["details"]["queueDetails"]["name"] == capped.queue_name
               for r in reasons), reasons

    first = tenants.running(capped)[0].metadata.name
    kai_cluster.plane.kubectl("delete", "pod", first, "-n", capped.namespace, "--wait=false")
    wait_for(lambda: any(pod.metadata.name == held.metadata.name for pod in tenants.running(capped)),
             timeout=TIMEOUT, what=f"{held.metadata.name} to run once {first} is gone")
    assert len(tenants.running(capped)) == limit


def test_reclaim_gives_a_queue_back_its_deserved_quota(kai_cluster: KaiCluster, tenants: Tenants):
    deserved = EXCLUSIVE_POOL_GPUS // 2
    early = tenants.apply("early", exclusive(quota=deserved, limit=EXCLUSIVE_POOL_GPUS))
    late = tenants.apply("late", exclusive(quota=deserved, limit=EXCLUSIVE_POOL_GPUS))

    # Alone, the early queue bursts over its quota onto the whole pool.
    tenants.create_pods(early, EXCLUSIVE_POOL_GPUS)
    wait_for(lambda: len(tenants.running(early)) == EXCLUSIVE_POOL_GPUS, timeout=TIMEOUT,
             what=f"early's {EXCLUSIVE_POOL_GPUS} pods Running")

    # The late queue asks for its quota: KAI evicts early's pods above early's quota for it.
    tenants.create_pods(late, deserved)
    wait_for(lambda: len(tenants.running(late)) == deserved, timeout=TIMEOUT,
             what=f"late's {deserved} pods Running after reclaim")
    wait_for(lambda: len(tenants.running(early)) == deserved, timeout=TIMEOUT,
             what=f"early back to its quota of {deserved}")
    with kai_cluster.plane.api_client() as client:
        events = kubernetes.client.CoreV1Api(client).list_namespaced_event(
            early.namespace, field_selector="reason=Evict").items
    # Evicted for a workload of the other queue: reclaim (preemption stays within one queue).
    evictions = [event.message for event in events]
    assert len(evictions) >= EXCLUSIVE_POOL_GPUS - deserved, evictions
    assert all(f"by workload {late.namespace}/" in message for message in evictions), evictions


def test_a_tenant_without_parent_queue_runs_under_the_default_parent_queue(kai_cluster: KaiCluster,
                                                                          tenants: Tenants):
    """KAI v0.12 schedules only from queues under a parent (pkg/scheduler/actions/utils/
    job_order_by_queue.go skips a queue whose department is missing, cluster_info/queue.go drops a
    queue whose parent does not exist). A tenant without spec.gpu.parentQueue gets the operator
    config's defaultParentQueue, which the pools loop created: its pod runs."""
    spec = exclusive(quota=1, limit=1)
    del spec["gpu"]["parentQueue"]
    tenant = tenants.apply("no-department", spec)
    default = kai_cluster.config.default_parent_queue
    assert tenant.queue["spec"]["parentQueue"] == default
    with kai_cluster.plane.api_client() as client:
        parent = kubernetes.client.CustomObjectsApi(client).get_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues", default)
    assert "parentQueue" not in parent["spec"]
    assert parent["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpu-tenant-operator",
                                            "gputenant.io/component": "parent-queue"}
    applied_by = {entry["manager"] for entry in parent["metadata"]["managedFields"] if entry["operation"] == "Apply"}
    assert applied_by == {kai_cluster.config.field_manager}

    [name] = tenants.create_pods(tenant, 1)
    [pod] = wait_for(lambda: tenants.running(tenant), timeout=TIMEOUT, what=f"{name} Running")
    assert pod.spec.node_name in kai_cluster.node_names(EXCLUSIVE_POOL)
    group = podgroup_of(kai_cluster.plane, tenant.namespace, name)
    assert group and group["spec"]["queue"] == tenant.queue_name
