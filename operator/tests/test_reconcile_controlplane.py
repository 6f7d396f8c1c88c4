"""Honest health of a tenant's control plane, the pure parts: the judgement over the vCluster
StatefulSet and its pods (shaped as the StatefulSet controller and the kubelet write them), the
backoff that counts a step's consecutive failures (not kopf's attempts), the operator's own looks
again at a waiting tenant, and what of a control-plane pod the watch reacts to.
(Against a real vCluster: e2e/tests/test_vcluster_real_operator.py.)"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import yaml

from gputenant import naming
from gputenant.api import conditions as reasons
from gputenant.config.models import OperatorConfig
from gputenant.kube.packed import pack
from gputenant.reconcile.cache import WatchCache
from gputenant.reconcile.context import Outcome, Pass, Services, backoff
from gputenant.reconcile.controlplane import control_plane_pods, judge, pod_selector, pod_signature
from gputenant.reconcile.memory import TenantMemory
from gputenant.reconcile.rechecks import Rechecks
from gputenant.reconcile.steps.vcluster import read_control_plane

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = OperatorConfig.model_validate(yaml.safe_load((REPO_ROOT / "examples" / "config.yaml").read_text()))
OLD, NEW = "team-a-6d5f7c9b8", "team-a-7f8c6d4b5"


def statefulset(*, generation: int = 2, observed: int = 2, current: str = NEW, update: str = NEW,
                replicas: int = 1, ready: int = 1, updated: int = 1) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "team-a", "namespace": "tenant-team-a", "generation": generation},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": observed, "replicas": replicas, "readyReplicas": ready,
                       "currentReplicas": replicas, "updatedReplicas": updated, "currentRevision": current,
                       "updateRevision": update}}


def pod(*, revision: str = NEW, ready: bool = True, deleting: bool = False, waiting: str | None = None,
        name: str = "team-a-0") -> dict:
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-25T12:00:00Z"}}
    metadata = {"name": name, "namespace": "tenant-team-a",
                "labels": {"app": "vcluster", "release": "team-a", "controller-revision-hash": revision}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-25T12:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [{"name": "syncer", "ready": ready, "state": state}]}}


def test_ready_only_when_rolled_out_at_the_current_revision_with_a_ready_pod():
    state = judge(statefulset(), [pod()])
    assert state.ready and state.reason == reasons.CONTROL_PLANE_UP
    assert NEW in state.message and "1/1" in state.message


def test_no_statefulset_yet_is_starting():
    state = judge(None, [])
    assert not state.ready and state.reason == reasons.CONTROL_PLANE_STARTING and not state.has_pods


def test_a_killed_pod_is_starting_even_while_the_statefulset_status_still_counts_it_ready():
    """The pod list is read after the kill, the StatefulSet's status may not have caught up."""
    gone = judge(statefulset(ready=1), [])
    assert not gone.ready and gone.reason == reasons.CONTROL_PLANE_STARTING and not gone.has_pods
    terminating = judge(statefulset(ready=1), [pod(deleting=True)])
    assert not terminating.ready and terminating.reason == reasons.CONTROL_PLANE_STARTING


def test_a_pod_that_is_not_ready_says_what_it_does():
    state = judge(statefulset(ready=0), [pod(ready=False, waiting="CrashLoopBackOff")])
    assert not state.ready and state.reason == reasons.CONTROL_PLANE_STARTING
    assert "team-a-0" in state.message and "CrashLoopBackOff" in state.message
    probing = judge(statefulset(ready=0), [pod(ready=False)])
    assert "readiness probe" in probing.message


def test_a_new_revision_rolling_out_is_not_ready_until_the_controller_completes_it():
    """After a values change: the old pod may still be ready, the new revision is not rolled out."""
    old_still_serving = judge(statefulset(current=OLD, update=NEW, updated=0), [pod(revision=OLD)])
    assert not old_still_serving.ready and old_still_serving.reason == reasons.CONTROL_PLANE_ROLLING_OUT
    new_starting = judge(statefulset(current=OLD, update=NEW, ready=0), [pod(revision=NEW, ready=False)])
    assert not new_starting.ready and new_starting.reason == reasons.CONTROL_PLANE_ROLLING_OUT
    ready_but_not_completed = judge(statefulset(current=OLD, update=NEW), [pod(revision=NEW)])
    assert not ready_but_not_completed.ready


