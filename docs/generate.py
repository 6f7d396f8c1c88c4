"""Rewrite the generated tables inside the docs: each lies between a BEGIN and an END marker that
name its source, so the text around it stays hand-written and the table cannot drift from the code.

`make generate` runs this; operator/tests/test_generated_docs.py fails when a table is stale.

Run: .venv/bin/python docs/generate.py
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent


def guard_rule_table() -> str:
    from gputenant.guard.rules import rule_table

    return rule_table()


NOT_EXPLAINED = "**not explained**"
TYPES_SECTION = "condition types"


def reasons_by_section() -> list[tuple[str, str]]:
    """(reason, the section comment of api/conditions.py it is listed under), in file order; the
    condition types themselves are left out."""
    import ast

    from gputenant.api import conditions

    source = Path(conditions.__file__).read_text()
    lines, found, section = source.splitlines(), [], ""
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant):
            section = next((line.strip("# -") for line in reversed(lines[:node.lineno - 1])
                            if line.startswith("# --")), "")
            if isinstance(node.value.value, str) and not section.startswith(TYPES_SECTION):
                found.append((node.value.value, section))
    return found


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def explained_under(reason: str, document: str) -> str | None:
    """The first heading of `document` whose hand-written text names `reason` as a table cell,
    in backticks or in bold; None if none does."""
    hand_written = re.sub(r"<!-- BEGIN GENERATED .*?<!-- END GENERATED [\w-]+ -->", "", document, flags=re.DOTALL)
    mention = re.compile(rf"(\|\s*{reason}\s*\||`{reason}`|\*\*{reason}\*\*)")
    for section in re.split(r"^(?=#{2,3} )", hand_written, flags=re.MULTILINE):
        heading = section.splitlines()[0].lstrip("#").strip() if section.startswith("#") else ""
        if heading and mention.search(section):
            return heading
    return None


def reason_table() -> str:
    """Every reason of api/conditions.py, where it is set, and the section of operations.md that
    explains it."""
    document = (DOCS / "operations.md").read_text()
    rows = ["| Reason | Kind (its section of api/conditions.py) | Explained under |", "|---|---|---|"]
    for reason, section in reasons_by_section():
        heading = explained_under(reason, document)
        where = f"[{heading}](#{heading_anchor(heading)})" if heading else NOT_EXPLAINED
        rows.append(f"| `{reason}` | {section} | {where} |")
    return "\n".join(rows)


def mechanism_table() -> str:
    """One row per registered sharing mechanism, weakest first: its unit, what it isolates, its spec
    block, and the trust levels that may use it."""
    from gputenant.api.trust import PROFILES, allowed_modes
    from gputenant.sharing.registry import MECHANISMS

    rows = ["| Mechanism | Grants in | Isolates | `spec.sharing` block | Trust levels that may use it | Module |",
            "|---|---|---|---|---|---|"]
    for mode, mechanism in MECHANISMS.items():
        block = f"`{mechanism.spec_block[0]}`" if mechanism.spec_block else "none"
        trusts = ", ".join(trust.value for trust in PROFILES if mode in allowed_modes(trust))
        module = f"`sharing/{type(mechanism).__module__.rsplit('.', 1)[-1]}.py`"
        rows.append(f"| {mode.value} | {mechanism.unit} | {mechanism.isolation} | {block} | {trusts} | {module} |")
    return "\n".join(rows)


def kai_key_table() -> str:
    from gputenant.guard.kai_vocabulary import markdown_table

    return markdown_table()


SECTIONS: dict[tuple[str, str], tuple[str, Callable[[], str]]] = {
    ("admission-guard.md", "guard-rules"): ("gputenant.guard.rules.rule_table()", guard_rule_table),
    ("operations.md", "condition-reasons"): ("the reasons of gputenant/api/conditions.py", reason_table),
    ("trust-levels.md", "sharing-mechanisms"): ("gputenant.sharing.registry.MECHANISMS", mechanism_table),
    ("threat-model.md", "kai-keys"): ("gputenant.guard.kai_vocabulary.VOCABULARY", kai_key_table),
}
"""(doc file under docs/, section name) -> (where the table comes from, in words; its generator)."""


def begin_marker(name: str, source: str) -> str:
    return f"<!-- BEGIN GENERATED {name}: `make generate` writes it from {source}; edit that, not this -->"


def end_marker(name: str) -> str:
    return f"<!-- END GENERATED {name} -->"


def rewritten(text: str, name: str, source: str, table: str) -> str:
    """`text` with the section `name` replaced by `table`; ValueError when its markers are missing."""
    pattern = re.compile(rf"^<!-- BEGIN GENERATED {re.escape(name)}:.*?^{re.escape(end_marker(name))}$",
                         re.MULTILINE | re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no {begin_marker(name, source)!r} ... {end_marker(name)!r} in the file")
    block = f"{begin_marker(name, source)}\n{table.rstrip()}\n{end_marker(name)}"
    return pattern.sub(lambda _: block, text, count=1)


def generated() -> dict[Path, str]:
    """Every doc file with generated sections, as `make generate` would write it."""
    files: dict[Path, str] = {}
    for (file, name), (source, table) in SECTIONS.items():
        path = DOCS / file
        files[path] = rewritten(files.get(path) or path.read_text(), name, source, table())
    return files


def main() -> int:
    for path, text in generated().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"rewrote {path.relative_to(DOCS.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
