"""The real vCluster chart for a clone with or without ../shared (kubeplane.vcluster_chart): both
sources give the chart whose content digest the repository keeps, and anything else is refused."""

from __future__ import annotations

import pytest

from kubeplane import vcluster_chart
from kubeplane.vcluster_chart import CHART_DIGEST, ChartUnavailable, check, content_digest


@pytest.fixture(scope="module")
def module_dir():
    try:
        return vcluster_chart.module_dir()
    except ChartUnavailable as error:
        pytest.fail(f"{error} (`make tools` downloads the module)")


def test_without_shared_the_chart_is_made_from_the_go_module_with_the_pinned_digest(module_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(vcluster_chart, "SHARED_CHART", tmp_path / "no-shared" / "chart")
    monkeypatch.setattr(vcluster_chart, "CACHED_CHART", tmp_path / "cache" / "vcluster")
    made = vcluster_chart.prepare()
    assert made == tmp_path / "cache" / "vcluster"
    assert content_digest(made) == CHART_DIGEST
    assert "version: 0.36.1\nappVersion: 0.36.1\n" in (made / "Chart.yaml").read_text()
    assert not (made / "tests").exists() and (made / "LICENSE").is_file()
    assert vcluster_chart.prepare() == made, "made once, then found"


@pytest.mark.skipif(not (vcluster_chart.SHARED_CHART / "Chart.yaml").is_file(), reason="no ../shared next to this clone")
def test_the_shared_copy_is_the_same_chart():
    assert content_digest(vcluster_chart.SHARED_CHART) == CHART_DIGEST
    assert vcluster_chart.chart_dir() == vcluster_chart.SHARED_CHART


def test_a_changed_chart_is_refused(module_dir, tmp_path):
    vcluster_chart.stamp(module_dir, tmp_path / "chart")
    (tmp_path / "chart" / "templates" / "statefulset.yaml").write_text("# changed\n")
    with pytest.raises(ChartUnavailable, match="not the pinned"):
        check(tmp_path / "chart")
