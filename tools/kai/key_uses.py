"""Every place KAI-Scheduler's source reads or writes a label or an annotation key, found in the pinned
module's Go source, written to operator/gputenant/guard/kai_key_uses.py (`make generate`).

The guard reserves KAI's keys on tenant pods (gputenant/guard/kai_vocabulary.py). That table was
written by reading KAI's source; this scan makes a key KAI starts reading at a new version show up
as a difference: operator/tests/test_kai_vocabulary.py regenerates the uses from the module and
fails on any change, and fails on any key or key expression the vocabulary does not account for.

What counts as a use (a scan of Go text, not a type check): an index into something named
`...Labels`/`...labels`/`...Annotations`/`...annotations` (a field, a variable or a `Get...()`
call) and `delete` from one; the keys of a `map[string]string{...}` literal given as `Labels:`,
`Annotations:`, `MatchLabels:`, `"labels":`/`"annotations":` (a patch) or to a variable named so, and
of `client.MatchingLabels{...}`, `labels.Set{...}`, `client.HasLabels{...}`; the key of
`labels.NewRequirement(key, ...)`; and `strings.HasPrefix(k, prefix)` where `k` ranges over labels
or annotations (a prefix KAI reads: `prefix` True). A key reached another way (a helper taking the
key as an argument from elsewhere) is not found.
Scanned: the module's `pkg/` without the KAI operator's own deployments (`pkg/operator/`), its
environment tests and test helpers.

Run: .venv/bin/python tools/kai/key_uses.py  (the module comes from the Go module cache, fetched
through the module proxy by `go mod download` when absent)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
OUTPUT = REPO_ROOT / "operator" / "gputenant" / "guard" / "kai_key_uses.py"
MODULE = "github.com/NVIDIA/KAI-scheduler"
SKIPPED_DIRECTORIES = ("pkg/operator/", "pkg/env-tests/")
TEST_HELPER = re.compile(r"(^|/)[^/]*(test[-_]?util|_fake|fake|mock)[^/]*(/|$)", re.IGNORECASE)

_STRING = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_IMPORT_LINE = re.compile(rf'^\s*(?:(\w+)\s+)?({_STRING})\s*$')
_CONST_BLOCK = re.compile(r"^(?:const|var)\s*\((.*?)^\)", re.MULTILINE | re.DOTALL)
_SINGLE_CONST = re.compile(r"^(?:const|var)\s+(\w+)(?:\s+\w+)?\s*=\s*(.+)$", re.MULTILINE)
_DECLARATION = re.compile(r"^\s*(\w+)(?:\s+[\w.]+)?\s*=\s*(.+?)\s*(?://.*)?$")
_INDEX = re.compile(r"(\w*)(Labels|labels|Annotations|annotations)(\(\))?\[([^\[\]\n]+)\]")
_LITERAL_MAP = re.compile(r"(?:\b(?:Match)?(Labels|Annotations):\s*map\[string\]string"
                          r"|\"(labels|annotations)\":\s*map\[string\](?:string|any|interface\{\})"
                          r"|\b\w*?(Labels|labels|Annotations|annotations)\s*:?=\s*map\[string\]string"
                          r"|\bMatching(Labels)|\blabels\.(Set))\{")
_DELETE = re.compile(r"\bdelete\(\s*[\w.()]*?(Labels|labels|Annotations|annotations)(?:\(\))?\s*,\s*([^()\n]+)\)")
_REQUIREMENT = re.compile(r"\blabels\.NewRequirement\(\s*([^,()\n]+),")
_RANGE = re.compile(r"\bfor\s+(\w+)(?:\s*,\s*\w+)?\s*:=\s*range\s+[\w.()]*?(Labels|labels|Annotations|annotations)(?:\(\))?\s*\{")
_HAS_PREFIX = re.compile(r"\bstrings\.HasPrefix\((\w+),\s*([^()\n]+)\)")
_HAS_LABELS = re.compile(r"\bHasLabels\{([^}]*)\}")
_KEY_OF_ELEMENT = re.compile(rf"^\s*((?:{_STRING})|[\w.]+)\s*:")


class KeyUse(NamedTuple):
    """One label or annotation key KAI's source uses: `key` is its value when it resolved to a
    string, else the Go expression as written (`resolved` False); `where` is `path:line`; `prefix`
    when KAI reads every key that starts with it."""

    kind: str
    key: str
    resolved: bool
    where: str
    prefix: bool = False


def go_files(module_dir: Path) -> list[Path]:
    files = []
    for path in sorted((module_dir / "pkg").rglob("*.go")):
        relative = path.relative_to(module_dir).as_posix()
        if relative.endswith("_test.go") or relative.startswith(SKIPPED_DIRECTORIES) or TEST_HELPER.search(relative):
            continue
        files.append(path)
    return files


def unquote(literal: str) -> str:
    return literal[1:-1] if literal.startswith("`") else json.loads(literal)


def imports(source: str) -> dict[str, str]:
    """alias -> import path, for the file's imports of this module (alias defaults to the last element)."""
    found: dict[str, str] = {}
    blocks = re.findall(r"^import\s*\((.*?)^\)", source, re.MULTILINE | re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines()]
    lines += re.findall(r"^import\s+(.+)$", source, re.MULTILINE)
    for line in lines:
        match = _IMPORT_LINE.match(line.split("//")[0])
        if match and unquote(match.group(2)).startswith(MODULE + "/"):
            path = unquote(match.group(2))
            found[match.group(1) or path.rsplit("/", 1)[-1]] = path[len(MODULE) + 1:]
    return found


