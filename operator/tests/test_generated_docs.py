"""The docs' generated tables (docs/generate.py, run by `make generate`): each checked-in table is
what its generator writes now, so a change to the code cannot pass CI with a stale doc."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def generator():
    spec = importlib.util.spec_from_file_location("generate_docs", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_doc_table_is_current():
    stale = [str(path.relative_to(DOCS.parent)) for path, text in generator().generated().items()
             if path.read_text() != text]
    assert not stale, f"{stale} stale: run `make generate`"


def test_the_guard_rule_table_is_one_of_them():
    assert ("admission-guard.md", "guard-rules") in generator().SECTIONS


def test_a_changed_table_is_put_back_and_the_text_around_it_kept():
    docs = generator()
    begin, end = docs.begin_marker("t", "f()"), docs.end_marker("t")
    text = f"intro\n\n{begin}\n| a |\n|---|\n| old |\n{end}\n\noutro\n"
    assert docs.rewritten(text, "t", "f()", "| a |\n|---|\n| new |\n") == (
        f"intro\n\n{begin}\n| a |\n|---|\n| new |\n{end}\n\noutro\n")


def test_a_doc_without_the_markers_is_an_error_not_a_silent_skip():
    docs = generator()
    with pytest.raises(ValueError, match="BEGIN GENERATED t"):
        docs.rewritten("| a |\n", "t", "f()", "| a |\n")
