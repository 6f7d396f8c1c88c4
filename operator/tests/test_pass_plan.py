"""A pass is built whole before its steps run: the plan (tenant as run, decision, rendered objects)
is made once from the body and set once; a spec that fails has no plan and nothing reads one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gputenant.api import conditions as reasons
from gputenant.api.status import WakeStatus
from gputenant.reconcile.context import Pass, Services
from gputenant.reconcile.memory import TenantMemory
from gputenant.reconcile.pipeline import Reconciler
from gputenant.reconcile.ports import StepError
from gputenant.reconcile.view import ready_for_view
from gputenant.reconcile.wake import run_as
from kubeplane.builders import operator_config, sharing_pools, tenant

CONFIG = operator_config(*sharing_pools())
NOW = datetime(2026, 11, 28, tzinfo=UTC)


def a_pass(body: dict) -> tuple[Reconciler, Pass]:
    reconciler = Reconciler(client=None, config=CONFIG, releases=None, issuer=None)  # type: ignore[arg-type]
    services = Services(client=None, config=CONFIG, releases=None, issuer=None, memory=TenantMemory())  # type: ignore[arg-type]
    body = {**body, "metadata": {**body["metadata"], "uid": "uid-1", "generation": 1}}
    return reconciler, Pass(services, body, NOW)


def test_a_pass_reads_no_plan_before_it_has_one_and_takes_one_only_once():
    reconciler, run = a_pass(tenant("team-a"))
    assert not run.planned and not ready_for_view(run)
    with pytest.raises(RuntimeError, match="no plan"):
        _ = run.plan.decision
    plan = reconciler.plan(run)
    run.follow(plan)
    assert run.planned and run.plan is plan
    with pytest.raises(RuntimeError, match="already has a plan"):
        run.follow(plan)


def test_the_plan_holds_every_rendered_object_owned_by_the_tenant():
    reconciler, run = a_pass(tenant("team-a"))
    plan = reconciler.plan(run)
    assert plan.tenant.name == "team-a" and plan.decision.possible
    kinds = {obj["kind"] for objects in plan.rendered.values() for obj in objects}
    assert {"Namespace", "ResourceQuota", "NetworkPolicy", "Queue"} <= kinds
    for objects in plan.rendered.values():
        for obj in objects:
            if obj["kind"] != "Namespace":
                assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-1", obj["kind"]


def test_a_spec_the_api_refuses_has_no_plan_and_says_which_field():
    body = tenant("team-a")
    body["spec"]["gpu"]["quota"] = -1
    reconciler, run = a_pass(body)
    with pytest.raises(StepError) as refused:
        reconciler.plan(run)
    assert refused.value.reason == reasons.INVALID_SPEC and "spec.gpu.quota" in refused.value.message
    assert not run.planned


def test_a_wake_request_runs_a_sleeping_tenant_awake_without_touching_its_spec():
    body = tenant("team-a")
    body["spec"]["sleep"] = {"asleep": True}
    reconciler, run = a_pass(body)
    as_run, woken = run_as(run, reconciler.plan(run).tenant, "please")
    assert woken and not as_run.spec.sleep.asleep
    assert run.status.wake == WakeStatus(request="please", woken_at="2026-11-28T00:00:00Z",
                                         until="2026-11-28T08:00:00Z")
    assert run.body["spec"]["sleep"]["asleep"] is True
    plan = reconciler.plan(run, "please")
    assert plan.woken_on_request and not plan.tenant.spec.sleep.asleep
