"""Driving the per-prompt hook as Claude Code does: the registered command through a shell, the
UserPromptSubmit JSON on stdin."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

from vaultmem.agent.claude_settings import hook_command


def run_hook(
    stdin: bytes, env: dict[str, str] | None = None, *args: str
) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """The command `hooks install --claude` registers, run through a shell as Claude Code does."""
    start = time.monotonic()
    proc = subprocess.run(
        ["/bin/sh", "-c", hook_command(None, *args)],
        input=stdin,
        env=env or dict(os.environ),
        capture_output=True,
        timeout=600,  # a guard against a hang, never a measurement
    )
    return proc, time.monotonic() - start


def registered_argv(*args: str, importtime: bool = False) -> list[str]:
    """The registered hook command as an argv (no shell), optionally under `-X importtime`."""
    python, *rest = shlex.split(hook_command(None, *args))
    return [python, *(["-X", "importtime"] if importtime else []), *rest]


def payload(prompt: str, cwd: Path, session: str | None = None) -> bytes:
    return json.dumps(
        {
            # a new session each time: one prompt's notes are added once per session
            "session_id": session or uuid.uuid4().hex,
            "transcript_path": "/tmp/t.jsonl",
            "cwd": str(cwd),
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()


def hook(prompt: str, cwd: Path, env: dict[str, str] | None = None, *args: str) -> str:
    data = {
        "session_id": uuid.uuid4().hex,
        "cwd": str(cwd),
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "claude-hook", *args],
        input=json.dumps(data).encode(),
        env=env or dict(os.environ),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0
    return proc.stdout.decode()


STAND_IN_CLAUDE = """#!{python}
# A stand-in for `claude -p`: records its arguments, standard input, folder and environment,
# then answers as `claude -p --output-format json` does (or fails, or hangs).
import json, os, sys, time
record = {{
    "argv": sys.argv[1:],
    "stdin": sys.stdin.read(),
    "cwd": os.getcwd(),
    "cwd_entries": os.listdir("."),
    "distilling": os.environ.get("VAULTMEM_DISTILLING"),
}}
with open({record!r}, "a", encoding="utf-8") as fh:
    fh.write(json.dumps(record) + "\\n")
mode = {mode!r}
if mode == "hang":
    time.sleep(600)
if mode == "fail":
    sys.stderr.write("stand-in failure, transcript said: SECRET-IN-STDERR\\n")
    sys.exit(1)
if mode == "garbage":
    print("I could not do that")
    sys.exit(0)
print(json.dumps({{"type": "result", "subtype": "success", "is_error": False,
                  "result": {answer!r}, "session_id": "distill-run"}}))
"""


def stand_in_claude(bindir: Path, record: Path, *, answer: str = "", mode: str = "ok") -> Path:
    """Write an executable `claude` into `bindir` that records every call (one JSON line in
    `record`) and answers `answer` as its `result` (mode "ok"), exits 1 ("fail"), prints no
    JSON ("garbage") or never answers ("hang")."""
    bindir.mkdir(parents=True, exist_ok=True)
    path = bindir / "claude"
    path.write_text(
        STAND_IN_CLAUDE.format(python=sys.executable, record=str(record), mode=mode, answer=answer),
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def recorded_calls(record: Path) -> list[dict]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
