"""`vaultmem distill` (issue 30): queued sessions become notes through `remember`, using a
stand-in `claude` that records its arguments and emits known notes; a failing `claude` loses
nothing from the queue. Real git, real Postgres."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.claude_code import recorded_calls, stand_in_claude
from support.fake_secrets import fake_aws
from support.indexing import index

from vaultmem import vaults
from vaultmem.agent import capture
from vaultmem.agent.distill import (
    MAX_EXCERPT_CHARS,
    BadAnswer,
    Note,
    excerpt,
    parse_answer,
    prompt_text,
    turns,
)
from vaultmem.cli import cli
from vaultmem.config import user_home

AWS_KEY, AWS_SECRET = fake_aws(random.Random(11))
TOOL_MARKER = "TOOL-OUTPUT-7f3a"  # in a tool result: never sent, never stored
INJECTED_MARKER = "INJECTED-NOTE-91c2"  # in vaultmem's own injected block: never sent

NOTES = {
    "notes": [
        {
            "kind": "decision",
            "title": "Use uv for the build",
            "text": "We switched the build from pip to `uv sync`: it is 10x faster in CI.",
            "tags": ["build", "ci"],
        },
        {
            "kind": "gotcha",
            "title": "Flaky migration test",
            "text": "test_migrate fails when TZ is unset; CI sets TZ=UTC.",
            "tags": ["tests"],
        },
        {
            "kind": "fix",
            "title": "Deploy credentials",
            "text": f"aws_access_key_id = {AWS_KEY}\naws_secret_access_key = {AWS_SECRET}",
        },
        {"kind": "opinion", "title": "Not a kind", "text": "dropped"},
    ]
}


def _line(kind: str, content: object, **extra: object) -> str:
    return json.dumps({"type": kind, "message": {"role": kind, "content": content}, **extra})


TRANSCRIPT = "\n".join(
    [
        json.dumps({"type": "summary", "summary": "ignored"}),
        _line(
            "user",
            'Why is the build slow? <retrieved_context>\n<note path="x">'
            f"{INJECTED_MARKER}</note>\n</retrieved_context>",
        ),
        _line(
            "assistant",
            [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "pip resolves every time; uv would cache it."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
            ],
        ),
        _line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": TOOL_MARKER}]),
        "not json at all",
        _line("user", "OK, switch to uv sync.", isMeta=False),
        _line("user", f"The deploy key is {AWS_KEY}; db password: Hunter2-Quartz!9"),
        _line("assistant", [{"type": "text", "text": "Done: the build uses uv sync now."}]),
    ]
)


@pytest.fixture
def setup(db_url, vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001, ANN201
    """A registered, indexed vault; a Claude Code home with one finished session queued; the
    project the session ran in."""
    vault.write("README.md", "# Vault\n")
    vault.commit("init")
    vaults.register(vault.root, database_url=db_url)
    index(vault.root, embed=False)
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    project = tmp_path / "project"
    project.mkdir()
    folder = home / ".claude" / "projects" / "-project"
    folder.mkdir(parents=True)
    path = folder / "sess-1.jsonl"
    path.write_text(TRANSCRIPT + "\n", encoding="utf-8")
    payload = {
        "session_id": "sess-1",
        "transcript_path": str(path),
        "cwd": str(project),
        "hook_event_name": "SessionEnd",
        "reason": "prompt_input_exit",
    }
    assert capture.capture(payload, user_home(), {"HOME": str(home)}).queued
    monkeypatch.chdir(project)
    return vault, tmp_path, project


def distill(*args: str) -> subprocess.CompletedProcess | object:
    return CliRunner().invoke(cli, ["distill", *args])


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def test_queued_session_becomes_committed_scanned_notes(setup, monkeypatch, conn) -> None:  # noqa: ANN001
    vault, tmp, project = setup
    record = tmp / "calls.jsonl"
    claude = stand_in_claude(tmp / "bin", record, answer=json.dumps(NOTES))
    monkeypatch.setenv("VAULTMEM_CLAUDE_BIN", str(claude))
    result = distill("--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    [session] = report["sessions"]
    assert report["remaining"] == 0 and capture.read_queue(user_home()) == []
    assert [(w["kind"], w["path"]) for w in session["written"]] == [
        ("decision", "agent/use-uv-for-the-build.md"),
        ("gotcha", "agent/flaky-migration-test.md"),
    ]
    # the secret-bearing note is refused, reported by category only, and left nowhere
    assert session["refused"] == ["secret"] and AWS_KEY not in result.output
    assert AWS_KEY not in git(vault.root, "log", "-p", "--all")
    assert not (vault.root / "agent" / "deploy-credentials.md").exists()

    # what the stand-in claude was given
    [call] = recorded_calls(record)
    assert call["argv"] == ["-p", prompt_text(), "--output-format", "json"]
    assert call["distilling"] == "1" and call["cwd_entries"] == []
    assert Path(call["cwd"]) not in (vault.root, project)
    sent = call["stdin"]
    assert "User: Why is the build slow?" in sent
    assert "Assistant: pip resolves every time" in sent and "User: OK, switch to uv sync." in sent
    assert TOOL_MARKER not in sent and INJECTED_MARKER not in sent and "hmm" not in sent
    # the session's secrets never leave the machine: masked before claude -p reads them
    assert AWS_KEY not in sent and "Hunter2-Quartz" not in sent and AWS_KEY[:4] not in sent
    assert "The deploy key is [masked " in sent

    # committed as the agent, with the distill trailer and the session's provenance
    note = (vault.root / "agent" / "use-uv-for-the-build.md").read_text()
    assert "session: sess-1" in note and f"project: {project}" in note
    assert "tags: [decision, build, ci]" in note
    log = git(vault.root, "log", "--format=%ae %(trailers:key=Vaultmem-Agent,valueonly)", "-2")
    assert log.split() == ["agent@vaultmem.invalid", "distill"] * 2
    assert git(vault.root, "status", "--porcelain") == ""
    # the transcript is not in the vault
    tracked = git(vault.root, "ls-files")
    assert "jsonl" not in tracked and TOOL_MARKER not in git(vault.root, "grep", "-h", "-e", ".")

    # indexed like any note, listed in the inbox, recorded in the log
    index(vault.root, embed=False)
    rows = conn.execute("SELECT path FROM memory_notes WHERE path LIKE 'agent/%' ORDER BY 1")
    assert [r["path"] for r in rows.fetchall()] == [
        "agent/flaky-migration-test.md",
        "agent/use-uv-for-the-build.md",
    ]
    inbox = CliRunner().invoke(cli, ["inbox", "--json", "--vault", str(vault.root)])
    assert {i["session"] for i in json.loads(inbox.stdout)} == {"sess-1"}
    logged = CliRunner().invoke(cli, ["log", "--json"])
    assert any(e["source"] == "distill" for e in json.loads(logged.stdout))

    # a second run has nothing to do and does not call claude
    again = distill("--json")
    assert json.loads(again.stdout) == {"sessions": [], "remaining": 0}
    assert len(recorded_calls(record)) == 1


@pytest.mark.parametrize("mode", ["fail", "garbage", "hang"])
def test_failing_claude_loses_nothing_from_the_queue(setup, monkeypatch, mode: str) -> None:  # noqa: ANN001
    vault, tmp, _ = setup
    record = tmp / "calls.jsonl"
    monkeypatch.setenv("VAULTMEM_CLAUDE_BIN", str(stand_in_claude(tmp / "bin", record, mode=mode)))
    monkeypatch.setenv("VAULTMEM_DISTILL_TIMEOUT", "2")
    head = vault.head()
    before = capture.read_queue(user_home())
    result = distill()
    assert result.exit_code == 11, result.output
    assert result.stderr.count("\n") == 1 and "stays queued" in result.stderr
    assert "SECRET-IN-STDERR" not in result.output
    assert capture.read_queue(user_home()) == before
    assert vault.head() == head and len(recorded_calls(record)) == 1
    # once claude works again, the same session is distilled
    monkeypatch.setenv(
        "VAULTMEM_CLAUDE_BIN", str(stand_in_claude(tmp / "bin2", record, answer=json.dumps(NOTES)))
    )
    ok = distill("--json")
    assert ok.exit_code == 0, ok.output
    assert len(json.loads(ok.stdout)["sessions"][0]["written"]) == 2


def test_missing_claude_is_one_line(setup, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("VAULTMEM_CLAUDE_BIN", "/nonexistent/claude")
    result = distill()
    assert result.exit_code == 11 and "VAULTMEM_CLAUDE_BIN" in result.stderr
    assert len(capture.read_queue(user_home())) == 1


def test_gone_transcript_is_dropped_without_asking_claude(setup, monkeypatch) -> None:  # noqa: ANN001
    _, tmp, _ = setup
    [item] = capture.read_queue(user_home())
    Path(item.transcript_path).unlink()
    record = tmp / "calls.jsonl"
    monkeypatch.setenv("VAULTMEM_CLAUDE_BIN", str(stand_in_claude(tmp / "bin", record)))
    result = distill("--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sessions"][0]["skipped"] == "transcript-not-readable"
    assert recorded_calls(record) == [] and capture.read_queue(user_home()) == []


def test_same_session_queued_twice_is_distilled_once_and_limit(setup, monkeypatch) -> None:  # noqa: ANN001
    _, tmp, project = setup
    [item] = capture.read_queue(user_home())
    payload = {**item.to_dict(), "hook_event_name": "SessionEnd"}
    capture.capture(payload, user_home(), {"HOME": str(tmp / "home")})
    other = Path(item.transcript_path).with_name("sess-2.jsonl")
    other.write_text(TRANSCRIPT + "\n")
    capture.capture(
        {**payload, "session_id": "sess-2", "transcript_path": str(other)},
        user_home(),
        {"HOME": str(tmp / "home")},
    )
    record = tmp / "calls.jsonl"
    answer = json.dumps({"notes": NOTES["notes"][:1]})
    monkeypatch.setenv(
        "VAULTMEM_CLAUDE_BIN", str(stand_in_claude(tmp / "bin", record, answer=answer))
    )
    first = json.loads(distill("--json", "--limit", "1").stdout)
    assert [s["session_id"] for s in first["sessions"]] == ["sess-1"] and first["remaining"] == 1
    second = json.loads(distill("--json").stdout)
    assert [s["session_id"] for s in second["sessions"]] == ["sess-2"]
    # the same title again: a dated entry in the same note, not a near-duplicate
    assert second["sessions"][0]["written"][0]["path"] == "agent/use-uv-for-the-build.md"
    assert len(recorded_calls(record)) == 2


def test_excerpt_keeps_text_only_and_is_bounded() -> None:
    pairs = turns(TRANSCRIPT.encode().splitlines())
    assert pairs == [
        ("user", "Why is the build slow?"),
        ("assistant", "pip resolves every time; uv would cache it."),
        ("user", "OK, switch to uv sync."),
        ("user", f"The deploy key is {AWS_KEY}; db password: Hunter2-Quartz!9"),
        ("assistant", "Done: the build uses uv sync now."),
    ]
    long = [("user", "task " * 50)] + [("assistant", f"step {i} " * 400) for i in range(200)]
    text = excerpt(long)
    assert len(text) <= MAX_EXCERPT_CHARS
    assert text.startswith("User: task") and "step 199" in text and "left out" in text


def test_a_long_transcript_is_read_at_its_start_and_its_end(tmp_path: Path) -> None:
    from vaultmem.agent import distill as mod

    path = tmp_path / "long.jsonl"
    filler = _line("assistant", [{"type": "text", "text": "filler " * 200}])
    with path.open("w") as fh:
        fh.write(_line("user", "THE TASK: speed up the build") + "\n")
        for _ in range(mod.MAX_READ_BYTES // len(filler) + 50):
            fh.write(filler + "\n")
        fh.write(_line("assistant", "THE OUTCOME: uv sync") + "\n")
    text = mod.read_excerpt(path, tmp_path)
    assert text.startswith("User: THE TASK") and text.endswith("Assistant: THE OUTCOME: uv sync")
    link = tmp_path / "sub"
    link.symlink_to(tmp_path)
    with pytest.raises(Exception, match="symbolic link"):
        mod.read_excerpt(link / "long.jsonl", tmp_path)


@pytest.mark.parametrize(
    "stdout",
    [
        json.dumps({"result": json.dumps(NOTES)}),
        json.dumps({"result": "Here you go:\n```json\n" + json.dumps(NOTES) + "\n```"}),
        json.dumps(NOTES),
    ],
)
def test_parse_answer_shapes(stdout: str) -> None:
    notes = parse_answer(stdout.encode())
    assert [n.kind for n in notes] == ["decision", "gotcha", "fix"]
    assert notes[0] == Note(
        "decision", "Use uv for the build", NOTES["notes"][0]["text"], ("build", "ci")
    )


@pytest.mark.parametrize(
    "stdout",
    [
        b"",
        b"plain words",
        json.dumps({"result": "no json"}).encode(),
        json.dumps({"is_error": True, "result": json.dumps(NOTES)}).encode(),
    ],
)
def test_parse_answer_refuses_what_is_not_notes(stdout: bytes) -> None:
    with pytest.raises(BadAnswer):
        parse_answer(stdout)


def test_prompt_is_a_package_resource() -> None:
    text = prompt_text()
    assert "not instructions" in text and '"notes"' in text


def test_a_timed_out_claude_is_ended_with_its_children(setup, monkeypatch) -> None:  # noqa: ANN001
    import os
    import sys
    import time

    _, tmp, _ = setup
    pidfile = tmp / "child.pid"
    claude = tmp / "bin" / "claude"
    claude.parent.mkdir()
    claude.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    claude.chmod(0o755)
    monkeypatch.setenv("VAULTMEM_CLAUDE_BIN", str(claude))
    monkeypatch.setenv("VAULTMEM_DISTILL_TIMEOUT", "2")
    result = distill()
    assert result.exit_code == 11 and "no answer within 2 s" in result.stderr
    child = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed: wait for it to be gone
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:
            if fh.read().split()[2] == "Z":
                break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        raise AssertionError("claude's child outlived the timeout")


def test_the_queue_keeps_no_text_of_a_note_once_handled(setup) -> None:  # noqa: ANN001
    import stat

    from vaultmem.agent.distill import Note, _load_progress, _save_progress

    [item] = capture.read_queue(user_home())
    folder = capture.queue_dir(user_home())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    refused = Note("gotcha", "Deploy credentials", f"the key is {AWS_KEY}", ())
    pending = Note("fix", "Pin the seed", "pin the random seed in the test", ())
    _save_progress(user_home(), item, [refused, pending], ["Deploy credentials"])
    raw = (folder / item.name).read_text()
    assert AWS_KEY not in raw and "pin the random seed" in raw
    notes, done = _load_progress(user_home(), item)
    assert [n.title for n in notes or []] == ["Pin the seed"] and done == ["Deploy credentials"]
