"""The Dockerfile cannot be built here (no container engine), so its agreements with the rest of the
repository are checked as text: it runs the chart's command, as the chart's user, with the helm
version the tests use, and copies only what exists and what .dockerignore lets through."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
DEPLOYMENT = (REPO_ROOT / "charts" / "gpu-tenant-operator" / "templates" / "deployment.yaml").read_text()


def instruction(name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in DOCKERFILE.splitlines() if line.startswith(f"{name} ")]


def test_entrypoint_is_gputenant_run_with_the_charts_config_path():
    assert json.loads(instruction("ENTRYPOINT")[-1]) == ["gputenant"]
    assert json.loads(instruction("CMD")[-1])[:3] == ["run", "--config", "/etc/gputenant/config.yaml"]
    assert "mountPath: /etc/gputenant/config.yaml" in DEPLOYMENT


def test_runs_as_the_non_root_user_the_chart_declares():
    user = instruction("USER")[-1]
    uid = re.search(r"runAsUser: (\d+)", DEPLOYMENT).group(1)
    assert user.split(":")[0] == uid != "0"


def test_helm_is_the_version_the_tests_pin():
    pinned = re.search(r"^HELM_VERSION=(\S+)$", (REPO_ROOT / "tools" / "versions.env").read_text(), re.M).group(1)
    assert f"ARG HELM_VERSION={pinned}" in DOCKERFILE


def test_copied_sources_exist_and_pass_dockerignore():
    allowed = [line[1:].rstrip("/") for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    sources = [args.split()[0] for args in instruction("COPY") if not args.startswith("--from")]
    assert sources
    for source in sources:
        path = source.rstrip("/")
        assert (REPO_ROOT / path).exists(), f"COPY {source}: no such path"
        assert any(path == a or a.startswith(f"{path}/") or path.startswith(f"{a}/") or fnmatch.fnmatch(path, a)
                   for a in allowed), f"COPY {source} is excluded by .dockerignore"
    package_dirs = re.findall(r'^"?([\w.]+)"? = "([\w/]+)"$', (REPO_ROOT / "pyproject.toml").read_text(), re.M)
    assert package_dirs
    for _, directory in package_dirs:
        assert any(directory == a or directory.startswith(f"{a}/") or a.startswith(f"{directory}/")
                   for a in allowed), f"pyproject package dir {directory} is not in the image's build context"
