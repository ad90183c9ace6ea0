"""`vaultmem claude-hook` fails open and fast; the settings merge keeps other hooks."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import psycopg
import pytest
from click.testing import CliRunner
from support.claude_code import payload, registered_argv, run_hook

from vaultmem.agent.claude_hook import parse_args
from vaultmem.agent.claude_settings import (
    EVENT,
    hook_command,
    install_claude_hook,
    merge_hook,
    remove_hook,
    session_settings,
)
from vaultmem.cli import cli
from vaultmem.errors import ConfigError


def test_prints_context_for_a_relevant_prompt(indexed_vault):  # noqa: F811
    proc, _ = run_hook(payload("how do I restore a postgres backup", indexed_vault.root))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.startswith("<retrieved_context>")
    assert 'path="ops/postgres-backup.md"' in out
    assert len(out) <= 2500 + 1


def test_a_prompt_from_a_subdirectory_or_from_anywhere_gets_the_vault(indexed_vault, tmp_path):  # noqa: F811
    sub = indexed_vault.root / "deep" / "er"
    sub.mkdir(parents=True)
    proc, _ = run_hook(payload("how do I restore a postgres backup", sub))
    assert b'path="ops/postgres-backup.md"' in proc.stdout
    # outside every registered vault: the default vault
    proc, _ = run_hook(payload("how do I restore a postgres backup", tmp_path / "nowhere"))
    assert proc.returncode == 0 and b'path="ops/postgres-backup.md"' in proc.stdout


def test_the_same_prompt_in_one_session_gets_its_notes_once(indexed_vault):  # noqa: F811
    once = payload("how do I restore a postgres backup", indexed_vault.root, session="s-same")
    first, _ = run_hook(once, None, "--no-memory")
    second, _ = run_hook(once, None, "--no-memory")
    assert b"<retrieved_context>" in first.stdout and second.stdout == b""
    other = payload("how do I restore a postgres backup", indexed_vault.root, session="s-other")
    assert b"<retrieved_context>" in run_hook(other, None, "--no-memory")[0].stdout


def test_the_same_failure_is_said_once_per_session(indexed_vault):  # noqa: F811
    """An index that cannot be reached fails every prompt alike: the session hears it once."""
    from vaultmem import vaults

    vaults.register(indexed_vault.root, database_url="postgresql://nobody@127.0.0.1:1/none")

    def said(prompt: str, session: str) -> list[str]:
        proc, _ = run_hook(payload(prompt, indexed_vault.root, session=session))
        assert proc.returncode == 0 and proc.stdout == b""
        return [ln for ln in proc.stderr.decode().splitlines() if "failed:" in ln]

    first = said("how do I restore a postgres backup", "s1")
    assert len(first) == 1 and "127.0.0.1" in first[0], first
    assert said("and where are the backups kept", "s1") == []
    assert said("how do I restore a postgres backup", "s2") == first  # another session


def test_content_free_prompt_prints_nothing(indexed_vault):  # noqa: F811
    proc, _ = run_hook(payload("好的繼續", indexed_vault.root))
    assert proc.returncode == 0 and proc.stdout == b""


def test_includes_preferences_unless_told_not_to(indexed_vault, tmp_path):  # noqa: F811
    memory = tmp_path / "prefs.md"
    memory.write_text("Use tabs, never spaces.", encoding="utf-8")
    env = dict(os.environ, VAULTMEM_MEMORY_FILE=str(memory))
    proc, _ = run_hook(payload("restore postgres backup", indexed_vault.root), env)
    assert b"Use tabs, never spaces." in proc.stdout
    proc, _ = run_hook(payload("restore postgres backup", indexed_vault.root), env, "--no-memory")
    assert b"Use tabs" not in proc.stdout and b"<retrieved_context>" in proc.stdout


@pytest.mark.parametrize(
    "stdin", [b"", b"not json", b"[1, 2]", b'{"prompt": 42}', b"\xff\xfe", b'{"cwd": "/"}']
)
def test_bad_input_prints_nothing_and_exits_0(stdin):
    proc, _ = run_hook(stdin)
    assert proc.returncode == 0
    assert proc.stdout == b""


def test_database_down_prints_nothing_without_waiting_for_the_limit(tmp_path, vault):
    vault.write("a.md", "x\n")
    vault.commit()
    env = dict(os.environ, VAULTMEM_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
    # A 10-minute limit: the hook returns because the refusal ends it, not the limit.
    proc, _ = run_hook(payload("restore postgres backup", vault.root), env, "--timeout", "600")
    assert proc.returncode == 0
    assert proc.stdout == b""


def test_a_database_that_never_answers_is_cut_off_by_the_timeout(indexed_vault, db_url):  # noqa: F811
    # The index is locked by this test until the hook has returned: its search never ends on
    # its own, so only the hook's time limit can have ended it.
    holder = psycopg.connect(db_url)
    try:
        holder.execute("LOCK TABLE memory_primary IN ACCESS EXCLUSIVE MODE")
        proc, _ = run_hook(
            payload("restore postgres backup", indexed_vault.root), None, "--timeout", "1"
        )
        assert proc.returncode == 0
        assert proc.stdout == b""
    finally:
        holder.rollback()
        holder.close()


def test_other_events_are_ignored(indexed_vault):  # noqa: F811
    data = json.loads(payload("restore postgres backup", indexed_vault.root))
    data["hook_event_name"] = "Stop"
    proc, _ = run_hook(json.dumps(data).encode())
    assert proc.returncode == 0 and proc.stdout == b""


# --- settings merge ---------------------------------------------------------------------------

CMD = "/opt/vaultmem/bin/vaultmem claude-hook"

EXISTING = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git log:*)"]},
    "hooks": {
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": "~/bin/branch-info.sh"}]},
        ],
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]},
        ],
    },
}


def test_merge_keeps_other_hooks_and_settings():
    merged, changed = merge_hook(EXISTING, CMD)
    assert changed
    assert merged["model"] == "opus" and merged["permissions"] == EXISTING["permissions"]
    assert merged["hooks"]["PreToolUse"] == EXISTING["hooks"]["PreToolUse"]
    groups = merged["hooks"][EVENT]
    assert groups[0] == EXISTING["hooks"]["UserPromptSubmit"][0]
    assert groups[1] == {"hooks": [{"type": "command", "command": CMD, "timeout": 10}]}
    assert EXISTING["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"] == "~/bin/branch-info.sh"
    assert len(EXISTING["hooks"]["UserPromptSubmit"]) == 1  # input untouched


def test_merge_is_idempotent_and_updates_in_place():
    once, _ = merge_hook(EXISTING, CMD)
    twice, changed = merge_hook(once, CMD)
    assert not changed and twice == once
    moved, changed = merge_hook(once, "/new/place/vaultmem claude-hook")
    assert changed
    commands = [h["command"] for g in moved["hooks"][EVENT] for h in g["hooks"]]
    assert commands == ["~/bin/branch-info.sh", "/new/place/vaultmem claude-hook"]


def test_merge_into_empty_and_duplicate_cleanup():
    assert session_settings(CMD) == {
        "hooks": {EVENT: [{"hooks": [{"type": "command", "command": CMD, "timeout": 10}]}]}
    }
    dup = {"hooks": {EVENT: [{"hooks": [{"type": "command", "command": CMD}]}] * 2}}
    merged, _ = merge_hook(dup, CMD)
    assert sum(len(g["hooks"]) for g in merged["hooks"][EVENT]) == 1


@pytest.mark.parametrize("bad", [[], {"hooks": []}, {"hooks": {EVENT: {}}}])
def test_merge_refuses_shapes_it_does_not_understand(bad):
    with pytest.raises(ConfigError):
        merge_hook(bad, CMD)  # type: ignore[arg-type]


def test_install_project_and_user_scope(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "proj"
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(EXISTING), encoding="utf-8")
    path = install_claude_hook("project", project, command=CMD)
    assert path == settings
    first = settings.read_text(encoding="utf-8")
    install_claude_hook("project", project, command=CMD)
    assert settings.read_text(encoding="utf-8") == first
    data = json.loads(first)
    assert data["hooks"]["PreToolUse"] == EXISTING["hooks"]["PreToolUse"]
    user = install_claude_hook("user", command=CMD)
    assert user == tmp_path / "home" / ".claude" / "settings.json"
    assert (
        json.loads(user.read_text(encoding="utf-8"))["hooks"][EVENT][0]["hooks"][0]["command"]
        == CMD
    )


def test_install_refuses_to_clobber_invalid_json(tmp_path):
    settings = tmp_path / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{ not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        install_claude_hook("project", tmp_path, command=CMD)
    assert settings.read_text(encoding="utf-8") == "{ not json"


def test_remove_keeps_everything_else_and_is_idempotent():
    merged, _ = merge_hook(EXISTING, CMD)
    cleaned, changed = remove_hook(merged)
    assert changed and cleaned == EXISTING
    again, changed = remove_hook(cleaned)
    assert not changed and again == EXISTING
    only_ours, _ = merge_hook({"model": "opus"}, CMD)
    assert remove_hook(only_ours) == ({"model": "opus"}, True)


def test_hooks_install_status_uninstall_claude(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "proj"
    settings = project / ".claude" / "settings.local.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(EXISTING), encoding="utf-8")
    runner = CliRunner()
    where = ["--project-dir", str(project)]
    result = runner.invoke(cli, ["hooks", "install", "--claude", "--project", *where])
    assert result.exit_code == 0, result.output
    data = json.loads(settings.read_text(encoding="utf-8"))
    assert data["hooks"]["PreToolUse"] == EXISTING["hooks"]["PreToolUse"]
    ours = data["hooks"][EVENT][1]["hooks"][0]
    assert ours["command"].endswith("claude-hook") and ours["timeout"] == 10

    result = runner.invoke(cli, ["hooks", "status", "--claude", "--json", *where])
    assert result.exit_code == 0, result.output
    project_state, shared_state, user_state = [
        s for s in json.loads(result.output) if s["name"] == "claude-code"
    ]
    assert shared_state["scope"] == "shared" and not shared_state["installed"]
    assert project_state["scope"] == "project" and project_state["installed"]
    assert project_state["executable_ok"] and project_state["command"] == ours["command"]
    assert user_state["scope"] == "user" and not user_state["installed"]
    result = runner.invoke(cli, ["hooks", "status", "--claude", *where])
    assert "claude-code (project): installed" in result.output
    assert "claude-code (user): not installed" in result.output

    result = runner.invoke(cli, ["hooks", "uninstall", "--claude", *where])
    assert result.exit_code == 0 and "removed" in result.output
    assert json.loads(settings.read_text(encoding="utf-8")) == EXISTING
    result = runner.invoke(cli, ["hooks", "uninstall", "--claude", *where])
    assert result.exit_code == 0 and "no vaultmem Claude Code hook" in result.output


def test_hooks_install_claude_user_scope(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["hooks", "install", "--claude", "--user"])
    assert result.exit_code == 0, result.output
    user = tmp_path / "home" / ".claude" / "settings.json"
    [group] = json.loads(user.read_text(encoding="utf-8"))["hooks"][EVENT]
    assert "claude-hook" in group["hooks"][0]["command"]
    assert not (tmp_path / ".claude").exists()


def test_status_flags_a_hook_whose_program_is_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    install_claude_hook("project", tmp_path, command="/gone/venv/bin/vaultmem claude-hook")
    result = CliRunner().invoke(
        cli, ["hooks", "status", "--claude", "--project-dir", str(tmp_path)]
    )
    assert "program is gone" in result.output and "hooks install --claude --project" in (
        result.output
    )


def test_status_flags_a_hook_whose_entry_script_is_gone(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    python, *_ = shlex.split(hook_command())
    gone = f"{shlex.quote(python)} -S /gone/lib/python3.9/site-packages/vaultmem/hook_entry.py"
    install_claude_hook("project", tmp_path, command=gone + " claude-hook")
    result = CliRunner().invoke(
        cli, ["hooks", "status", "--claude", "--project-dir", str(tmp_path)]
    )
    assert "program is gone" in result.output


def test_scope_flags_need_claude(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["hooks", "install", "--user"])
    assert result.exit_code == 2 and "--claude" in result.output


def test_claude_install_is_a_hidden_alias(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # it registers the MCP server too
    runner = CliRunner()
    result = runner.invoke(cli, ["claude-install", "--project-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / ".claude" / "settings.local.json").read_text(encoding="utf-8"))
    [group] = data["hooks"][EVENT]
    assert "claude-hook" in group["hooks"][0]["command"]
    assert "claude-install" not in runner.invoke(cli, ["--help"]).output


# --- the lean hook process --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        ([], (3.0, True)),
        (["--no-memory"], (3.0, False)),
        (["--timeout", "1.5", "--memory"], (1.5, True)),
        (["--timeout=2"], (2.0, True)),
        (["--help"], None),
        (["--timeout"], None),
        (["--timeout", "soon"], None),
        (["--no-memroy"], None),
    ],
)
def test_hook_options_parse_without_click(argv, parsed, monkeypatch):
    monkeypatch.delenv("VAULTMEM_HOOK_TIMEOUT")
    assert parse_args(argv) == parsed
    monkeypatch.setenv("VAULTMEM_HOOK_TIMEOUT", "7.5")
    if parsed is not None and "--timeout" not in " ".join(argv):
        assert parse_args(argv) == (7.5, parsed[1])


def test_the_hook_process_does_not_import_the_cli():
    proc = subprocess.run(
        registered_argv("--no-memory", importtime=True),
        input=b"not json",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout == b""
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()}
    assert "vaultmem.agent.claude_hook" in imported
    assert not {"click", "vaultmem.cli", "rich", "dotenv", "sqlalchemy"} & imported


def test_a_searching_hook_imports_no_secret_detector_yaml_or_sqlalchemy(indexed_vault):  # noqa: F811
    proc = subprocess.run(
        registered_argv("--no-memory", importtime=True),
        input=payload("how do I restore a postgres backup", indexed_vault.root),
        capture_output=True,
        timeout=60,
    )
    assert b'path="ops/postgres-backup.md"' in proc.stdout  # it really searched
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()}
    assert "vaultmem.search.retrieval" in imported
    heavy = {
        "detect_secrets",
        "vaultmem.index.sensitive",
        "vaultmem.index.triage",
        "yaml",
        "sqlalchemy",
    }
    assert not heavy & imported


def test_hook_help_and_bad_options_go_through_click():
    proc = subprocess.run(
        registered_argv("--help"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "UserPromptSubmit" in proc.stdout
    proc = subprocess.run(
        registered_argv("--bogus"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--bogus" in proc.stderr


# --- query and context commands ---------------------------------------------------------------


def test_the_query_command_embeds_as_the_hook_does(indexed_vault, monkeypatch):  # noqa: F811
    """`vaultmem query` and the hook run the same search; the query command must not leave
    OpenMP's threads spinning between regions either (that cost it twice the hook's CPU:
    bench/query_cpu.py measures both)."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    result = CliRunner().invoke(cli, ["query", "restore postgres backup"])
    assert result.exit_code == 0, result.output
    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"


