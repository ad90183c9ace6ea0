"""Commit one agent-written file into a vault without touching the user's work.

Design decision: the commit is built through a private index (`GIT_INDEX_FILE` in a temporary
file seeded from HEAD), so the user's staged changes are never part of it; `git commit-tree`
gives the commit a distinct author and a trailer, and `git update-ref NEW OLD` moves the branch
only if nobody else moved it meanwhile (compare-and-swap on the ref). The ref moves only while
vaultmem holds the real index's `index.lock`, as `git commit` does, and no `git commit` of the
user's is running (a plain one lets go of index.lock while its editor is open, and would fail
if HEAD moved under it): a user's commit in progress makes the write wait briefly, then refuse
with nothing moved. Under that lock the user's index is updated for that one path (a copy
changed through GIT_INDEX_FILE, renamed over the index the way git commits a lock file) and the
file is written; a refusal before the ref moves leaves HEAD, the index and the work tree
exactly as they were. Nothing the user has
on disk is ever replaced: a target that exists but is not committed (untracked, ignored,
excluded), is hidden from `git status` (skip-worktree, assume-unchanged) or has uncommitted
edits, or a folder on its way that is a file, is refused before anything changes. Writers of
one vault are serialised by a lock in its state folder, so concurrent writes land in order.
Content compare-and-swap: replacing an existing file needs the blob id the caller last read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import SymlinkRefused, VaultmemError
from ..files import atomic_write
from .statedir import state_files
from .writer_lock import hold_lock

AGENT_NAME = "vaultmem agent"
AGENT_EMAIL = "agent@vaultmem.invalid"
TRAILER = "Vaultmem-Agent"


class WriteRefused(VaultmemError):
    """An agent write was refused (the repository is mid-operation, the path has the user's
    edits, the note changed since it was read, ...); nothing was written or committed."""

    exit_code = 9


@dataclass(frozen=True)
class Written:
    path: str
    blob: str  # "" when the write removed the file
    commit: str
    previous_blob: str | None


def _git(
    root: Path, *args: str, data: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    proc = subprocess.run(
        ["git", "-C", str(root), *args],
        input=data,
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise WriteRefused(f"git {args[0]} failed: {_last_said(proc)}")
    return proc.stdout.decode(errors="surrogateescape").strip()


def _last_said(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The last line git wrote to stderr (its reason), else its exit status."""
    lines = proc.stderr.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else str(proc.returncode)


def _git_dir(root: Path) -> Path:
    return Path(_git(root, "rev-parse", "--absolute-git-dir"))


def _refuse_mid_operation(git_dir: Path) -> None:
    for name, what in (
        ("MERGE_HEAD", "a merge"),
        ("rebase-merge", "a rebase"),
        ("rebase-apply", "a rebase"),
        ("BISECT_LOG", "a bisect"),
        ("CHERRY_PICK_HEAD", "a cherry-pick"),
        ("REVERT_HEAD", "a revert"),
    ):
        if (git_dir / name).exists():
            raise WriteRefused(f"the vault is in the middle of {what}: finish or abort it first")


def _check_path(root: Path, path: str) -> None:
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts or parts[0] == ".git":
        raise WriteRefused(f"{path!r} is not a plain path inside the vault")
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink():
            raise WriteRefused(f"{path} would go through a symbolic link ({here}): refused")


def blob_at_head(root: Path, path: str) -> str | None:
    """The blob id of `path` in HEAD's tree, or None when HEAD has no such file."""
    out = _git(root, "ls-tree", "HEAD", "--", path)
    if not out:
        return None
    meta = out.split("\t", 1)[0].split()
    return meta[2] if meta[1] == "blob" else None


def read_at_head(root: Path, path: str) -> bytes | None:
    blob = blob_at_head(root, path)
    if blob is None:
        return None
    return subprocess.run(
        ["git", "-C", str(root), "cat-file", "blob", blob], capture_output=True, check=True
    ).stdout


def _path_is_dirty(root: Path, path: str) -> bool:
    out = _git(root, "status", "--porcelain", "--untracked-files=all", "--", path)
    return bool(out)


