"""Pure version and values bookkeeping for the vCluster release."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from gputenant.helm.errors import InvalidValuesError, UpgradePathError

_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def parse_version(version: str) -> tuple[int, int, int, tuple]:
    """A sortable key for a chart version such as ``0.36.1``, ``v0.36.1`` or ``0.37.0-rc.1``.

    Pre-releases sort before their release, as in SemVer.
    """
    match = _SEMVER.match(version.strip())
    if not match:
        raise ValueError(
            f"chart version {version!r} is not a SemVer version; set spec.vcluster.chartVersion "
            "(or the operator's vcluster.version) to a value such as 0.36.1"
        )
    major, minor, patch, prerelease = match.groups()
    if prerelease is None:
        pre_key: tuple = ((1,),)
    else:
        pre_key = ((0,), *(((0, int(part)) if part.isdigit() else (1, part)) for part in prerelease.split(".")))
    return int(major), int(minor), int(patch), pre_key


def check_upgrade_path(installed: str | None, wanted: str) -> None:
    """Raise UpgradePathError unless going from ``installed`` to ``wanted`` is one vCluster supports.

    A fresh install (``installed`` None) and patch upgrades are fine; a minor upgrade may move one
    minor (0.35 -> 0.36); skipping a minor (0.34 -> 0.36), any downgrade and a major change are
    refused, because vCluster migrates its data one minor at a time and cannot migrate back.
    """
    wanted_key = parse_version(wanted)
    if installed is None:
        return
    installed_key = parse_version(installed)
    if wanted_key == installed_key:
        return
    fix = "set spec.vcluster.chartVersion to the installed version or the next minor"
    if wanted_key < installed_key:
        raise UpgradePathError(
            f"refusing to downgrade the vCluster chart from {installed} to {wanted}: vCluster cannot "
            f"migrate its data back; {fix}", installed=installed, wanted=wanted)
    (installed_major, installed_minor), (wanted_major, wanted_minor) = installed_key[:2], wanted_key[:2]
    if wanted_major != installed_major:
        raise UpgradePathError(
            f"refusing to change the vCluster chart's major version from {installed} to {wanted}; {fix}",
            installed=installed, wanted=wanted)
    if wanted_minor > installed_minor + 1:
        next_minor = f"{installed_major}.{installed_minor + 1}"
        raise UpgradePathError(
            f"refusing to upgrade the vCluster chart from {installed} to {wanted}: vCluster upgrades one "
            f"minor version at a time, so upgrade to {next_minor}.x first; {fix}",
            installed=installed, wanted=wanted)


def values_hash(values: Mapping[str, Any], version: str) -> str:
    """A stable digest of the values and chart version; equal digests mean Helm has nothing to do.

    The caller keeps it in GpuTenant ``status.vcluster.valuesHash``. Key order does not matter.
    """
    try:
        canonical = json.dumps({"chartVersion": version, "values": values}, sort_keys=True,
                               separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidValuesError(f"vCluster values cannot be sent to Helm as JSON: {error}") from None
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
