"""Git plumbing: what changed between two commits, and the bytes of blobs. No database.

Design decision: everything goes through git's NUL-separated plumbing output (`-z`), run as an
argument list (never a shell), and paths are decoded with `os.fsdecode`, so every file name a
filesystem allows (newlines, quotes, leading dashes, emoji, CJK) round-trips exactly. The
repository is chosen by the `repo` argument alone: variables such as GIT_DIR that git sets while
running hooks are removed from the child environment so they cannot point git elsewhere.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, NamedTuple

from ..errors import BlobMissing, GitError, NotAGitRepo

STATUSES = frozenset("AMTDRC")
DELETED_MODE = "000000"
SYMLINK_MODE = "120000"
SUBMODULE_MODE = "160000"

# Set by git for hooks (relative to the hook's cwd); they would override `repo`.
_REPO_ENV_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_PREFIX",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
)
_SHA_RE = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")
# A commit header line in `git diff-tree <commit>` output, also the `-m` form "sha (from sha)".
_COMMIT_LINE_RE = re.compile(rb"\s*[0-9a-f]{40}(?:[0-9a-f]{24})?(?: \(from [0-9a-f]+\))?\s*")
_RAW_RE = re.compile(
    rb":(?P<old_mode>[0-7]{6}) (?P<new_mode>[0-7]{6}) (?P<old_blob>[0-9a-f]+)"
    rb" (?P<new_blob>[0-9a-f]+) (?P<status>[A-Z])(?P<score>[0-9]*)"
)


@dataclass(frozen=True)
class Change:
    """One path that differs between two trees, as `git diff-tree --raw` reports it."""

    status: str  # "A", "M", "T", "D", "R" or "C" (similarity score stripped)
    path: str  # new path (for D: the deleted path)
    old_path: str | None  # for R/C: the source path; None otherwise
    mode: str  # new mode; "120000" symlink, "160000" submodule, "000000" for D
    blob: str | None  # new blob sha; None for D


class TreeEntry(NamedTuple):
    """One file of a commit's tree: its path, git mode and blob (or submodule commit) sha."""

    path: str
    mode: str
    blob: str


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in _REPO_ENV_VARS:
        env.pop(name, None)
    return env


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else ""


def _check_rev(rev: str) -> None:
    # A revision starting with '-' would be read as an option.
    if not rev or rev.startswith("-") or any(c.isspace() for c in rev):
        raise GitError(f"invalid git revision {rev!r}: expected a commit sha")


@functools.cache
def _private_dir() -> tempfile.TemporaryDirectory[str]:
    """An empty directory of this process's own (removed at exit): no other user can put a
    file in it."""
    return tempfile.TemporaryDirectory(prefix="vaultmem-no-index-")


def _git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    trees_only: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """Run `git -C repo args...` and return the completed process (bytes output).

    `trees_only`: the command compares commits and needs nothing from the staging area, so git
    is pointed at an index file that does not exist (an empty one). diff-tree reads the index
    at start-up although its output does not depend on it: 5 ms of its 7 for a one-file commit
    in a 50,000-note vault (4.4 MB of index), against 2.7 ms without."""
    cmd = ["git", "-c", "core.quotepath=off", "-C", os.fspath(repo), *args]
    env = _env()
    if trees_only:
        env["GIT_INDEX_FILE"] = os.path.join(_private_dir().name, "index")
    try:
        proc = subprocess.run(cmd, input=input, capture_output=True, env=env, check=False)
    except FileNotFoundError as exc:
        raise GitError("git is not installed or not on PATH: install git and retry") from exc
    if check and proc.returncode != 0:
        detail = _first_line(proc.stderr) or f"exit code {proc.returncode}"
        raise GitError(f"git {args[0]} failed in {repo}: {detail}")
    return proc


def _strip_newline(out: bytes) -> bytes:
    # Only the one terminating newline: a path may itself end in a newline.
    return out[:-1] if out.endswith(b"\n") else out


