"""The house rules hold for the whole tree: ruff-clean, ruff-formatted, type-checked."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    """The checker installed with the test extras. Missing is a failure, never a skip: a suite
    that skipped its style checks would pass CI without checking anything."""
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
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


PACKAGE = ROOT / "src" / "vaultmem"

# The rooms, in pipeline order. A room may import the kernel (the top-level modules) and the
# rooms listed for it; the kernel imports no room. The entry points (__main__, hook_entry)
# may import anything.
ROOMS_MAY_IMPORT: dict[str, set[str]] = {
    "kernel": set(),
    "store": set(),
    "embed": set(),
    "index": {"store", "embed"},
    "search": {"store", "index", "embed"},
    "agent": {"store", "index", "embed", "search"},
    "web": {"store", "index", "embed", "search", "agent"},
    "cli": {"store", "index", "embed", "search", "agent", "web"},
}
ENTRY_POINTS = {"vaultmem.__main__", "vaultmem.hook_entry"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _internal_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `path` imports anywhere (functions included), relative imports
    of any depth and absolute `vaultmem...` imports alike, except under `if TYPE_CHECKING:`,
    which never runs. `from . import x` counts as importing module x when x is a module."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "vaultmem")
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        elif node.module and node.module.split(".")[0] == "vaultmem":
            target = node.module
        else:
            continue
        found = False
        for alias in node.names:
            if f"{target}.{alias.name}" in modules:
                out.add(f"{target}.{alias.name}")
                found = True
        if not found or target not in out:
            out.add(target)
    # Importing a.b.c runs a/b/__init__ too, unless the importer is inside a.b (then that
    # package is already being imported: its __init__ importing its own modules is no cycle).
    mine = {".".join(me.split(".")[:i]) for i in range(1, me.count(".") + 2)}
    for name in list(out):
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(2, len(parts)))
    out -= mine
    return {m for m in out if m in modules}


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]
    return "kernel"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _internal_imports(path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in trail:
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in done:
                visit(nxt, [*trail, nxt])
        done.add(node)

    for start in sorted(graph):
        visit(start, [start])
    return cycles


def test_the_import_reader_sees_every_kind_of_import() -> None:
    """The checks below are only as good as this reader: relative imports of every depth,
    `from . import module`, absolute imports, and the packages an import runs."""
    graph = _graph()
    assert "vaultmem.store.db" in graph["vaultmem.index.ingest"]  # from ..store import db
    assert "vaultmem.store" in graph["vaultmem.index.ingest"]  # its __init__ runs too
    assert "vaultmem.errors" in graph["vaultmem.store.db"]  # from ..errors import ...
    assert "vaultmem.cli" in graph["vaultmem.__main__"]  # from .cli import cli (in a function)


def test_the_package_has_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_rooms_import_only_the_rooms_before_them() -> None:
    wrong = []
    for module, imports in _graph().items():
        if module in ENTRY_POINTS:
            continue
        room = _room(module)
        for target in imports:
            other = _room(target)
            if other not in (room, "kernel") and other not in ROOMS_MAY_IMPORT[room]:
                wrong.append(f"{module} ({room}) imports {target} ({other})")
    assert wrong == []


# A file path a comment, docstring or document names: a repository folder, then a file with a
# kind we keep. Strings in code are left alone: test corpora name made-up files on purpose.
_PATH_CLAIM = re.compile(
    r"(?<![\w./-])((?:src|tests|bench|docs|bin|git-hooks)/[\w./-]*\w\.(?:py|md|sql|toml|sh|yml))\b"
)
# The prose a file holds: all of a document; for Python, its comments and docstrings.
_DOC_SUFFIXES = {".md", ".toml", ".sql", ".yml"}


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of the comments and docstrings of a Python file, or every line of a
    document."""
    import ast
    import io
    import tokenize

    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                first = node.body[0].lineno
                out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
    return out


def missing_path_claims(files: list[Path], root: Path) -> list[str]:
    """`file:line: path` for every path named in `files`' prose that is not a file or folder
    under `root`."""
    out = []
    for path in files:
        for line, text in _prose(path):
            for named in _PATH_CLAIM.findall(text):
                if not (root / named).exists():
                    out.append(f"{path.relative_to(root)}:{line}: {named}")
    return out


def _tracked_prose_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if (name.endswith(".py") or Path(name).suffix in _DOC_SUFFIXES) and (ROOT / name).is_file()
    ]


def test_every_path_a_comment_or_document_names_exists() -> None:
    assert missing_path_claims(_tracked_prose_files(), ROOT) == []


def test_the_path_check_reports_a_made_up_path(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "real.py").write_text("")
    (tmp_path / "mod.py").write_text(
        '"""Measured with bench/real.py and bench/made_up.py."""\n'
        "# see src/vaultmem/nowhere.py\n"
        'SAMPLE = "tests/test_auth.py"  # a string in code is data, not a claim\n'
    )
    (tmp_path / "notes.md").write_text("Run `bench/gone.py`; `bench/real.py` is fine.\n")
    found = missing_path_claims([tmp_path / "mod.py", tmp_path / "notes.md"], tmp_path)
    assert sorted(found) == [
        "mod.py:1: bench/made_up.py",
        "mod.py:2: src/vaultmem/nowhere.py",
        "notes.md:1: bench/gone.py",
    ]


# Modules that read a setting from the environment themselves instead of through config (named,
# with the reason, in config's docstring).
SETTINGS_READ_OUTSIDE_CONFIG = {
    "vaultmem.vaults",
    "vaultmem.agent.claude_hook",
    "vaultmem.agent.warm_client",
}


def _reads_a_setting(text: str) -> bool:
    """Whether module source `text` reads the process environment (`os.environ`, `getenv`) and
    looks a setting up in a mapping: `.get(NAME)` or `[NAME]` with a SETTINGS name, or with a
    constant holding one. A mapping a caller passes in (tests do) is not the environment."""
    from vaultmem.config import SETTINGS

    if "os.environ" not in text and "getenv(" not in text:
        return False
    names = "|".join(re.escape(name) for name in SETTINGS)
    constants = re.findall(rf'^(\w+) = "(?:{names})"$', text, re.M)
    keys = [rf'"(?:{names})"', *(rf"{re.escape(c)}\b" for c in constants)]
    return any(re.search(rf"(?:\.get\(|getenv\(|\[)\s*{key}", text) for key in keys)


def test_settings_are_read_in_config_or_in_the_modules_it_names() -> None:
    import vaultmem.config

    readers = {
        name
        for name, path in _modules().items()
        if name != "vaultmem.config" and _reads_a_setting(path.read_text(encoding="utf-8"))
    }
    assert readers == SETTINGS_READ_OUTSIDE_CONFIG
    doc = vaultmem.config.__doc__ or ""
    for name in SETTINGS_READ_OUTSIDE_CONFIG:
        assert f"`{name.removeprefix('vaultmem.')}`" in doc, name