def test_a_spec_the_controller_has_not_seen_yet_is_rolling_out():
    state = judge(statefulset(generation=3, observed=2), [pod()])
    assert not state.ready and state.reason == reasons.CONTROL_PLANE_ROLLING_OUT and "3" in state.message


def test_only_a_statefulset_status_behind_pods_that_need_nothing_more_is_lagging():
    """Then the controller writes within moments and no pod event follows: the step looks again soon."""
    assert judge(statefulset(generation=1, observed=0), [pod()]).lagging  # the pod came before the status write
    assert judge(statefulset(generation=3, observed=2), [pod(revision=OLD)]).lagging
    assert judge(statefulset(current=OLD, update=NEW), [pod(revision=NEW)]).lagging  # rollout done, status behind
    assert not judge(statefulset(current=OLD, update=NEW, updated=0), [pod(revision=OLD)]).lagging
    assert not judge(statefulset(current=OLD, update=NEW, ready=0), [pod(revision=NEW, ready=False)]).lagging
    assert not judge(statefulset(current=OLD, update=NEW), [pod(revision=NEW), pod(revision=OLD, name="team-a-1")]).lagging
    assert not judge(statefulset(ready=0), [pod(ready=False)]).lagging
    assert not judge(statefulset(), [pod()]).lagging


def test_scaled_to_zero_is_not_ready():
    assert not judge(statefulset(replicas=0, ready=0, updated=0), []).ready


def test_the_pod_selector_is_the_charts_labels():
    assert pod_selector("team-a") == "app=vcluster,release=team-a"


def test_the_control_plane_pods_among_the_namespaces_are_those_the_selector_selects():
    other_release = pod(name="team-b-0")
    other_release["metadata"]["labels"]["release"] = "team-b"
    workload = {"metadata": {"name": "train", "labels": {"release": "team-a"}}}
    unlabelled = {"metadata": {"name": "plain"}}
    assert control_plane_pods([workload, pod(), other_release, unlabelled], "team-a") == [pod()]


def test_backoff_counts_consecutive_failures_of_one_step_and_a_clean_pass_resets_it():
    memory = TenantMemory()
    assert [memory.count_failure("uid-1", reasons.KUBECONFIG_READY) for _ in range(3)] == [1, 2, 3]
    assert memory.count_failure("uid-1", reasons.VCLUSTER_READY) == 1  # another step starts again
    memory.clear_failures("uid-1")
    assert memory.count_failure("uid-1", reasons.VCLUSTER_READY) == 1
    memory.forget("uid-1")
    assert memory.count_failure("uid-1", reasons.VCLUSTER_READY) == 1


def one_pass(memory: TenantMemory, client: object = None) -> Pass:
    services = Services(client=client, config=CONFIG, releases=None, issuer=None, memory=memory)  # type: ignore[arg-type]
    return Pass(services, {"metadata": {"name": "team-a", "uid": "uid-1", "generation": 1}},
                datetime(2026, 11, 25, tzinfo=UTC))


def test_the_first_failure_after_waits_retries_after_5s_whatever_kopf_counted():
    """Before: backoff(kopf's retry) — after four waits for the control plane, 80 s."""
    memory = TenantMemory()
    for _ in range(4):
        waiting = one_pass(memory)
        waiting.wait(2.0)
        assert waiting.outcome.retry_after is None and waiting.outcome.wait_after == 2.0
    failed = one_pass(memory)
    failed.retry_later(reasons.KUBECONFIG_READY)
    assert failed.outcome.retry_after == backoff(0) == 5.0
    again = one_pass(memory)
    again.retry_later(reasons.KUBECONFIG_READY)
    assert again.outcome.retry_after == 10.0


def test_a_waiting_tenant_is_looked_at_again_until_it_stops_waiting():
    """The cell's work queue runs the looks (test_cell.py); here, what it is told after each pass."""
    rechecks = Rechecks()
    assert [rechecks.follow("team-a", wait) for wait in (2.0, 2.0, None, 2.0)] == [2.0, 2.0, None, 2.0]


