"""No test, fixture or bench builds a tool: `make tools` builds every binary before pytest starts.

A build inside the test session passes on a machine whose tools cache is warm and is killed by the
test timeout on a new one (a cold Argo CD build takes longer than pytest-timeout's 600 s), so a green
run on a warm machine hid it once. This reads the harness, the tests and the benches as Python
syntax: a string naming the build script or `make tools`, or an argv that runs `go build`,
`go install` or `go run`, outside a docstring, fails the test with its file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED = [REPO_ROOT / "e2e", REPO_ROOT / "bench", REPO_ROOT / "operator" / "tests"]
GO_BUILDING_VERBS = {"build", "install", "run"}
MAKE_BUILDING_TARGETS = {"tools", "tools-compat"}
COMMAND = re.compile(r"^\s*((bash|sh)\s+)?(\S*/)?build\.sh\b|build\.sh$|^\s*make\s+tools\b|^\s*go\s+(build|install|run)\b")
"""A string that is the build script's path, or a shell command starting with a build; a message
that tells a person to run `make tools` is neither."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the constants that are docstrings (they may name the build script freely)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _strings(node: ast.AST) -> list[str | None]:
    """The elements of a list or tuple literal: a string where it is one, else None."""
    if not isinstance(node, ast.List | ast.Tuple):
        return []
    return [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else None for e in node.elts]


def builds_in(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` would build a tool: 'file:line: what'."""
    tree = ast.parse(source, filename)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if COMMAND.search(node.value):
                found.append(f"{filename}:{node.lineno}: names the tool build ({node.value!r})")
        argv = _strings(node)
        for first, second in zip(argv, argv[1:], strict=False):
            if first in ("go", "make") and second in (GO_BUILDING_VERBS if first == "go" else MAKE_BUILDING_TARGETS):
                found.append(f"{filename}:{node.lineno}: runs `{first} {second}`")
    return found


def test_no_harness_test_or_bench_module_builds_a_tool():
    found = []
    for folder in SCANNED:
        for path in sorted(folder.rglob("*.py")):
            if path == Path(__file__).resolve():
                continue
            found += builds_in(path.read_text(), str(path.relative_to(REPO_ROOT)))
    assert not found, "build tools in `make tools` (tools/build.sh), not in a test session:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    # the fixture that timed out on a cold machine, as it was written
    'BUILD_SCRIPT = REPO_ROOT / "tools" / "build.sh"\n'
    'subprocess.run(["bash", str(BUILD_SCRIPT), "--argocd"], check=True)\n',
    'subprocess.run(["bash", "tools/build.sh"])\n',
    'subprocess.run(["go", "build", "-o", str(out), "./cmd"], cwd=module)\n',
    'subprocess.run(("go", "install", "sigs.k8s.io/kwok/cmd/kwok@v0.7.0"))\n',
    'subprocess.check_call(["make", "tools"])\n',
    'os.system("make tools")\n',
    'subprocess.run("bash tools/build.sh --argocd", shell=True)\n',
    'subprocess.run("go build ./cmd/kwok", shell=True)\n',
    # the opt-in older Kubernetes (`make tools-compat`) is built before pytest too
    'subprocess.run(["make", "tools-compat"], check=True)\n',
    'subprocess.run("bash tools/build.sh --compat", shell=True)\n',
])
def test_the_check_finds_a_build(source):
    assert builds_in(source)


@pytest.mark.parametrize("source", [
    '"""Built by tools/build.sh (`make tools`)."""\n',
    'raise ToolsMissing("tools missing. Run `make tools` (tools/build.sh) first")\n',
    'subprocess.run(["go", "mod", "download", "-json", module], check=True)\n',
    'subprocess.run(["go", "env", "GOMODCACHE"])\n',
])
def test_the_check_allows_docstrings_and_module_downloads(source):
    assert builds_in(source) == []
