"""Install, remove and inspect vaultmem's git hooks.

Each hook gets one marked block that starts `vaultmem ingest --from-hook` detached in the
background and returns at once, so a commit is never slowed, blocked or failed by vaultmem (the
block ends in `true` and sends everything to a log under .git). The block records the absolute
interpreter path because GUI git clients (e.g. the Obsidian Git plugin) run hooks with a minimal
PATH, and the user's config file so they find the vault's registration.

Design decision: a hook the user already has is never edited. It is moved aside
(`<hook>.vaultmem-user`, a name git does not run) and a small `/bin/sh` dispatcher takes its
place: it runs the user's hook with the same arguments and stdin, keeps its exit status, then
starts vaultmem. Appending to the user's file instead fails in every way seen in the field: a
Python or Node hook cannot run a shell block, and a shell hook that ends in `exit 0` or `exec`
(Git LFS, husky, pre-commit) never reaches it. `status` therefore checks that the block can be
reached, not only that it is there. `reference-transaction` is among the hooks because it is
the only one that runs when HEAD moves without a commit (`git reset`, `git update-ref`); its
block acts only on a committed transaction that touches HEAD or a branch.

The scripts in the repository's `git-hooks/` folder are the same blocks, calling `vaultmem` from
PATH, for people who point `core.hooksPath` at a shared folder.
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

from ..errors import ConfigError, GitError

HOOKS = ("post-commit", "post-merge", "post-rewrite", "post-checkout", "reference-transaction")
BEGIN = "# >>> vaultmem >>>"
END = "# <<< vaultmem <<<"
USER_SUFFIX = ".vaultmem-user"
DISPATCHER_MARK = "# vaultmem dispatcher"
_BLOCK_RE = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", re.S)
# Hooks git feeds on stdin: the dispatcher keeps a copy for the block and the user's hook.
_STDIN_HOOKS = frozenset({"post-rewrite", "reference-transaction"})
_SH_SHEBANG_RE = re.compile(r"^#!\s*(?:/usr)?/bin/(?:env\s+)?(?:sh|bash|dash|ksh|zsh)\b")


def _guard(hook: str) -> str:
    """The test that decides whether this hook's event is worth a catch-up."""
    if hook == "reference-transaction":
        # Called for every ref update (a fetch too), three times per transaction: only a
        # committed one that moves HEAD or a branch matters.
        return (
            '[ "$1" = committed ] && printf \'%s\\n\' "$vaultmem_stdin" '
            "| grep -qE ' (HEAD|refs/heads/.*)$'"
        )
    return "true"


def render_block(command: str, config: Path | None = None, hook: str = "post-commit") -> str:
    """The hook block; `command` is how to run vaultmem (quoted for sh).

    `config` is the user's vaultmem configuration file, recorded so that a commit from any
    environment (a GUI client, an IDE, `env -i`) finds the vault's registration and so the
    index it was installed for.

    Git runs these hooks from the top of the work tree, so in the common case (`.git` is a
    directory here) the block starts no git process at all: each fork costs milliseconds."""
    config_arg = f" --config {shlex.quote(str(config))}" if config is not None else ""
    read_stdin = "vaultmem_stdin=$(cat)\n" if hook == "reference-transaction" else ""
    return f"""{BEGIN}
# Indexes committed notes in the background; never blocks or fails git. Managed by
# `vaultmem hooks install`; remove with `vaultmem hooks uninstall`.
{read_stdin}if {_guard(hook)}; then
if [ -d .git ]; then vaultmem_dir=.git/vaultmem
else vaultmem_dir=$(git rev-parse --absolute-git-dir 2>/dev/null)/vaultmem; fi
# Nothing is written through a symbolic link (`vaultmem status` names a linked state file).
if [ -h "$vaultmem_dir" ] || [ -h "$vaultmem_dir/pending" ] || [ -h "$vaultmem_dir/starting" ] ||
  [ -h "$vaultmem_dir/ingest.log" ]; then :; else
[ -d "$vaultmem_dir" ] || (umask 077; mkdir -p "$vaultmem_dir") 2>/dev/null
# Mark a pass as needed. An ingester holding the lock sees the mark and loops, so a burst of
# commits starts one Python process, not one per commit (each would slow the next commits).
: >"$vaultmem_dir/pending" 2>/dev/null
# One start per event: a commit runs reference-transaction and post-commit, one after the other,
# and the ingester started by the first only takes its lock a moment later ("starting" until it
# does; an older mark is from a start that failed).
vaultmem_now=$(date +%s 2>/dev/null || echo 0)
vaultmem_started=$(cat "$vaultmem_dir/starting" 2>/dev/null || echo 0)
case $vaultmem_started in ''|*[!0-9]*) vaultmem_started=0 ;; esac
if [ $((vaultmem_now - vaultmem_started)) -gt 30 ] && {{ ! command -v flock >/dev/null 2>&1 ||
  flock -n "$vaultmem_dir/ingest.lock" true 2>/dev/null; }}
then
  echo "$vaultmem_now" >"$vaultmem_dir/starting" 2>/dev/null
  vaultmem_detach=; command -v setsid >/dev/null 2>&1 && vaultmem_detach=setsid
  # A session of its own (it outlives the terminal). The text pass runs at normal priority,
  # so a commit is searchable within seconds on a busy machine; the ingester lowers its own
  # priority (nice and autogroup) before it embeds, the long part that must not slow anything.
  ( $vaultmem_detach nohup {command} ingest --from-hook{config_arg} \\
      >>"$vaultmem_dir/ingest.log" 2>&1 </dev/null & ) >/dev/null 2>&1
fi
fi
fi
true
{END}
"""