def declarations(source: str) -> dict[str, str]:
    """Package-level `name = expression` of const and var declarations, as written."""
    found = {}
    for block in _CONST_BLOCK.findall(source):
        for line in block.splitlines():
            match = _DECLARATION.match(line)
            if match:
                found[match.group(1)] = match.group(2)
    for name, expression in _SINGLE_CONST.findall(source):
        found.setdefault(name, expression.split("//")[0].strip())
    return found


class Module:
    """The module's package-level string constants, resolved on demand (one package = one directory)."""

    def __init__(self, module_dir: Path):
        self.root = module_dir
        self.packages: dict[str, dict[str, str]] = {}
        for path in sorted(module_dir.rglob("*.go")):
            if not path.name.endswith("_test.go"):
                package = path.parent.relative_to(module_dir).as_posix()
                self.packages.setdefault(package, {}).update(declarations(path.read_text(errors="replace")))

    def resolve(self, expression: str, package: str, aliases: dict[str, str], depth: int = 0) -> str | None:
        """The string an expression of literals, constants and `+` evaluates to; None otherwise."""
        if depth > 8:
            return None
        parts = [part.strip() for part in re.split(rf"\+(?=(?:[^\"`]|{_STRING})*$)", expression)]
        values = []
        for part in parts:
            if re.fullmatch(_STRING, part):
                values.append(unquote(part))
                continue
            qualified = re.fullmatch(r"(\w+)\.(\w+)", part)
            if qualified and qualified.group(1) in aliases:
                target_package, name = aliases[qualified.group(1)], qualified.group(2)
            elif re.fullmatch(r"\w+", part):
                target_package, name = package, part
            else:
                return None
            written = self.packages.get(target_package, {}).get(name)
            if written is None:
                return None
            value = self.resolve(written, target_package, self.aliases_of(target_package), depth + 1)
            if value is None:
                return None
            values.append(value)
        return "".join(values)

    def aliases_of(self, package: str) -> dict[str, str]:
        aliases: dict[str, str] = {}
        for path in sorted((self.root / package).glob("*.go")):
            aliases.update(imports(path.read_text(errors="replace")))
        return aliases


def map_literal_keys(source: str, start: int) -> list[tuple[str, int]]:
    """The keys of the map literal whose `{` ends at `start`, with their offsets: its elements split
    at commas outside nested brackets and strings, each element's text before its `:`."""
    depth, end, in_string = 1, start, ""
    while depth and end < len(source):
        char = source[end]
        if in_string:
            in_string = "" if char == in_string and source[end - 1] != "\\" else in_string
        elif char in "\"`":
            in_string = char
        else:
            depth += {"{": 1, "}": -1, "(": 1, ")": -1, "[": 1, "]": -1}.get(char, 0)
        end += 1
    keys, element_start, depth, in_string = [], start, 0, ""
    for offset in range(start, end - 1):
        char = source[offset]
        if in_string:
            in_string = "" if char == in_string and source[offset - 1] != "\\" else in_string
        elif char in "\"`":
            in_string = char
        elif char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        elif char == "," and depth == 0:
            keys += _element_key(source, element_start, offset)
            element_start = offset + 1
    return keys + _element_key(source, element_start, end - 1)


