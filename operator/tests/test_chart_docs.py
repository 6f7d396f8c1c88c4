"""The documentation's index and cross-references: docs/README.md lists every page, its links
and the links of the pages this work owns resolve, and every code path architecture.md names
exists (so the walk through the code cannot silently go stale)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def pages() -> set[str]:
    return {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")} - {"README.md"}


def test_index_lists_every_page():
    linked = set(LINK.findall((DOCS / "README.md").read_text()))
    missing = pages() - linked
    assert not missing, f"add {sorted(missing)} to docs/README.md"


@pytest.mark.parametrize("page", ["README.md", "install.md", "argocd.md", "architecture.md"])
def test_links_resolve(page):
    source = DOCS / page
    for target in LINK.findall(source.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        assert (source.parent / target).resolve().exists(), f"docs/{page} links to missing {target}"


def test_architecture_names_only_paths_that_exist():
    text = (DOCS / "architecture.md").read_text()
    package = REPO_ROOT / "operator" / "gputenant"
    named = set(re.findall(r"`([a-z_]+/(?:[a-z_]+\.(?:py|lua))?)`", text))
    named |= set(re.findall(r"`([a-z_]+\.py)`", text))
    assert len(named) > 20
    for path in sorted(named):
        candidates = [package / path, REPO_ROOT / path]
        assert any(c.exists() for c in candidates), f"docs/architecture.md names {path}, which does not exist"