def render_dispatcher(hook: str, block: str) -> str:
    """A hook that runs the user's own hook (moved aside), keeps its exit status, then vaultmem."""
    user = f"{hook}{USER_SUFFIX}"
    if hook in _STDIN_HOOKS:
        run_user = (
            "vaultmem_stdin=$(cat)\n"
            f'if [ -x "$vaultmem_hooks/{user}" ]; then\n'
            '  { [ -n "$vaultmem_stdin" ] && printf \'%s\\n\' "$vaultmem_stdin"; } |\n'
            f'    "$vaultmem_hooks/{user}" "$@" || vaultmem_status=$?\nfi\n'
        )
        block = block.replace("vaultmem_stdin=$(cat)\n", "")
    else:
        run_user = (
            f'if [ -x "$vaultmem_hooks/{user}" ]; then\n'
            f'  "$vaultmem_hooks/{user}" "$@" || vaultmem_status=$?\nfi\n'
        )
    return (
        "#!/bin/sh\n"
        f"{DISPATCHER_MARK}: runs your own hook ({user}, unchanged) with the same arguments\n"
        "# and input, keeps its exit status, then starts vaultmem. `vaultmem hooks uninstall`\n"
        "# puts your hook back.\n"
        'vaultmem_hooks=$(dirname "$0"); vaultmem_status=0\n'
        f"{run_user}"
        f"{block}"
        'exit "$vaultmem_status"\n'
    )


def installed_command() -> str:
    """Run this very interpreter, so the hook works without PATH."""
    return f"{shlex.quote(sys.executable)} -m vaultmem"


def shipped_script(hook: str = "post-commit") -> str:
    """The content of each file in the repository's git-hooks/ folder."""
    return "#!/bin/sh\n" + render_block("vaultmem", hook=hook)


def hooks_dir(repo: Path) -> Path:
    """The hooks directory git really uses (honours core.hooksPath)."""
    out = subprocess.run(
        ["git", "rev-parse", "--git-path", "hooks"], cwd=repo, capture_output=True, text=True
    )
    if out.returncode != 0:
        raise GitError(f"cannot find the hooks directory of {repo}: {out.stderr.strip()}")
    path = Path(out.stdout.strip())
    return path if path.is_absolute() else (repo / path).resolve()


def hooks_in_work_tree(repo: Path) -> bool:
    """True when core.hooksPath points inside the work tree (a folder teams usually commit)."""
    d, root = hooks_dir(repo).resolve(), repo.resolve()
    if _is_bare(repo):
        return False  # a bare repository (a shared vault's remote) has no work tree
    return (d == root or root in d.parents) and ".git" not in d.relative_to(root).parts


def _is_bare(repo: Path) -> bool:
    out = subprocess.run(
        ["git", "rev-parse", "--is-bare-repository"], cwd=repo, capture_output=True, text=True
    )
    return out.returncode == 0 and out.stdout.strip() == "true"