def test_looks_again_are_bounded_and_count_again_once_the_tenant_stops_waiting():
    rechecks = Rechecks(max_looks=3)
    assert [rechecks.follow("team-a", 0.5) for _ in range(5)] == [0.5, 0.5, 0.5, None, None]
    assert rechecks.follow("team-a", None) is None
    assert rechecks.follow("team-a", 0.5) == 0.5


def test_a_control_plane_change_the_pass_in_flight_read_after_is_no_news():
    """The pod turns ready while a pass installs the release: the cell waits for that pass
    (`Cell.control_plane_changed`), which read the control plane after the change."""
    rechecks = Rechecks()
    changed_at = time.monotonic()
    rechecks.judged("team-a", Outcome(control_plane_read_at=time.monotonic()))
    assert not rechecks.is_news("team-a", "team-a-0", (NEW,), changed_at)


def test_a_control_plane_change_after_the_last_read_is_news():
    """A change after the last pass read the control plane (or with no pass yet) is looked at."""
    rechecks = Rechecks()
    assert rechecks.is_news("team-a", "team-a-0", (NEW,), time.monotonic())
    rechecks.judged("team-a", Outcome(control_plane_read_at=time.monotonic()))
    rechecks.judged("team-a", Outcome())
    assert rechecks.is_news("team-a", "team-a-0", (NEW,), time.monotonic())


def test_a_change_the_last_pass_saw_already_is_no_news_however_late_the_watch_tells_it():
    """The listing of the pass had the pod ready at NEW; the watch's event for it came after the
    listing was sent. Another revision, the pod not serving, or another pod's change are news."""
    rechecks = Rechecks()
    rechecks.judged("team-a", Outcome(control_plane_read_at=time.monotonic(),
                                      control_plane_pods={"team-a-0": (NEW,), "team-a-1": None}))
    later = time.monotonic() + 1
    assert not rechecks.is_news("team-a", "team-a-0", (NEW,), later)
    assert not rechecks.is_news("team-a", "team-a-1", None, later)
    assert not rechecks.is_news("team-a", "team-a-2", None, later)  # not listed: it did not serve
    assert rechecks.is_news("team-a", "team-a-0", (OLD,), later)
    assert rechecks.is_news("team-a", "team-a-0", None, later)
    assert rechecks.is_news("team-a", "team-a-1", (NEW,), later)
    assert rechecks.is_news("team-b", "team-b-0", (NEW,), later)  # no pass of team-b read its control plane


def test_only_the_newest_reading_of_the_control_plane_is_compared_with():
    rechecks = Rechecks()
    older = time.monotonic()
    rechecks.judged("team-a", Outcome(control_plane_read_at=older + 1e-6, control_plane_pods={"team-a-0": None}))
    rechecks.judged("team-a", Outcome(control_plane_read_at=older, control_plane_pods={"team-a-0": (NEW,)}))
    assert rechecks.is_news("team-a", "team-a-0", (NEW,), older + 1)


class TimedReads:
    """Stands in for the API client of one pass: answers the StatefulSet and the pod listing and
    notes when each was asked (the order the pass's reading of the control plane depends on)."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        self.asked[kind] = time.monotonic()
        await asyncio.sleep(0.01)
        return statefulset()

    async def list(self, api_version: str, kind: str, namespace: str | None = None, **_) -> list[dict]:
        self.asked[kind] = time.monotonic()
        await asyncio.sleep(0.01)
        return [pod()]


def test_the_pass_read_the_control_plane_when_it_listed_the_pods_not_before_the_statefulset():
    """A pod the watch saw turn ready between the StatefulSet's GET and the pods' listing is in the
    listing: the moment recorded (which `Rechecks.is_news` compares with) is the listing's."""
    client = TimedReads()
    run = one_pass(TenantMemory(), client)
    state = asyncio.run(read_control_plane(run, "team-a"))
    assert state.ready, state.message
    read_at = run.outcome.control_plane_read_at
    assert read_at is not None and client.asked["StatefulSet"] < read_at <= client.asked["Pod"]
    assert run.outcome.control_plane_pods == {"team-a-0": (NEW,)}


