"""bin/agent-with-memory: exact pass-through, memory in the system prompt, per-session hook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_query import NOTES, add_note

from vaultmem import db
from vaultmem.embed import HashEmbedder

REPO = Path(__file__).resolve().parent.parent
WRAPPER = REPO / "bin" / "agent-with-memory"

FAKE_CLAUDE = """#!{python}
import json, os, sys
with open(os.environ["CLAUDE_ARGV_FILE"], "w", encoding="utf-8") as fh:
    json.dump(sys.argv[1:], fh)
"""


@pytest.fixture
def fake_claude(tmp_path: Path) -> tuple[Path, Path]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    claude = bindir / "claude"
    claude.write_text(FAKE_CLAUDE.format(python=sys.executable), encoding="utf-8")
    claude.chmod(0o755)
    return bindir, tmp_path / "argv.json"


@pytest.fixture
def memory_file(tmp_path: Path) -> Path:
    path = tmp_path / "MEMORY.md"
    path.write_text("- Prefer uv over pip.\n- Answer tersely.\n", encoding="utf-8")
    return path


def run_wrapper(
    args: list[str], env: dict[str, str], cwd: Path, argv_file: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str] | None]:
    proc = subprocess.run(
        [str(WRAPPER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    argv = None
    if argv_file is not None and argv_file.exists():
        argv = json.loads(argv_file.read_text(encoding="utf-8"))
    return proc, argv


def base_env(bindir: Path | None, argv_file: Path, memory: Path, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = (f"{bindir}{os.pathsep}" if bindir else "") + "/usr/bin:/bin"
    env["CLAUDE_ARGV_FILE"] = str(argv_file)
    env["VAULTMEM_MEMORY_FILE"] = str(memory)
    env["HOME"] = str(home)
    return env


@pytest.fixture
def indexed_vault(conn, vault):
    vault.write("README.md", "vault\n")
    vault.commit()
    v = db.register_vault(conn, vault.root)
    embedder = HashEmbedder(64)
    for path, note in NOTES.items():
        add_note(conn, v.id, path, embedder=embedder, **note)
    db.ensure_vector_index(conn, embedder.model_id, embedder.dimension)
    conn.commit()
    return vault


TRICKY = [
    "--model",
    "opus",
    'how do I restore a "postgres" backup? it\'s urgent',
    "--",
    "--not-a-flag-for-us",
    "two  spaces",
    "",
    "$HOME `id` *",
    "line\nbreak",
    "ünïcødé 中文",
]


def test_arguments_pass_through_exactly_with_memory_and_hook(
    fake_claude, memory_file, indexed_vault, tmp_path
):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    env["VAULTMEM_VAULT"] = str(indexed_vault.root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc, argv = run_wrapper(TRICKY, env, elsewhere, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None
    assert argv[0] == "--append-system-prompt"
    system = argv[1]
    assert argv[2] == "--settings"
    assert argv[4:] == TRICKY
    # Layer B first, then Layer A for the initial prompt.
    assert system.index("<user_preferences") < system.index("<retrieved_context>")
    assert "Prefer uv over pip." in system
    assert 'path="ops/postgres-backup.md"' in system
    settings = json.loads(argv[3])
    [group] = settings["hooks"]["UserPromptSubmit"]
    [hook] = group["hooks"]
    assert hook["type"] == "command"
    assert "vaultmem" in hook["command"] and "claude-hook" in hook["command"]
    assert "--no-memory" in hook["command"]
    assert set(settings) == {"hooks"}


def test_without_initial_prompt_only_preferences_are_added(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    proc, argv = run_wrapper(["--model", "sonnet", "-c"], env, tmp_path, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None
    assert argv[0] == "--append-system-prompt"
    assert "Prefer uv over pip." in argv[1] and "<retrieved_context>" not in argv[1]
    assert argv[2] == "--settings"
    assert argv[4:] == ["--model", "sonnet", "-c"]


def test_database_down_still_launches_claude(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    env["VAULTMEM_DATABASE_URL"] = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    env["VAULTMEM_VAULT"] = str(tmp_path)
    proc, argv = run_wrapper(["-p", "what is in my notes about backups"], env, tmp_path, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None and argv[-2:] == ["-p", "what is in my notes about backups"]
    assert "--settings" in argv


def test_subcommands_pass_through_untouched(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    proc, argv = run_wrapper(["mcp", "list"], env, tmp_path, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert argv == ["mcp", "list"]


def test_missing_claude_is_a_clear_message_and_127(memory_file, tmp_path):
    env = base_env(None, tmp_path / "argv.json", memory_file, tmp_path)
    env.pop("CLAUDE_BIN", None)
    proc, _ = run_wrapper(["hello"], env, tmp_path)
    assert proc.returncode == 127
    assert proc.stdout == ""
    [line] = proc.stderr.strip().splitlines()
    assert "claude" in line and "not installed" in line


def test_help_describes_the_wrapper_without_running_claude(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    proc, argv = run_wrapper(["--help"], env, tmp_path, argv_file)
    assert proc.returncode == 0
    assert "agent-with-memory" in proc.stdout and "Initial prompt rule" in proc.stdout
    assert argv is None


def test_works_through_a_symlink_from_another_directory(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    link = bindir / "agent-with-memory"
    link.symlink_to(WRAPPER)
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    proc = subprocess.run(
        ["agent-with-memory", "-c"], env=env, cwd="/", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(argv_file.read_text(encoding="utf-8"))
    assert (
        str(REPO / ".venv" / "bin" / "vaultmem")
        in json.loads(argv[3])["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    )