def _element_key(source: str, start: int, end: int) -> list[tuple[str, int]]:
    element = source[start:end]
    stripped = re.sub(r"^(\s*//[^\n]*\n)+", lambda m: " " * len(m.group(0)), element)
    match = _KEY_OF_ELEMENT.match(stripped)
    return [(match.group(1), start + match.start(1))] if match else []


def uses_in(module: Module, path: Path) -> list[KeyUse]:
    source = path.read_text(errors="replace")
    relative = path.relative_to(module.root).as_posix()
    package = path.parent.relative_to(module.root).as_posix()
    aliases = imports(source)
    found: list[tuple[str, str, int]] = []
    for match in _INDEX.finditer(source):
        found.append((kind_of(match.group(2)), match.group(4).strip(), match.start(4)))
    for match in _LITERAL_MAP.finditer(source):
        kind = kind_of(next(group for group in match.groups() if group))
        found += [(kind, key, offset) for key, offset in map_literal_keys(source, match.end())]
    for match in _DELETE.finditer(source):
        found.append((kind_of(match.group(1)), match.group(2).strip(), match.start(2)))
    for match in _REQUIREMENT.finditer(source):
        found.append(("label", match.group(1).strip(), match.start(1)))
    prefixes = []
    ranged = {match.group(1): kind_of(match.group(2)) for match in _RANGE.finditer(source)}
    for match in _HAS_PREFIX.finditer(source):
        if match.group(1) in ranged:
            prefixes.append((ranged[match.group(1)], match.group(2).strip(), match.start(2)))
    for match in _HAS_LABELS.finditer(source):
        found += [("label", key.strip(), match.start(1)) for key in match.group(1).split(",") if key.strip()]
    uses = []
    for (kind, expression, offset), prefix in [*((use, False) for use in found), *((use, True) for use in prefixes)]:
        value = module.resolve(expression, package, aliases)
        line = source.count("\n", 0, offset) + 1
        uses.append(KeyUse(kind, value if value is not None else expression, value is not None, f"{relative}:{line}",
                           prefix))
    return uses


def kind_of(word: str) -> str:
    return "label" if word.lower().endswith("labels") else "annotation"


def scan(module_dir: Path) -> list[KeyUse]:
    module = Module(module_dir)
    return sorted({use for path in go_files(module_dir) for use in uses_in(module, path)})


def rendered(version: str, uses: list[KeyUse]) -> str:
    lines = [f'"""Generated by tools/kai/key_uses.py from KAI-Scheduler {version} (`make generate`); do not edit.', "",
             "Every label and annotation key KAI's source uses (see that script for what counts), with where.", '"""',
             "", f'KAI_VERSION = "{version}"', "",
             "KEY_USES: tuple[tuple[str, str, bool, str, bool], ...] = (",
             "    # (kind, key or the Go expression when it did not resolve, resolved, path:line, a prefix read)"]
    lines += [f"    {tuple(use)!r}," for use in uses]
    return "\n".join([*lines, ")", ""])


def pinned_version() -> str:
    [version] = re.findall(rf"^\s*{re.escape(MODULE)} (v\S+)", (HERE / "go.mod").read_text(), re.MULTILINE)
    return version


def module_source(version: str) -> Path:
    """The module at `version` in the Go module cache (fetched through the module proxy if absent)."""
    answer = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{version}"], cwd=HERE,
                            capture_output=True, text=True, check=True)
    return Path(json.loads(answer.stdout)["Dir"])


def main() -> int:
    version = pinned_version()
    OUTPUT.write_text(rendered(version, scan(module_source(version))))
    print(f"wrote {OUTPUT.relative_to(REPO_ROOT)} from {MODULE}@{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
