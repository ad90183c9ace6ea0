"""The injection log: every injection recorded locally, bounded, private, without note text."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from click.testing import CliRunner
from support.claude_code import payload, run_hook

from vaultmem.agent import injections
from vaultmem.cli import cli
from vaultmem.config import user_home

PROMPT = "how do I restore a postgres backup"


def test_records_round_trip_with_private_modes(tmp_path):
    home = tmp_path / "home"
    entry = injections.make("claude-hook", "notes", "a prompt", ["a.md", "b.md"], 420, now=0.25)
    injections.append(home, entry)
    assert injections.read(home) == [entry]
    assert entry.time == "1970-01-01T00:00:00.250Z" and entry.prompt is None
    assert (
        entry.prompt_sha256 == injections.prompt_hash("a prompt") and len(entry.prompt_sha256) == 16
    )
    path = injections.log_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "prompt" not in json.loads(path.read_text(encoding="utf-8"))
    kept = injections.make("mcp-get", None, "secret plan", [], 1, keep_prompt=True)
    assert kept.to_dict()["prompt"] == "secret plan"


def test_retention_is_bounded_by_size(tmp_path):
    home = tmp_path / "home"
    for i in range(300):
        injections.append(
            home, injections.make("claude-hook", "v", f"p{i}", [f"n{i}.md"], i + 1), max_bytes=4000
        )
    files = sorted(injections.log_path(home).parent.iterdir())
    assert [f.name for f in files] == ["injections.jsonl", "injections.jsonl.1"]
    assert all(f.stat().st_size <= 4000 for f in files)
    entries = injections.read(home)
    assert entries[-1].paths == ("n299.md",) and len(entries) < 300
    assert [e.chars for e in entries] == sorted(e.chars for e in entries)  # oldest first
    assert [e.paths for e in injections.read(home, 2)] == [("n298.md",), ("n299.md",)]


def test_an_unwritable_log_never_fails_the_injection(tmp_path):
    blocker = tmp_path / "home"
    blocker.write_text("a file where the directory should be", encoding="utf-8")
    injections.append(blocker, injections.make("claude-hook", "v", "p", [], 5))  # no raise
    assert injections.read(blocker) == []


def test_the_hook_records_what_it_printed(indexed_vault):  # noqa: F811
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root, "s-45"), None, "--no-memory")
    assert b"<retrieved_context>" in proc.stdout
    [entry] = injections.read(user_home())
    assert entry.source == "claude-hook" and entry.vault == "vault"
    assert entry.paths[0] == "ops/postgres-backup.md"
    assert entry.chars == len(proc.stdout.decode().rstrip("\n"))
    assert entry.prompt_sha256 == injections.prompt_hash(PROMPT) and entry.prompt is None
    assert entry.session == "s-45"  # the session it answered: the web page's timeline
    # Why it was given: its score and strongest signals, by the gate's verdict.
    assert entry.signals[0].startswith("ops/postgres-backup.md: ")
    assert " nats (" in entry.signals[0]
    raw = injections.log_path(user_home()).read_text(encoding="utf-8")
    assert "pg_restore" not in raw and PROMPT not in raw
    # nothing injected, nothing recorded
    run_hook(payload("ok continue", indexed_vault.root))
    assert len(injections.read(user_home())) == 1


@pytest.mark.parametrize(
    ("setting", "value", "expect"),
    [("VAULTMEM_LOG_PROMPTS", "1", "prompt"), ("VAULTMEM_LOG_INJECTIONS", "0", "none")],
)
def test_prompts_only_on_request_and_the_log_can_be_off(indexed_vault, setting, value, expect):  # noqa: F811
    env = dict(os.environ, **{setting: value})
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root), env, "--no-memory")
    assert b"<retrieved_context>" in proc.stdout
    entries = injections.read(user_home())
    if expect == "none":
        assert entries == []
    else:
        assert [e.prompt for e in entries] == [PROMPT]


def test_the_wrapper_records_the_preferences_it_put_in_the_system_prompt(indexed_vault, tmp_path):  # noqa: F811
    memory = tmp_path / "prefs.md"
    memory.write_text("Answer tersely.", encoding="utf-8")
    env = dict(os.environ, VAULTMEM_MEMORY_FILE=str(memory))
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "context", "--fail-open", "--memory-only"]
        + ["--record-as", "wrapper"],
        env=env,
        cwd=indexed_vault.root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Answer tersely." in proc.stdout
    [entry] = injections.read(user_home())
    assert entry.source == "wrapper" and entry.paths == (str(memory),)
    assert entry.chars == len(proc.stdout.rstrip("\n"))
    # no prompt was typed yet: no hash of an empty one pretends there was
    assert entry.prompt_sha256 is None and entry.prompt_sha256 != injections.prompt_hash("")
    assert " prompt -  " in CliRunner().invoke(cli, ["log"]).output
    # `vaultmem context` run by a person records nothing
    subprocess.run(
        [sys.executable, "-m", "vaultmem", "context", "restore postgres backup"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert len(injections.read(user_home())) == 1


def test_log_command_shows_the_latest(indexed_vault):  # noqa: F811
    for prompt in ("restore postgres backup", PROMPT):
        run_hook(payload(prompt, indexed_vault.root), None, "--no-memory")
    runner = CliRunner()
    result = runner.invoke(cli, ["log", "--last", "1", "--json"])
    assert result.exit_code == 0, result.output
    [shown] = json.loads(result.output)
    assert shown["prompt_sha256"] == injections.prompt_hash(PROMPT)
    assert shown["source"] == "claude-hook" and "ops/postgres-backup.md" in shown["paths"]
    text = runner.invoke(cli, ["log"]).output
    assert text.count("claude-hook") == 2 and "ops/postgres-backup.md" in text


def test_one_record_is_one_line_whatever_its_fields_hold(tmp_path):
    home = user_home()
    forged = "x.md\n2026-01-01T00:00:00.000Z  claude-hook      v  prompt 0000  9 chars  forged.md"
    nasty = "\x1b]0;title\x07odd\u202ename.md"
    injections.append(home, injections.make("mcp-get", "v\nault", "p", [forged, nasty], 10))
    injections.append(
        home, injections.make("claude-hook", "v", "q\nx", ["a.md"], 5, keep_prompt=True)
    )
    out = CliRunner().invoke(cli, ["log"]).output
    lines = out.splitlines()
    assert len(lines) == 2, lines
    assert "forged.md" in lines[0] and "\\x0a" in lines[0]  # shown, escaped, on its own line
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b" in lines[0] and "\\u202e" in lines[0]
