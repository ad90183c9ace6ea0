"""Install, remove and inspect vaultmem's git hooks.

Each hook gets one marked block that starts `vaultmem ingest --from-hook` detached in the
background and returns at once, so a commit is never slowed, blocked or failed by vaultmem (the
block ends in `true` and sends everything to a log under .git). Existing hooks are appended to,
never replaced, and the block records the absolute interpreter path because GUI git clients
(e.g. the Obsidian Git plugin) run hooks with a minimal PATH. The scripts in the repository's
`git-hooks/` folder are the same block for people who point `core.hooksPath` there.
"""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import GitError

HOOKS = ("post-commit", "post-merge", "post-rewrite", "post-checkout")
BEGIN = "# >>> vaultmem >>>"
END = "# <<< vaultmem <<<"
_BLOCK_RE = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", re.S)


def render_block(command: str) -> str:
    """The hook block; `command` is how to run vaultmem (quoted for sh).

    Git runs these hooks from the top of the work tree, so in the common case (`.git` is a
    directory here) the block starts no git process at all: each fork costs milliseconds."""
    return f"""{BEGIN}
# Indexes committed notes in the background; never blocks or fails git. Managed by
# `vaultmem hooks install`; remove with `vaultmem hooks uninstall`.
if [ -d .git ]; then vaultmem_dir=.git/vaultmem
else vaultmem_dir=$(git rev-parse --absolute-git-dir 2>/dev/null)/vaultmem; fi
[ -d "$vaultmem_dir" ] || (umask 077; mkdir -p "$vaultmem_dir") 2>/dev/null
# Mark a pass as needed. An ingester holding the lock sees the mark and loops, so a burst of
# commits starts one Python process, not one per commit (each would slow the next commits).
: >"$vaultmem_dir/pending" 2>/dev/null
if ! command -v flock >/dev/null 2>&1 || flock -n "$vaultmem_dir/ingest.lock" true 2>/dev/null
then
  vaultmem_detach=; command -v setsid >/dev/null 2>&1 && vaultmem_detach=setsid
  # Low CPU priority, for the new session's autogroup too (Linux schedules sessions as
  # groups, where plain nice would not count): indexing must not slow the next commit.
  ( $vaultmem_detach sh -c '{{ echo 10 >/proc/self/autogroup; }} 2>/dev/null
      exec nice -n 10 "$@"' vaultmem nohup {command} ingest --from-hook \\
      >>"$vaultmem_dir/ingest.log" 2>&1 </dev/null & ) >/dev/null 2>&1
fi
true
{END}
"""


def installed_command() -> str:
    """Run this very interpreter, so the hook works without PATH."""
    return f"{shlex.quote(sys.executable)} -m vaultmem"


def shipped_script() -> str:
    """The content of each file in the repository's git-hooks/ folder."""
    return "#!/bin/sh\n" + render_block("vaultmem")


def hooks_dir(repo: Path) -> Path:
    """The hooks directory git really uses (honours core.hooksPath)."""
    out = subprocess.run(
        ["git", "rev-parse", "--git-path", "hooks"], cwd=repo, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise GitError(f"cannot find the hooks directory of {repo}: {out.stderr.strip()}")
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (repo / path).resolve()


@dataclass(frozen=True)
class HookStatus:
    name: str
    path: Path
    installed: bool
    interpreter_ok: bool
    other_content: bool


def install(repo: Path, command: str | None = None) -> list[Path]:
    """Add (or refresh) the block in every hook. Idempotent; keeps other hook content."""
    block = render_block(command or installed_command())
    d = hooks_dir(repo)
    d.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in HOOKS:
        path = d / name
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            if BEGIN in text:
                new = _BLOCK_RE.sub(lambda _m: block, text, count=1)
            else:
                new = text + ("" if text.endswith("\n") or not text else "\n") + block
        else:
            new = "#!/bin/sh\n" + block
        if not path.exists() or new != path.read_text(encoding="utf-8", errors="surrogateescape"):
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        written.append(path)
    return written


def uninstall(repo: Path) -> list[Path]:
    """Remove the block; delete hooks that held nothing else."""
    removed: list[Path] = []
    d = hooks_dir(repo)
    for name in HOOKS:
        path = d / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if BEGIN not in text:
            continue
        rest = _BLOCK_RE.sub("", text)
        if rest.strip() in ("", "#!/bin/sh", "#!/usr/bin/env sh", "#!/bin/bash"):
            path.unlink()
        else:
            path.write_text(rest, encoding="utf-8", errors="surrogateescape")
        removed.append(path)
    return removed


def status(repo: Path) -> list[HookStatus]:
    d = hooks_dir(repo)
    out = []
    for name in HOOKS:
        path = d / name
        text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
        installed = BEGIN in text and os.access(path, os.X_OK)
        interpreter_ok = False
        if installed:
            m = re.search(r"nohup (\S+) -m vaultmem", text)
            exe = shlex.split(m.group(1))[0] if m else ""
            interpreter_ok = bool(exe) and os.access(exe, os.X_OK)
        rest = _BLOCK_RE.sub("", text).strip()
        out.append(HookStatus(name, path, installed, interpreter_ok, rest not in ("", "#!/bin/sh")))
    return out
