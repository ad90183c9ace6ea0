"""bin/agent-with-memory: exact pass-through, preferences in the system prompt, notes once from
the per-session hook, from any directory.

The stand-in `claude` does what Claude Code does with the wrapper's flags (CLI and hooks
reference): it records its arguments, merges `--settings` JSON with the user's and the
project's settings files, and for the submitted prompt runs every UserPromptSubmit command hook
with the hook JSON on stdin, keeping what each printed (Claude Code adds that to the context).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WRAPPER = REPO / "bin" / "agent-with-memory"

FAKE_CLAUDE = """#!{python}
import json, os, subprocess, sys
argv = sys.argv[1:]
layers, system = [], None
for path in (os.path.join(os.environ["HOME"], ".claude", "settings.json"),
             os.path.join(os.getcwd(), ".claude", "settings.json"),
             os.path.join(os.getcwd(), ".claude", "settings.local.json")):
    if os.path.isfile(path):
        layers.append(json.load(open(path, encoding="utf-8")))
for i, arg in enumerate(argv[:-1]):
    if arg == "--settings":
        layers.append(json.loads(argv[i + 1]))
    elif arg == "--append-system-prompt":
        system = argv[i + 1]
prompt = os.environ.get("FAKE_CLAUDE_PROMPT")
outputs = []
if prompt is not None:
    payload = json.dumps({{"session_id": "s-1", "transcript_path": "/tmp/t.jsonl",
                          "cwd": os.getcwd(), "permission_mode": "default",
                          "hook_event_name": "UserPromptSubmit", "prompt": prompt}})
    procs = []
    for layer in layers:
        for group in layer.get("hooks", {{}}).get("UserPromptSubmit", []):
            for hook in group.get("hooks", []):
                procs.append(subprocess.Popen(["sh", "-c", hook["command"]],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for p in procs:  # Claude Code runs the matching hooks in parallel
        p.stdin.write(payload.encode()); p.stdin.close()
    for p in procs:
        out = p.stdout.read().decode()
        if p.wait() == 0 and out.strip():
            outputs.append(out)
with open(os.environ["CLAUDE_ARGV_FILE"], "w", encoding="utf-8") as fh:
    json.dump({{"argv": argv, "system": system, "hook_outputs": outputs}}, fh)
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
    proc, record = run_wrapper_full(args, env, cwd, argv_file)
    return proc, record["argv"] if record is not None else None


def run_wrapper_full(
    args: list[str], env: dict[str, str], cwd: Path, argv_file: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    proc = subprocess.run(
        [str(WRAPPER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )
    record = None
    if argv_file is not None and argv_file.exists():
        record = json.loads(argv_file.read_text(encoding="utf-8"))
    return proc, record


def base_env(bindir: Path | None, argv_file: Path, memory: Path, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = (f"{bindir}{os.pathsep}" if bindir else "") + "/usr/bin:/bin"
    env["CLAUDE_ARGV_FILE"] = str(argv_file)
    env["VAULTMEM_MEMORY_FILE"] = str(memory)
    env["HOME"] = str(home)
    # The vaultmem under test (the suite's venv: .ci/run's own, or the developer's .venv).
    env["VAULTMEM_BIN"] = str(Path(sys.executable).parent / "vaultmem")
    return env


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


def test_arguments_pass_through_exactly_with_preferences_and_hook(
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
    assert argv[2] == "--mcp-config" and argv[4] == "--settings"
    assert argv[6:] == TRICKY
    # Only Layer B is at system-prompt trust; notes come from the hook on the user's turn.
    assert "<user_preferences" in system and "Prefer uv over pip." in system
    assert "<retrieved_context>" not in system and "postgres-backup" not in system
    # The vaultmem MCP server for this session (the pointers' `get`), this vaultmem's.
    servers = json.loads(argv[3])["mcpServers"]
    assert servers == {
        "vaultmem": {"type": "stdio", "command": env["VAULTMEM_BIN"], "args": ["mcp"], "env": {}}
    }
    settings = json.loads(argv[5])
    [group] = settings["hooks"]["UserPromptSubmit"]
    [hook] = group["hooks"]
    assert hook["type"] == "command"
    assert "vaultmem" in hook["command"] and "claude-hook" in hook["command"]
    assert "--no-memory" in hook["command"]
    assert set(settings) == {"hooks"}


def test_the_initial_prompt_gets_the_default_vaults_notes_once_from_any_directory(
    fake_claude, memory_file, indexed_vault, tmp_path
):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    prompt = "how do I restore a postgres backup"
    env["FAKE_CLAUDE_PROMPT"] = prompt
    elsewhere = tmp_path / "code" / "app"  # not a vault, not even a git repository
    elsewhere.mkdir(parents=True)
    proc, record = run_wrapper_full(["--model", "opus", prompt], env, elsewhere, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert record is not None
    injected = "".join(record["hook_outputs"])
    assert injected.count('path="ops/postgres-backup.md"') == 1
    assert "<user_preferences" not in injected  # already in the system prompt
    assert "postgres-backup" not in record["system"]


def test_notes_arrive_once_when_the_user_hook_is_installed_too(
    fake_claude, memory_file, indexed_vault, tmp_path
):
    from vaultmem.agent.claude_settings import hook_command, merge_hook

    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    user_settings = tmp_path / ".claude" / "settings.json"
    user_settings.parent.mkdir()
    command = hook_command(sys.executable)  # preferences included, as installed hooks do
    user_settings.write_text(json.dumps(merge_hook({}, command)[0]), encoding="utf-8")
    prompt = "how do I restore a postgres backup"
    env["FAKE_CLAUDE_PROMPT"] = prompt
    proc, record = run_wrapper_full([prompt], env, tmp_path, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert record is not None
    injected = "".join(record["hook_outputs"])
    assert injected.count('path="ops/postgres-backup.md"') == 1, record["hook_outputs"]
    # The preferences are in the system prompt (the wrapper's); the installed hook, which
    # would add them, leaves them out for this session.
    assert "Prefer uv over pip." in (record["system"] or "")
    assert "<user_preferences" not in injected and "Prefer uv over pip." not in injected


def test_with_no_vault_registered_it_says_how_and_still_starts_claude(
    fake_claude, memory_file, tmp_path
):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    env["FAKE_CLAUDE_PROMPT"] = "how do I restore a postgres backup"
    proc, record = run_wrapper_full(
        ["how do I restore a postgres backup"], env, tmp_path, argv_file
    )
    assert proc.returncode == 0
    assert record is not None and record["argv"][-1] == "how do I restore a postgres backup"
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("agent-with-memory: no vault is registered")
    assert "vaultmem init" in line
    assert record["hook_outputs"] == []
    assert "Prefer uv over pip." in (record["system"] or "")  # the user's own file still counts


def test_without_initial_prompt_only_preferences_are_added(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    proc, argv = run_wrapper(["--model", "sonnet", "-c"], env, tmp_path, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert argv is not None
    assert argv[0] == "--append-system-prompt"
    assert "Prefer uv over pip." in argv[1] and "<retrieved_context>" not in argv[1]
    assert argv[2] == "--mcp-config" and argv[4] == "--settings"
    assert argv[6:] == ["--model", "sonnet", "-c"]


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
    assert "agent-with-memory" in proc.stdout and "initial prompt" in proc.stdout
    assert argv is None


def test_works_through_a_symlink_from_another_directory(fake_claude, memory_file, tmp_path):
    bindir, argv_file = fake_claude
    # A checkout of its own with its `.venv` (whichever venv runs the tests: CI uses .ci/venv).
    checkout = tmp_path / "checkout"
    (checkout / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(WRAPPER, checkout / "bin" / "agent-with-memory")
    (checkout / ".venv" / "bin" / "vaultmem").symlink_to(Path(sys.executable).with_name("vaultmem"))
    link = bindir / "agent-with-memory"
    link.symlink_to(checkout / "bin" / "agent-with-memory")
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    del env["VAULTMEM_BIN"]  # what is under test: the wrapper finds its checkout's vaultmem
    proc = subprocess.run(
        ["agent-with-memory", "-c"], env=env, cwd="/", capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(argv_file.read_text(encoding="utf-8"))["argv"]
    assert (
        str(checkout / ".venv" / "bin" / "vaultmem")
        in json.loads(argv[5])["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]
    )


def test_the_vaults_memory_file_is_never_a_retrieved_note_beside_the_preferences(
    fake_claude, vault, tmp_path, db_url
):
    """Without a preferences file of the user's own, the vault's committed MEMORY.md is the
    preferences (in the wrapper's system prompt): `claude-hook --no-memory` must not bring it
    back as a note."""
    from support.indexing import index

    from vaultmem import vaults

    bindir, argv_file = fake_claude
    vault.write("MEMORY.md", "# Preferences\n\nRestore the postgres backup with care.\n")
    vault.write(
        "ops/postgres-backup.md", "# Backup\n\nTo restore the postgres backup run pg_restore.\n"
    )
    vault.commit("notes")
    vaults.register(vault.root, database_url=db_url)
    index(vault.root)
    env = base_env(bindir, argv_file, tmp_path / "unused.md", tmp_path)
    del env["VAULTMEM_MEMORY_FILE"]
    prompt = "how do I restore the postgres backup with care"
    env["FAKE_CLAUDE_PROMPT"] = prompt
    proc, record = run_wrapper_full([prompt], env, vault.root, argv_file)
    assert proc.returncode == 0, proc.stderr
    assert record is not None
    assert "Restore the postgres backup with care." in (record["system"] or "")
    injected = "".join(record["hook_outputs"])
    assert 'path="ops/postgres-backup.md"' in injected
    assert 'path="MEMORY.md"' not in injected and "with care" not in injected


def test_the_first_prompt_of_a_session_is_answered_by_the_warm_service(
    fake_claude, memory_file, indexed_vault, tmp_path
):
    """The wrapper starts the warm service beside the preferences and waits for it, so the
    initial prompt's hook is answered warm (the injection log names its source)."""
    from vaultmem.agent import injections, warm
    from vaultmem.config import user_home

    bindir, argv_file = fake_claude
    env = base_env(bindir, argv_file, memory_file, tmp_path)
    env["VAULTMEM_WARM_IDLE"] = "120"
    env["VAULTMEM_LOG_INJECTIONS"] = "1"
    prompt = "how do I restore a postgres backup"
    env["FAKE_CLAUDE_PROMPT"] = prompt
    try:
        proc, record = run_wrapper_full([prompt], env, indexed_vault.root, argv_file)
        assert proc.returncode == 0, proc.stderr
        assert record is not None
        assert 'path="ops/postgres-backup.md"' in "".join(record["hook_outputs"])
        sources = [e.source for e in injections.read(user_home()) if e.paths]
        assert injections.CLAUDE_HOOK_WARM in sources, sources
        assert injections.CLAUDE_HOOK not in sources
    finally:
        warm.stop(environ=env)
