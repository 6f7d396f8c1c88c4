"""The docs' generated tables (docs/generate.py, run by `make generate`): each checked-in table is
what its generator writes now, so a change to the code cannot pass CI with a stale doc; every
reason of api/conditions.py is explained in operations.md, and no reason is named elsewhere."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import gputenant

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


def test_every_reason_of_the_conditions_module_is_explained_in_operations():
    docs = generator()
    operations = docs.generated()[DOCS / "operations.md"]
    unexplained = [line for line in operations.splitlines() if docs.NOT_EXPLAINED in line]
    assert not unexplained, f"explain these reasons in docs/operations.md (a table row or `Reason`): {unexplained}"
    assert len(docs.reasons_by_section()) > 60


def test_a_reason_is_explained_only_by_a_row_backticks_or_bold_outside_generated_text():
    docs = generator()
    document = ("## Plain\n\nApplied in prose is no explanation.\n\n## Table\n\n| X | Applied | True |\n\n"
                "## Generated\n\n<!-- BEGIN GENERATED r: s -->\n`Hidden`\n<!-- END GENERATED r -->\n")
    assert docs.explained_under("Applied", document) == "Table"
    assert docs.explained_under("Hidden", document) is None
    assert docs.heading_anchor("Conditions and reasons") == "conditions-and-reasons"


def test_no_reason_is_named_outside_the_conditions_module():
    """A CamelCase `reason` given as a literal (a keyword argument or a class attribute) outside
    api/ is a reason the generated table cannot list; api/ holds the CRD's own field-error reasons."""
    package = Path(gputenant.__file__).parent
    literal = []
    for path in package.rglob("*.py"):
        if "api" in path.relative_to(package).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = ([(k.arg, k.value) for k in node.keywords] if isinstance(node, ast.Call) else
                     [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
                     if isinstance(node, ast.Assign) else [])
            literal += [f"{path.relative_to(package)}:{value.lineno}" for name, value in named
                        if name == "reason" and isinstance(value, ast.Constant) and isinstance(value.value, str)]
    assert literal == []
