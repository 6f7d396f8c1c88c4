"""What ships: the wheel (and so the operator image, which installs it) holds the `gputenant`
package and its templates, never the test harness (`e2e/kubeplane`) or the benchmarks (`bench/`);
the Dockerfile copies neither."""

from __future__ import annotations

import zipfile
from pathlib import Path

from kubeplane.operator_image import build_wheel

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_ships_the_operator_package_and_nothing_of_the_harness(tmp_path):
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        top_level = {name.split("/")[0] for name in wheel.namelist()}
        names = set(wheel.namelist())
    assert top_level == {"gputenant", "gpu_tenant_operator-0.3.0.dist-info"}
    assert {"gputenant/cli.py", "gputenant/templates/namespace.yaml", "gputenant/py.typed"} <= names


def test_the_dockerfile_copies_no_test_code():
    copies = [line for line in (REPO_ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")]
    assert copies
    assert not [line for line in copies if "e2e" in line or "bench" in line]
