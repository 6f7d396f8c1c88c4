"""Whether a HAMi pool's HAMi-core library reaches its shares, read from the guard's init containers
(pools/hami_library.py); pods as the API server reports them."""

from __future__ import annotations

from pathlib import Path

from gputenant.config.models import OperatorConfig
from gputenant.guard.hami_caps import INIT_CONTAINER
from gputenant.pools.hami_library import library_deliveries

EXAMPLE = OperatorConfig.load(Path(__file__).parents[2] / "examples" / "config.yaml")
HAMI_SELECTOR = EXAMPLE.pool("l4-hami").node_selector


def share(name: str, state: dict, selector: dict | None = None, last: dict | None = None) -> dict:
    status = {"name": INIT_CONTAINER, "state": state, **({"lastState": last} if last else {})}
    return {"metadata": {"name": name, "namespace": "tenant-a"},
            "spec": {"nodeSelector": selector if selector is not None else dict(HAMI_SELECTOR)},
            "status": {"initContainerStatuses": [status]}}


def delivery(pods):
    [result] = library_deliveries(EXAMPLE, pods)
    return result


def test_a_pool_whose_shares_got_the_library_has_no_problem():
    result = delivery([share("a", {"terminated": {"exitCode": 0, "reason": "Completed"}}),
                       share("b", {"terminated": {"exitCode": 0}})])
    assert (result.pool, result.delivered, result.failures, result.problem) == ("l4-hami", 2, [], None)


def test_an_image_that_cannot_be_pulled_is_a_named_problem():
    result = delivery([share("a", {"waiting": {"reason": "ImagePullBackOff",
                                               "message": 'Back-off pulling image "registry.example/hami:v0"'}})])
    assert result.failures == ['tenant-a/a: ImagePullBackOff: Back-off pulling image "registry.example/hami:v0"']
    assert result.problem.startswith("pool l4-hami: the HAMi-core library /k8s-vgpu/lib/nvidia/libvgpu.so.v2.6.1 in "
                                     "image docker.io/projecthami/hami:v2.6.1 does not reach 1 share(s)")


def test_a_library_missing_from_the_image_is_a_named_problem():
    message = "HAMi-core library /k8s-vgpu/lib/nvidia/libvgpu.so.v2.6.1 is not in this image"
    result = delivery([share("a", {"waiting": {"reason": "CrashLoopBackOff"}},
                             last={"terminated": {"exitCode": 1, "message": message}}),
                       share("b", {"terminated": {"exitCode": 1, "message": message}})])
    assert result.failures == [f"tenant-a/a: CrashLoopBackOff: {message}", f"tenant-a/b: exit 1: {message}"]
    assert result.problem is not None


def test_running_copies_other_pools_and_uncapped_pods_are_not_counted():
    running = share("a", {"running": {}})
    elsewhere = share("b", {"waiting": {"reason": "ErrImagePull"}}, selector={"gputenant.io/pool": "h100-mig"})
    uncapped = {"metadata": {"name": "c", "namespace": "t"}, "spec": {"nodeSelector": dict(HAMI_SELECTOR)},
                "status": {"initContainerStatuses": [{"name": "setup", "state": {"waiting": {"reason": "ErrImagePull"}}}]}}
    result = delivery([running, elsewhere, uncapped])
    assert (result.delivered, result.failures) == (0, [])


def test_only_hami_pools_are_judged():
    assert [d.pool for d in library_deliveries(EXAMPLE, [])] == [p.name for p in EXAMPLE.pools if p.mode.value == "HAMi"]


def test_the_pool_report_names_the_problem_below_its_table():
    from gputenant.pools.report import format_table, pool_reports

    pods = [share("a", {"waiting": {"reason": "ErrImagePull", "message": "not found"}})]
    reports = {r.name: r for r in pool_reports(EXAMPLE, [], [], pods)}
    assert reports["l4-hami"].problems and all(not r.problems for name, r in reports.items() if name != "l4-hami")
    assert format_table(list(reports.values())).splitlines()[-1].startswith(
        "problem: pool l4-hami: the HAMi-core library")
