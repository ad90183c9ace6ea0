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