def repo_root(path: Path) -> Path:
    """The top-level working directory of the git repository containing `path`."""
    path = Path(path)
    if not path.exists():
        raise NotAGitRepo(f"{path} does not exist: pass the path of your vault")
    start = path if path.is_dir() else path.parent
    proc = _git(start, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        # A bare repository (a team's remote on a server) has no work tree, and needs none:
        # every content is read from the commits (the source of a shared vault).
        bare = _git(start, "rev-parse", "--is-bare-repository", check=False)
        if bare.returncode == 0 and bare.stdout.strip() == b"true":
            return git_dir(start)
        raise NotAGitRepo(
            f"{path} is not inside a git repository (with a working tree): "
            f"run `git init` in your vault, or pass the vault's path"
        )
    return Path(os.fsdecode(_strip_newline(proc.stdout)))


def git_dir(repo: Path) -> Path:
    """The absolute git directory of `repo` (for a linked worktree, its own git dir)."""
    proc = _git(repo, "rev-parse", "--absolute-git-dir")
    return Path(os.fsdecode(_strip_newline(proc.stdout)))


def head_commit(repo: Path) -> str | None:
    """The sha HEAD points at, or None on an unborn branch (a repository with no commits)."""
    proc = _git(repo, "rev-parse", "-q", "--verify", "HEAD^{commit}", check=False)
    if proc.returncode == 0:
        return proc.stdout.decode("ascii").strip()
    if proc.stderr.strip():
        raise GitError(f"cannot read HEAD in {repo}: {_first_line(proc.stderr)}")
    return None


def tip_commit(repo: Path, ref: str | None) -> str | None:
    """The commit `ref` names (None: HEAD), or None when it names none yet (an unborn branch,
    a remote branch not fetched)."""
    if ref is None:
        return head_commit(repo)
    _check_rev(ref)
    proc = _git(repo, "rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False)
    if proc.returncode == 0:
        return proc.stdout.decode("ascii").strip()
    return None


def commit_time(repo: Path, sha: str) -> int:
    """The committer timestamp of `sha` (seconds since the epoch)."""
    _check_rev(sha)
    return int(_git(repo, "show", "-s", "--format=%ct", sha).stdout.strip() or 0)


def commit_exists(repo: Path, sha: str) -> bool:
    """True if `sha` names a commit present in `repo` (False after e.g. a history rewrite + gc)."""
    if not sha or sha.startswith("-") or any(c.isspace() for c in sha):
        return False
    proc = _git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False)
    return proc.returncode == 0


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    """True if `ancestor` is reachable from `descendant` (a commit is its own ancestor)."""
    _check_rev(ancestor)
    _check_rev(descendant)
    proc = _git(repo, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if proc.returncode in (0, 1):
        return proc.returncode == 0
    raise GitError(
        f"cannot compare commits {ancestor} and {descendant} in {repo}: "
        f"{_first_line(proc.stderr) or f'exit code {proc.returncode}'}"
    )


def empty_tree(repo: Path) -> str:
    """The empty tree's id in `repo`'s hash algorithm (sha1 or sha256)."""
    proc = _git(repo, "hash-object", "-t", "tree", "--stdin", input=b"")
    return proc.stdout.decode("ascii").strip()


def diff_commits(
    repo: Path,
    old: str | None,
    new: str,
    *,
    copies: bool = False,
    note_extensions: Sequence[str] | None = None,
) -> list[Change]:
    """Changes from commit `old` to commit `new` (old None: everything in `new` is added).

    Renames are detected (`-M`). With `copies=True`, copies from modified files are reported as
    "C" too (`-C`); by default a copy is just an "A". With `note_extensions`, rename detection
    (which reads the changed blobs to compare them) is limited to files with those extensions,
    and every other file is diffed by tree alone: a large attachment, or a blob missing from a
    partial clone, is never read. If even the notes' blobs cannot be read, notes are diffed
    without rename detection (a rename is then a delete and an add).
    """
    if old is not None:
        _check_rev(old)
    _check_rev(new)
    base = empty_tree(repo) if old is None else old
    args = ["diff-tree", "-r", "-z", "--raw", "--no-ext-diff"]
    if note_extensions is None:
        proc = _git(repo, *args, "-M", *(["-C"] if copies else []), base, new, trees_only=True)
        return parse_diff_tree(proc.stdout)
    notes = [f":(icase)*{e}" for e in note_extensions]
    others = [".", *(f":(exclude,icase)*{e}" for e in note_extensions)]
    renames = ["-M", *(["-C"] if copies else [])]
    rest = _git(repo, *args, "--no-renames", base, new, "--", *others, trees_only=True)
    if not notes:
        return parse_diff_tree(rest.stdout)
    proc = _git(repo, *args, *renames, base, new, "--", *notes, check=False, trees_only=True)
    if proc.returncode != 0:
        proc = _git(repo, *args, "--no-renames", base, new, "--", *notes, trees_only=True)
    return parse_diff_tree(proc.stdout) + parse_diff_tree(rest.stdout)


def parse_diff_tree(raw: bytes) -> list[Change]:
    """Parse `git diff-tree -r -z [--raw]` output into Changes. Pure.

    Accepts both the two-tree form (`diff-tree old new`) and the one-commit form
    (`diff-tree --root HEAD`), whose output starts with the commit sha: sha lines are skipped.
    """
    if not raw.strip():
        return []
    fields = raw.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if raw and b"\0" not in raw:
        raise GitError(
            "diff-tree output is not NUL-separated: produce it with `git diff-tree -r -z -M`"
        )
    changes: list[Change] = []
    i = 0
    while i < len(fields):
        header = fields[i]
        i += 1
        if not header.startswith(b":"):
            if _COMMIT_LINE_RE.fullmatch(header) or not header.strip():
                continue
            raise GitError(f"unexpected diff-tree record {header[:80]!r}: expected ':<modes> ...'")
        if header.startswith(b"::"):
            raise GitError("combined (merge) diff-tree output is not supported: diff two commits")
        m = _RAW_RE.fullmatch(header)
        if m is None:
            raise GitError(f"malformed diff-tree record {header[:120]!r}")
        status = m["status"].decode("ascii")
        if status not in STATUSES:
            raise GitError(f"unsupported diff-tree status {status!r} in {header[:120]!r}")
        npaths = 2 if status in "RC" else 1
        if i + npaths > len(fields):
            raise GitError(f"truncated diff-tree output after {header[:120]!r}")
        paths = [os.fsdecode(p) for p in fields[i : i + npaths]]
        i += npaths
        new_mode = m["new_mode"].decode("ascii")
        new_blob = m["new_blob"].decode("ascii")
        if status == "D":
            changes.append(Change("D", paths[0], None, DELETED_MODE, None))
        elif npaths == 2:
            changes.append(Change(status, paths[1], paths[0], new_mode, new_blob))
        else:
            changes.append(Change(status, paths[0], None, new_mode, new_blob))
    return changes


def ls_tree(repo: Path, commit: str) -> dict[str, tuple[str, str]]:
    """Every entry of `commit`'s tree, recursively: path -> (mode, object sha).

    Submodules appear with mode "160000" and their commit sha; the caller decides.
    """
    _check_rev(commit)
    proc = _git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)
    entries: dict[str, tuple[str, str]] = {}
    for record in proc.stdout.split(b"\0"):
        if not record:
            continue
        meta, sep, path = record.partition(b"\t")
        parts = meta.split(b" ")
        if not sep or len(parts) != 3:
            raise GitError(f"malformed ls-tree record {record[:120]!r}")
        entries[os.fsdecode(path)] = (parts[0].decode("ascii"), parts[2].decode("ascii"))
    return entries


def tree_entries(repo: Path, commit: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
    """`ls_tree` for just `paths` (those `commit` holds): path -> (mode, object sha)."""
    _check_rev(commit)
    if not paths:
        return {}
    proc = _git(
        repo, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *(f":(literal){p}" for p in paths)
    )
    entries: dict[str, tuple[str, str]] = {}
    for record in proc.stdout.split(b"\0"):
        meta, sep, path = record.partition(b"\t")
        parts = meta.split(b" ")
        if sep and len(parts) == 3:
            entries[os.fsdecode(path)] = (parts[0].decode("ascii"), parts[2].decode("ascii"))
    return entries


class BlobReader:
    """Reads blobs through one long-lived `git cat-file --batch` process.

    Use as a context manager; not thread-safe (one request at a time on one pipe).
    """

    def __init__(self, repo: Path) -> None:
        self._repo = repo
        # stderr goes to a file, not a pipe, so a chatty git can never block on it.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                ["git", "-C", os.fspath(repo), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=_env(),
            )
        except FileNotFoundError as exc:
            self._stderr.close()
            raise GitError("git is not installed or not on PATH: install git and retry") from exc

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _failure(self, what: str) -> GitError:
        self._stderr.seek(0)
        detail = _first_line(self._stderr.read()) or "git cat-file stopped"
        return GitError(f"cannot read {what} from {self._repo}: {detail}")

    def read(self, blob: str) -> bytes:
        """The content of blob `blob` (any size, any bytes)."""
        proc = self._proc
        if proc is None:
            raise GitError("BlobReader is closed")
        assert proc.stdin is not None and proc.stdout is not None
        if not _SHA_RE.fullmatch(blob.encode("ascii", "replace")):
            raise GitError(f"invalid blob id {blob!r}: expected a full hex sha")
        try:
            proc.stdin.write(blob.encode("ascii") + b"\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._failure(f"blob {blob}") from exc
        header = proc.stdout.readline()
        if not header:
            raise self._failure(f"blob {blob}")
        parts = header.split()
        if len(parts) == 2 and parts[1] == b"missing":
            raise BlobMissing(f"blob {blob} is missing in {self._repo}")
        if len(parts) == 2 and parts[1] == b"ambiguous":
            raise GitError(f"blob {blob} is ambiguous in {self._repo}")
        if len(parts) != 3 or not parts[2].isdigit():
            raise GitError(f"unexpected git cat-file reply {header[:120]!r} for blob {blob}")
        size = int(parts[2])
        data = proc.stdout.read(size)
        trailer = proc.stdout.read(1)
        if len(data) != size or trailer != b"\n":
            raise self._failure(f"blob {blob}")
        if parts[1] != b"blob":
            raise GitError(f"object {blob} is a {parts[1].decode()}, not a blob")
        return data

    def close(self) -> None:
        """Stop the git process (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self._stderr.close()


def tree_entry(repo: Path, commit: str, path: str) -> tuple[str, str] | None:
    """The (mode, object sha) of the file `path` in `commit`'s tree; None when it holds none
    (absent, or a folder). The path is taken literally, never as a pattern."""
    _check_rev(commit)
    proc = _git(repo, "--literal-pathspecs", "ls-tree", "-z", "--full-tree", commit, "--", path)
    for record in proc.stdout.split(b"\0"):
        meta, sep, name = record.partition(b"\t")
        parts = meta.split(b" ")
        if sep and len(parts) == 3 and os.fsdecode(name) == path and parts[1] != b"tree":
            return parts[0].decode("ascii"), parts[2].decode("ascii")
    return None


@dataclass(frozen=True)
class LoggedCommit:
    """One commit of `git log`: its sha, committer date (ISO 8601), subject and the paths its
    diff against its first parent names (none for a merge)."""

    sha: str
    date: str
    subject: str
    paths: tuple[str, ...]


_LOG_START_RE = re.compile(rb"\x01[0-9a-f]{40}(?:[0-9a-f]{24})?")


def recent_commits(repo: Path, commit: str, max_commits: int) -> list[LoggedCommit]:
    """The latest `max_commits` commits reachable from `commit`, newest first, with the paths
    each one changed (deletions included)."""
    _check_rev(commit)
    proc = _git(
        repo,
        "log",
        "-z",
        "--name-only",
        "--no-renames",
        "--format=%x01%H%x00%cI%x00%s",
        f"--max-count={max(1, int(max_commits))}",
        commit,
        "--",
    )
    out: list[LoggedCommit] = []
    fields = proc.stdout.split(b"\0")
    i = 0
    while i < len(fields):
        if not _LOG_START_RE.fullmatch(fields[i]) or i + 2 >= len(fields):
            i += 1
            continue
        sha, date, subject = fields[i][1:], fields[i + 1], fields[i + 2]
        i += 3
        paths: list[str] = []
        while i < len(fields) and not _LOG_START_RE.fullmatch(fields[i]):
            name = fields[i][1:] if not paths and fields[i].startswith(b"\n") else fields[i]
            if name:
                paths.append(os.fsdecode(name))
            i += 1
        out.append(
            LoggedCommit(
                sha.decode("ascii"),
                date.decode("ascii", "replace"),
                subject.decode("utf-8", "replace"),
                tuple(paths),
            )
        )
    return out