def test_the_watch_reacts_to_readiness_deletion_and_revision_not_to_other_status_updates():
    ready = pod_signature("MODIFIED", pod())
    assert ready == pod_signature("MODIFIED", {**pod(), "spec": {"nodeName": "node-1"}})
    assert ready != pod_signature("MODIFIED", pod(ready=False))
    assert ready != pod_signature("MODIFIED", pod(deleting=True))
    assert ready != pod_signature("MODIFIED", pod(revision=OLD))
    assert pod_signature("DELETED", pod()) is None


def test_a_pod_on_its_way_to_ready_calls_nobody_up_until_it_is_ready():
    """The watch's memo starts at None: a pod created, scheduled and Running but not yet ready has
    the same signature all along, and only turning ready changes it (one pass, not one per step)."""
    pending = {**pod(ready=False), "status": {"phase": "Pending"}}
    assert pod_signature("ADDED", pending) is None
    assert pod_signature("MODIFIED", {**pending, "spec": {"nodeName": "node-1"}}) is None
    assert pod_signature("MODIFIED", pod(ready=False, waiting="ContainerCreating")) is None
    assert pod_signature("MODIFIED", pod(ready=False)) is None
    assert pod_signature("MODIFIED", pod()) is not None
    assert pod_signature("DELETED", pod(ready=False)) is None


def test_a_host_namespace_names_its_tenant():
    assert naming.tenant_of_namespace(naming.host_namespace("team-a", CONFIG), CONFIG) == "team-a"
    assert naming.tenant_of_namespace("kube-system", CONFIG) is None
    assert naming.tenant_of_namespace(CONFIG.namespace_prefix, CONFIG) is None


def test_a_tenant_forgotten_starts_over():
    rechecks = Rechecks(max_looks=1)
    rechecks.follow("team-a", 1.0)
    rechecks.judged("team-a", Outcome(control_plane_read_at=time.monotonic(), control_plane_pods={"team-a-0": (NEW,)}))
    rechecks.forget("team-a")
    assert rechecks.follow("team-a", 1.0) == 1.0 and rechecks.is_news("team-a", "team-a-0", (NEW,), 0.0)


def test_a_pass_reads_the_indexes_once_kopf_handed_them_over_and_asks_the_api_without_them():
    asked: list[str] = []

    async def listed() -> list[dict]:
        asked.append("LIST pods")
        return [pod(), pod()]

    async def read() -> dict | None:
        asked.append("GET queue")
        return {"metadata": {"name": "from-the-api"}}

    async def scenario() -> None:
        cache = WatchCache()
        assert await cache.pods_in("tenant-team-a", listed) == [pod(), pod()]
        assert await cache.queue("team-a", read) == {"metadata": {"name": "from-the-api"}}
        assert asked == ["LIST pods", "GET queue"]
        cache.hand_over({"memo": object()})
        assert cache.pods is None and cache.queues is None
        pods, queues = {"tenant-team-a": [pack(pod())]}, {"team-a": [pack({"metadata": {"name": "team-a"}})]}
        cache.hand_over({"host_pods": pods, "queues": queues})
        assert await cache.pods_in("tenant-team-a", listed) == [pod()]
        assert await cache.pods_in("tenant-team-b", listed) == []
        assert await cache.queue("team-a", read) == {"metadata": {"name": "team-a"}}
        assert await cache.queue("team-b", read) is None
        assert asked == ["LIST pods", "GET queue"]  # nothing more asked of the API
        cache.hand_over({"host_pods": {}, "queues": {}})
        assert cache.pods is pods and cache.queues is queues
    asyncio.run(scenario())


def test_a_pass_with_the_pod_index_sends_no_listing():
    client = TimedReads()
    run = one_pass(TenantMemory(), client)
    run.services.cache.hand_over({"host_pods": {run.host_namespace: [pack(pod())]}})
    state = asyncio.run(read_control_plane(run, "team-a"))
    assert state.ready and "Pod" not in client.asked
    assert run.outcome.control_plane_pods == {"team-a-0": (NEW,)}