def test_query_command_json_and_explain(indexed_vault):  # noqa: F811
    runner = CliRunner()
    args = ["query", "restore postgres backup", "--vault", str(indexed_vault.root)]
    result = runner.invoke(cli, [*args, "--json", "--k", "3"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)
    assert hits[0]["path"] == "ops/postgres-backup.md"
    assert {"vector_rank", "lexical_rank", "fused", "score", "text"} <= set(hits[0])
    result = runner.invoke(cli, [*args, "--explain", "--tag", "ops"])
    assert result.exit_code == 0, result.output
    assert "ops/postgres-backup.md" in result.output and "fused" in result.output


def test_query_command_on_an_unregistered_vault_says_what_to_do(db_url, vault):
    from vaultmem.store import db

    with db.connect_url(db_url) as c:
        db.apply_schema(c)
    result = CliRunner().invoke(cli, ["query", "anything", "--vault", str(vault.root)])
    assert result.exit_code == 2
    assert "not a registered vault" in result.output and "vaultmem init" in result.output


def test_context_command_prints_the_block(indexed_vault, tmp_path):  # noqa: F811
    memory = tmp_path / "prefs.md"
    memory.write_text("Keep answers short.", encoding="utf-8")
    env = dict(os.environ, VAULTMEM_MEMORY_FILE=str(memory))
    cmd = [sys.executable, "-m", "vaultmem", "context", "--vault", str(indexed_vault.root)]
    proc = subprocess.run(
        [*cmd, "--max-chars", "800", "restore postgres backup"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    prefs, notes = proc.stdout.rstrip("\n").split("\n\n", 1)
    assert prefs.startswith("<user_preferences") and "Keep answers short." in prefs
    assert notes.startswith("<retrieved_context>") and len(notes) <= 800
    proc = subprocess.run(
        [*cmd, "--no-memory", "ok continue"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout == ""