@contextlib.contextmanager
def _index_lock(root: Path, git_dir: Path, tries: int = 20, pause: float = 0.05) -> Iterator[Path]:
    """Hold the real index's lock the way git does (O_EXCL on index.lock), retrying briefly,
    and only while no `git commit` of the user's is running in the vault; yields the lock
    file's path (renaming it over the index commits a new index)."""
    lock = git_dir / "index.lock"
    committing = False
    for _ in range(tries):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            time.sleep(pause)
            continue
        os.close(fd)
        # A plain `git commit` writes the index and lets go of index.lock before it opens the
        # message editor, then moves HEAD expecting the value it read first: moving HEAD now
        # would abort it. Checked under the lock, so no commit can start after the check.
        committing = _git_commit_running(root)
        if committing:
            lock.unlink()
            time.sleep(pause)
            continue
        try:
            yield lock
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
        return
    if committing:
        raise WriteRefused(
            "a `git commit` is in progress in the vault (its message editor open?): nothing "
            "was written; try again when it is done"
        )
    raise WriteRefused(
        "the vault's index.lock is held by another git command (a commit in progress?): "
        "nothing was written; try again when it is done"
    )


def _git_commit_running(root: Path) -> bool:
    """Whether a `git commit` process runs in this work tree (its directory, or its `-C`, inside
    `root`). Read from /proc, so only where there is one (Linux): elsewhere False, and only a
    commit that holds index.lock (`commit -a`, `commit PATH`) makes a write wait."""
    try:
        entries = [e for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return False
    for entry in entries:
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            where = _git_commit_dir(argv)
            if where is None:
                continue
            here = Path(os.readlink(Path(entry.path, "cwd"))) / where
        except OSError:
            continue  # gone meanwhile, or another user's
        here = Path(os.path.normpath(here))
        if here == root or root in here.parents:
            return True
    return False


# git's options that take the next argument as their value, before the subcommand.
_GIT_OPTIONS_WITH_VALUE = {b"-C", b"-c", b"--git-dir", b"--work-tree", b"--namespace"}


def _git_commit_dir(argv: list[bytes]) -> str | None:
    """For a `git ... commit ...` command line, the directory it runs in relative to its
    working directory (its `-C` options joined, "." without); None for anything else."""
    if not argv or os.path.basename(argv[0]) != b"git":
        return None
    where = "."
    args = iter(argv[1:])
    for arg in args:
        if arg in _GIT_OPTIONS_WITH_VALUE:
            value = next(args, b"")
            if arg == b"-C":
                where = os.path.join(where, os.fsdecode(value))
        elif not arg.startswith(b"-"):
            return os.path.normpath(where) if arg == b"commit" else None
    return None


def _refuse_what_git_hides(root: Path, path: str, at_head: str | None) -> None:
    """Refuse, before anything changes, a target the user has on disk in a form a write would
    replace without `git status` showing it: a folder on the way that is a file, an
    uncommitted (untracked, ignored or excluded) file where a new note would go, or a tracked
    file git is told not to look at (skip-worktree, assume-unchanged)."""
    here = root
    parts = Path(path).parts
    for part in parts[:-1]:
        here = here / part
        if os.path.lexists(here) and not here.is_dir():
            raise WriteRefused(
                f"{here.relative_to(root)} is a file where the note's folder would be: nothing "
                "was written; move it or choose another folder"
            )
    target = root / path
    if at_head is None and os.path.lexists(target):
        raise WriteRefused(
            f"{path} already exists in the vault's folder but is not committed (untracked, or "
            "ignored by .gitignore): nothing was written; move it away or commit it first"
        )
    if at_head is not None:
        tag = _git(root, "ls-files", "-v", "--", path)[:1]
        if tag == "S" or (tag.isalpha() and tag.islower()):
            raise WriteRefused(
                f"{path} is marked skip-worktree or assume-unchanged, so git would not show "
                "your edits to it: nothing was written; clear the mark first"
            )


def commit_file(
    root: Path,
    path: str,
    data: bytes | None,
    *,
    expect_blob: str | None,
    message: str,
    trailer_value: str = "remember",
) -> Written:
    """Commit `data` as `path` on the current branch through a private index.

    `expect_blob` must be the blob id of `path` at HEAD when the file exists (None when it
    must not exist yet); otherwise the write is refused. `data` None removes the file (an
    inbox revert of a note the agent created), under the same checks. Refuses mid-merge/
    rebase/bisect/cherry-pick, on a detached HEAD, when `path` has uncommitted edits or goes
    through a link."""
    root = Path(_git(root, "rev-parse", "--show-toplevel"))
    git_dir = _git_dir(root)
    _check_path(root, path)
    with hold_lock(state_files(root).dir / "gitwrite.lock", wait=True):
        for _ in range(CAS_TRIES):
            written = _try_commit(root, git_dir, path, data, expect_blob, message, trailer_value)
            if written is not None:
                return written
        raise WriteRefused(
            f"HEAD kept moving while the note was committed ({CAS_TRIES} tries): nothing was "
            "written; try again"
        )


# How often a write is tried again, every check included, when HEAD moved between reading it
# and moving it (a user committing, pulling or resetting at that moment).
CAS_TRIES = 5


def _try_commit(
    root: Path,
    git_dir: Path,
    path: str,
    data: bytes | None,
    expect_blob: str | None,
    message: str,
    trailer_value: str,
) -> Written | None:
    """One try of `commit_file` (under the writer lock): the Written, or None when HEAD moved
    before the ref could be swapped (nothing was changed)."""
    _refuse_mid_operation(git_dir)
    proc = subprocess.run(
        ["git", "-C", str(root), "symbolic-ref", "-q", "HEAD"], capture_output=True
    )
    if proc.returncode != 0:
        raise WriteRefused("HEAD is detached: check out a branch before the agent writes")
    ref = proc.stdout.decode().strip()
    old = _git(root, "rev-parse", "-q", "--verify", "HEAD")
    current = blob_at_head(root, path)
    if current != expect_blob:
        if current is None:
            raise WriteRefused(f"{path} does not exist at HEAD (it was moved or removed)")
        raise WriteRefused(
            f"{path} changed since it was read (blob {current[:12]}, expected "
            f"{(expect_blob or 'none')[:12]}): read it again, or add to it with --append"
        )
    _refuse_what_git_hides(root, path, current)
    if _path_is_dirty(root, path):
        raise WriteRefused(f"{path} has uncommitted edits: commit or discard them first")
    if data is None and current is None:
        raise WriteRefused(f"{path} does not exist at HEAD: there is nothing to remove")
    blob = "" if data is None else _git(root, "hash-object", "-w", "--stdin", data=data)
    entry = (
        ["--force-remove", "--", path]
        if data is None
        else ["--add", "--cacheinfo", f"100644,{blob},{path}"]
    )
    with tempfile.TemporaryDirectory(prefix="vaultmem-index-") as tmp:
        env = dict(os.environ, GIT_INDEX_FILE=str(Path(tmp) / "index"))
        env.update(
            GIT_AUTHOR_NAME=AGENT_NAME,
            GIT_AUTHOR_EMAIL=AGENT_EMAIL,
            GIT_COMMITTER_NAME=AGENT_NAME,
            GIT_COMMITTER_EMAIL=AGENT_EMAIL,
        )
        _git(root, "read-tree", old, env=env)
        _git(root, "update-index", *entry, env=env)
        tree = _git(root, "write-tree", env=env)
        body = f"{message}\n\n{TRAILER}: {trailer_value}\n"
        body = _run_commit_hooks(root, env, body, Path(tmp))
        sign = ["-S"] if _wants_signing(root) else []
        made = subprocess.run(
            ["git", "-C", str(root), "commit-tree", *sign, tree, "-p", old],
            input=body.encode(),
            capture_output=True,
            env=env,
        )
        if made.returncode != 0:
            if sign:
                raise WriteRefused(
                    "commit.gpgsign is set in this vault but the agent's commit could not be "
                    f"signed ({_last_said(made)}): nothing was written; "
                    "make signing work without a prompt, or unset commit.gpgsign for the vault"
                )
            raise WriteRefused(f"git commit-tree failed: {_last_said(made)}")
        commit = made.stdout.decode().strip()
    with _index_lock(root, git_dir) as lock, tempfile.TemporaryDirectory() as tmp:
        # The user's index as it is now (under its lock), with this one path's new entry.
        staged = Path(tmp) / "index"
        if (git_dir / "index").exists():
            shutil.copyfile(git_dir / "index", staged)
        env = dict(os.environ, GIT_INDEX_FILE=str(staged))
        _git(root, "update-index", *entry, env=env)
        # Only now does the ref move (compare-and-swap); a refusal above left everything as
        # it was, and so does a HEAD that moved meanwhile (the caller tries again).
        moved = subprocess.run(
            ["git", "-C", str(root), "update-ref", "-m", f"vaultmem: {message}", ref, commit, old],
            capture_output=True,
        )
        if moved.returncode != 0:
            if _git(root, "rev-parse", "-q", "--verify", "HEAD") != old:
                return None
            raise WriteRefused(f"git update-ref failed: {_last_said(moved)}")
        try:
            if data is None:
                with contextlib.suppress(FileNotFoundError):
                    (root / path).unlink()  # clean (checked above), never a link on its way
            else:
                _write_file(root, path, data)
        except (OSError, WriteRefused) as exc:
            # The user changed the path since it was checked (a file made where the note's
            # folder goes, say): the ref goes back, so a refusal still means nothing landed.
            subprocess.run(
                ["git", "-C", str(root), "update-ref", "-m", "vaultmem: undone", ref, old, commit],
                capture_output=True,
            )
            raise WriteRefused(
                f"{path} could not be written ({_reason(exc)}): nothing was written; check "
                "what is at that path and try again"
            ) from None
        shutil.copyfile(staged, lock)
        os.replace(lock, git_dir / "index")  # git's own way to commit an index
    # The new entry's file stat is refreshed once the lock is released (best effort).
    if data is None:
        return Written(path, blob, commit, current)
    subprocess.run(
        ["git", "-C", str(root), "update-index", "-q", "--refresh", "--", path],
        capture_output=True,
    )
    return Written(path, blob, commit, current)


def _wants_signing(root: Path) -> bool:
    """Whether the user's configuration signs commits here (`commit.gpgsign`)."""
    proc = subprocess.run(
        ["git", "-C", str(root), "config", "--type=bool", "commit.gpgsign"], capture_output=True
    )
    return proc.stdout.decode().strip() == "true"


def _run_commit_hooks(root: Path, env: dict[str, str], body: str, tmp: Path) -> str:
    """Run the repository's `pre-commit` and `commit-msg` hooks against the agent's commit, as
    `git commit` runs them (the commit's own index in GIT_INDEX_FILE, the message in a file
    the hook may edit): a hook that fails refuses the write with its output. The message,
    as the hooks left it."""
    hook_env = dict(env, GIT_EDITOR=":")
    ran = subprocess.run(
        ["git", "-C", str(root), "hook", "run", "--ignore-missing", "pre-commit"],
        capture_output=True,
        env=hook_env,
    )
    if ran.returncode != 0:
        raise WriteRefused(_hook_refusal("pre-commit", ran))
    message = tmp / "COMMIT_EDITMSG"
    message.write_text(body, encoding="utf-8")
    ran = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "hook",
            "run",
            "--ignore-missing",
            "commit-msg",
            "--",
            str(message),
        ],
        capture_output=True,
        env=hook_env,
    )
    if ran.returncode != 0:
        raise WriteRefused(_hook_refusal("commit-msg", ran))
    edited = message.read_text(encoding="utf-8", errors="replace")
    return edited if edited.strip() else body


def _hook_refusal(hook: str, ran: subprocess.CompletedProcess[bytes]) -> str:
    said = (ran.stdout + ran.stderr).decode(errors="replace").strip().splitlines()
    tail = " / ".join(line.strip() for line in said[-3:] if line.strip())
    return (
        f"the vault's {hook} hook refused the agent's commit (exit {ran.returncode}"
        + (f": {tail[:300]}" if tail else "")
        + "): nothing was written"
    )


def _reason(exc: BaseException) -> str:
    """An OSError's reason without its absolute path (the message may reach an MCP client)."""
    return (exc.strerror or type(exc).__name__) if isinstance(exc, OSError) else str(exc)


def _write_file(root: Path, path: str, data: bytes) -> None:
    """Write the committed file into the work tree (its path was checked free or clean above,
    under the writer lock), created with the user's umask as git creates files, never through
    a link among its folders."""
    try:
        atomic_write(root / path, data, below=root, umask=True)
    except SymlinkRefused:
        raise WriteRefused(f"{path} would go through a symbolic link: refused") from None
