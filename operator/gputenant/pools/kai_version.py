"""Whether the cluster's KAI-Scheduler is a version this operator supports, read from the Config
``kai-config`` that KAI's Helm chart writes (``kai.scheduler/v1``, cluster-scoped): one image tag per
component under ``spec.<component>.service.image.tag``.

The admission guard reserves the label and annotation keys of one KAI minor (``guard.kai_key_uses``,
generated from that version's source). A KAI of another minor may read keys the guard lets a tenant
set, so each pool reports ``KaiVersionUnsupported`` naming the component and its tag. A tag that is
no release ``vX.Y.Z`` (a digest, ``latest``, a source build's ``0.0.0``) and a KAI installed without its chart (no Config) cannot be
judged and give no problem; docs/install.md says so.
"""

from __future__ import annotations

import re

from gputenant.guard.kai_key_uses import KAI_VERSION

KAI_CONFIG = ("kai.scheduler/v1", "Config", "kai-config")
"""apiVersion, kind and name of the Config KAI's chart installs."""
_SEMVER = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?$")


def _minor(tag: str) -> tuple[int, int] | None:
    """A release tag's (major, minor); None for anything else, ``0.0.0`` included (the appVersion
    of KAI's chart built from source, which names no release)."""
    match = _SEMVER.match(tag)
    if not match or (match[1], match[2], match[3]) == ("0", "0", "0"):
        return None
    return int(match[1]), int(match[2])


SUPPORTED_MINOR = _minor(KAI_VERSION)


def component_tags(kai_config: dict) -> dict[str, str]:
    """Component -> image tag, for every component of the Config that names one."""
    tags = {}
    for component, settings in sorted(((kai_config or {}).get("spec") or {}).items()):
        image = ((settings or {}).get("service") or {}).get("image") if isinstance(settings, dict) else None
        tag = (image or {}).get("tag") if isinstance(image, dict) else None
        if isinstance(tag, str) and tag:
            tags[component] = tag
    return tags


def kai_version_problems(kai_config: dict | None) -> list[str]:
    """``KaiVersionUnsupported`` for each component whose tag is a version outside the supported minor."""
    if kai_config is None or SUPPORTED_MINOR is None:
        return []
    supported = f"v{SUPPORTED_MINOR[0]}.{SUPPORTED_MINOR[1]}.x"
    return [
        f"KaiVersionUnsupported: KAI-Scheduler's {component} runs {tag} (Config {KAI_CONFIG[2]}), outside the "
        f"supported {supported}: the admission guard reserves the label and annotation keys of KAI {KAI_VERSION} and "
        f"may let tenants set keys this version reads; run KAI {supported}, or an operator release that supports "
        f"{tag} (docs/install.md, Supported versions)"
        for component, tag in component_tags(kai_config).items()
        if (minor := _minor(tag)) is not None and minor != SUPPORTED_MINOR
    ]
