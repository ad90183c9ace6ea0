"""The house rules hold for the whole tree: ruff-clean, ruff-formatted, type-checked."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


@pytest.mark.parametrize(
    "args",
    [
        ["ruff", "check", "src", "tests", "bench"],
        ["ruff", "format", "--check", "src", "tests", "bench"],
    ],
    ids=["ruff-check", "ruff-format"],
)
def test_code_is_ruff_clean(args: list[str]) -> None:
    result = subprocess.run([tool(args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_library_type_checks() -> None:
    result = subprocess.run([tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _internal_imports(path: Path) -> set[str]:
    """Modules of the package that `path` imports anywhere (functions included), except under
    `if TYPE_CHECKING:`, which never runs."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        if node.module:
            out.add(node.module.split(".")[0])
        else:
            out.update(a.name for a in node.names)
    return out


def test_the_package_has_no_import_cycles() -> None:
    package = ROOT / "src" / "vaultmem"
    graph = {p.stem: _internal_imports(p) for p in package.glob("*.py")}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in trail:
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, [*trail, nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(graph):
        visit(start, [start])
    assert cycles == [], cycles