@dataclass(frozen=True)
class HookStatus:
    name: str
    path: Path
    installed: bool  # the block is there, executable and reachable
    interpreter_ok: bool
    other_content: bool  # the user's own hook runs too (chained, or around the block)
    problem: str | None = None  # why an installed-looking block would never run


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _write(path: Path, text: str) -> None:
    """Replace the hook `path` with `text`, executable, atomically (a commit running meanwhile
    sees the old hook or the new one); never through a symbolic link (a linked hook whose
    target would change is refused: it may be a committed script)."""
    from ..files import atomic_write

    old = path.lstat() if os.path.lexists(path) else None
    if old is not None and not stat.S_ISLNK(old.st_mode) and _read(path) == text:
        if old.st_mode & _EXEC != _EXEC:
            path.chmod(old.st_mode | _EXEC)
        return
    mode = (stat.S_IMODE(old.st_mode) if old is not None else 0o644) | _EXEC
    atomic_write(path, text.encode("utf-8", "surrogateescape"), mode=mode)


_EXEC = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _is_empty_script(text: str) -> bool:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("#")]
    return not lines


def install(
    repo: Path, command: str | None = None, config: Path | None = None, *, force: bool = False
) -> list[Path]:
    """Install the block in every hook; an existing hook of the user's is chained, never edited.

    Idempotent. Refuses (ConfigError) to write this machine's paths into a core.hooksPath
    folder inside the work tree unless `force`."""
    if hooks_in_work_tree(repo) and not force:
        raise ConfigError(
            f"core.hooksPath points into the work tree ({hooks_dir(repo)}), a folder that is "
            "usually committed, and vaultmem's hooks hold this machine's paths: run "
            "`vaultmem hooks install --force` to write them anyway, or call `vaultmem ingest "
            "--from-hook` from your shared hooks (see git-hooks/ in vaultmem's repository)"
        )
    d = hooks_dir(repo)
    d.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in HOOKS:
        block = render_block(command or installed_command(), config, hook=name)
        path = d / name
        user = d / f"{name}{USER_SUFFIX}"
        if path.exists() and not path.is_dir():
            text = _read(path)
            rest = _BLOCK_RE.sub("", text)
            if DISPATCHER_MARK in text or (BEGIN in text and _is_empty_script(rest)):
                pass  # ours: refreshed below
            else:
                # The user's own hook (or one an older vaultmem appended to): keep it as it
                # was, out of git's way, and chain it.
                if user.exists():
                    raise ConfigError(
                        f"both {path} and {user} exist: vaultmem will not overwrite either; "
                        f"merge them by hand, then run `vaultmem hooks install` again"
                    )
                os.replace(path, user)
                if BEGIN in text:
                    _write(user, rest)
        if user.exists():
            _write(path, render_dispatcher(name, block))
        else:
            _write(path, "#!/bin/sh\n" + block)
        written.append(path)
    return written


def uninstall(repo: Path) -> list[Path]:
    """Remove vaultmem from every hook and put the user's own hooks back as they were."""
    removed: list[Path] = []
    d = hooks_dir(repo)
    for name in HOOKS:
        path = d / name
        user = d / f"{name}{USER_SUFFIX}"
        if not path.exists():
            continue
        text = _read(path)
        if BEGIN not in text and DISPATCHER_MARK not in text:
            continue
        rest = _BLOCK_RE.sub("", text)
        if DISPATCHER_MARK in text or _is_empty_script(rest):
            if user.exists():
                os.replace(user, path)
            else:
                path.unlink()
        else:
            _write(path, rest)  # old layout
        removed.append(path)
    return removed


def _unreachable(text: str) -> str | None:
    """Why a block in `text` can never run, or None."""
    first = text.split("\n", 1)[0]
    if first.startswith("#!") and not _SH_SHEBANG_RE.match(first):
        return f"never runs: the hook is not a shell script ({first[2:].strip()})"
    before = text[: text.index(BEGIN)]
    for line in before.splitlines():
        if re.match(r"^(exec\s|exit(\s|;|$))", line.strip()) and not line.startswith((" ", "\t")):
            return f"unreachable after `{line.strip()}`"
    return None


def status(repo: Path) -> list[HookStatus]:
    d = hooks_dir(repo)
    out = []
    for name in HOOKS:
        path = d / name
        text = _read(path) if path.exists() and not path.is_dir() else ""
        present = BEGIN in text and os.access(path, os.X_OK)
        problem = _unreachable(text) if present else None
        interpreter_ok = False
        if present:
            m = re.search(r"nohup (\S+) -m vaultmem", text)
            exe = shlex.split(m.group(1))[0] if m else ""
            interpreter_ok = bool(exe) and os.access(exe, os.X_OK)
        chained = (d / f"{name}{USER_SUFFIX}").exists()
        rest = _BLOCK_RE.sub("", text)
        own = chained or not (_is_empty_script(rest) or DISPATCHER_MARK in text)
        out.append(
            HookStatus(name, path, present and problem is None, interpreter_ok, own, problem)
        )
    return out
