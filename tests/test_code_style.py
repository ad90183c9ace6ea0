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
