"""Session capture (issue 30): `hooks install --claude --capture` registers Claude Code's
SessionEnd hook; the hook queues the ended session in the user's vaultmem home and returns at
once. Transcripts only from Claude Code's own folder, never through a link; excluded projects
and distill's own `claude -p` are never queued."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from vaultmem.agent.capture import DISTILLING_ENV, accepted_transcript, read_queue
from vaultmem.agent.claude_settings import (
    CAPTURE_EVENT,
    EVENT,
    capture_command,
    merge_hook,
    remove_hook,
)
from vaultmem.cli import cli
from vaultmem.config import user_home


@pytest.fixture
def claude_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / ".claude" / "projects" / "-work-proj").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    return home / ".claude"


def transcript(claude_dir: Path, name: str = "abc.jsonl") -> Path:
    path = claude_dir / "projects" / "-work-proj" / name
    path.write_text('{"type":"user","message":{"role":"user","content":"hi"}}\n')
    return path


def payload(path: Path | str, cwd: str = "/work/proj", session: str = "s-1") -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": str(path),
            "cwd": cwd,
            "hook_event_name": "SessionEnd",
            "reason": "prompt_input_exit",
        }
    ).encode()


def run_capture(data: bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The registered SessionEnd command, through a shell as Claude Code runs it."""
    return subprocess.run(
        ["/bin/sh", "-c", capture_command("project")],
        input=data,
        env=env or dict(os.environ),
        capture_output=True,
        timeout=120,  # a guard against a hang, never a measurement
    )


def test_ended_session_is_queued_in_the_vaultmem_home(claude_dir: Path) -> None:
    path = transcript(claude_dir)
    proc = run_capture(payload(path))
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    [item] = read_queue(user_home())
    assert (item.session_id, item.transcript_path, item.cwd, item.reason) == (
        "s-1",
        str(path),
        "/work/proj",
        "prompt_input_exit",
    )


@pytest.mark.parametrize("where", ["outside", "link-file", "link-folder", "dotdot", "not-jsonl"])
def test_transcripts_only_from_claude_codes_own_folder(
    claude_dir: Path, tmp_path: Path, where: str
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    secret = outside / "t.jsonl"
    secret.write_text('{"type":"user","message":{"content":"ssh key here"}}\n')
    projects = claude_dir / "projects"
    if where == "outside":
        path = str(secret)
    elif where == "link-file":
        (projects / "-work-proj" / "l.jsonl").symlink_to(secret)
        path = str(projects / "-work-proj" / "l.jsonl")
    elif where == "link-folder":
        (projects / "-linked").symlink_to(outside)
        path = str(projects / "-linked" / "t.jsonl")
    elif where == "dotdot":
        path = str(projects / ".." / ".." / ".." / "elsewhere" / "t.jsonl")
    else:
        (projects / "-work-proj" / "t.txt").write_text("x")
        path = str(projects / "-work-proj" / "t.txt")
    assert accepted_transcript(path) is None
    assert run_capture(payload(path)).returncode == 0
    assert read_queue(user_home()) == []


def test_excluded_projects_and_distill_itself_are_not_queued(
    claude_dir: Path, tmp_path: Path
) -> None:
    path = transcript(claude_dir)
    project = tmp_path / "client-work"
    (project / "sub").mkdir(parents=True)
    env = dict(os.environ, VAULTMEM_CAPTURE_EXCLUDE=f"/nowhere,{project}")
    assert run_capture(payload(path, cwd=str(project / "sub")), env).returncode == 0
    assert run_capture(payload(path), dict(os.environ, **{DISTILLING_ENV: "1"})).returncode == 0
    assert read_queue(user_home()) == []
    # the registry's [settings] is the user's too
    from vaultmem import vaults

    config = vaults.config_path()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[settings]\nVAULTMEM_CAPTURE_EXCLUDE = "{project}"\n')
    assert run_capture(payload(path, cwd=str(project))).returncode == 0
    assert read_queue(user_home()) == []
    assert run_capture(payload(path, cwd=str(tmp_path))).returncode == 0
    assert len(read_queue(user_home())) == 1


def test_hook_returns_when_stdin_is_never_closed(claude_dir: Path) -> None:
    path = transcript(claude_dir)
    proc = subprocess.Popen(
        shlex.split(capture_command("project")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(payload(path)[:-5])  # half a payload, and the pipe left open
        proc.stdin.flush()
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdin is not None
        proc.stdin.close()
    assert read_queue(user_home()) == []


def test_garbage_input_exits_zero(claude_dir: Path) -> None:
    for data in (b"", b"not json", b"[1]", b'{"hook_event_name": "SessionEnd"}'):
        assert run_capture(data).returncode == 0
    assert read_queue(user_home()) == []


def test_install_capture_registers_session_end_and_uninstall_removes_it(
    claude_dir: Path, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    mine = {"type": "command", "command": "echo bye"}
    (project / ".claude" / "settings.local.json").write_text(
        json.dumps({"hooks": {CAPTURE_EVENT: [{"hooks": [mine]}]}})
    )
    args = ["--claude", "--project-dir", str(project), "--no-mcp"]
    result = CliRunner().invoke(cli, ["hooks", "install", *args, "--capture"])
    assert result.exit_code == 0, result.output
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    ended = [h for g in data["hooks"][CAPTURE_EVENT] for h in g["hooks"]]
    assert mine in ended
    ours = [h for h in ended if h != mine]
    assert [h["command"] for h in ours] == [capture_command("project")]
    assert data["hooks"][EVENT]
    # installing again changes nothing; uninstall takes both hooks and keeps the user's own
    again = CliRunner().invoke(cli, ["hooks", "install", *args, "--capture"])
    assert again.exit_code == 0
    assert json.loads((project / ".claude" / "settings.local.json").read_text()) == data
    status = CliRunner().invoke(
        cli, ["hooks", "status", "--claude", "--project-dir", str(project), "--json"]
    )
    listed = [e for e in json.loads(status.stdout) if e["name"] == "claude-capture"]
    assert [(e["scope"], e["installed"], e["executable_ok"]) for e in listed] == [
        ("project", True, True)
    ]
    gone = CliRunner().invoke(cli, ["hooks", "uninstall", *args])
    assert gone.exit_code == 0 and "SessionEnd capture hook removed" in gone.stdout
    data = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert data == {"hooks": {CAPTURE_EVENT: [{"hooks": [mine]}]}}


def test_capture_needs_claude() -> None:
    result = CliRunner().invoke(cli, ["hooks", "install", "--capture"])
    assert result.exit_code == 2 and "--capture" in result.output


def test_merge_and_remove_are_per_event() -> None:
    both, _ = merge_hook({}, "vaultmem claude-hook")
    both, _ = merge_hook(
        both, "vaultmem capture-session", event=CAPTURE_EVENT, subcommand="capture-session"
    )
    assert set(both["hooks"]) == {EVENT, CAPTURE_EVENT}
    only_prompt, changed = remove_hook(both, event=CAPTURE_EVENT, subcommand="capture-session")
    assert changed and set(only_prompt["hooks"]) == {EVENT}
    assert remove_hook(only_prompt, event=CAPTURE_EVENT, subcommand="capture-session")[1] is False
