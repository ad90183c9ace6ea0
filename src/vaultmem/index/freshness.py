"""Readers notice a HEAD that moved without a hook (reset, checkout, update-ref) and never hand out
a note that HEAD no longer holds.

Design decision: the check must cost nothing when the index is current, because the per-prompt
hook runs it for every prompt. So HEAD is read from the ref files themselves (`.git/HEAD`, the
loose ref, `packed-refs`), with no git process; only when it differs from the watermark does a
reader pay for one `git cat-file --batch-check` over its hits (to drop those whose path and blob
are no longer at HEAD) and start the same detached catch-up a git hook would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..store.db import Conn

_SHA_RE = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_REF_DEPTH = 5


def _git_dir(root: Path) -> Path | None:
    dot = root / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8").strip()  # a worktree or submodule: "gitdir: X"
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:") :].strip())
    return target if target.is_absolute() else (root / target).resolve()


def _common_dir(git_dir: Path) -> Path:
    try:
        rel = (git_dir / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return git_dir
    return (git_dir / rel).resolve() if not Path(rel).is_absolute() else Path(rel)


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    common = _common_dir(git_dir)
    for _ in range(_REF_DEPTH):
        for base in (git_dir, common):
            try:
                value = (base / ref).read_text(encoding="utf-8").strip()
            except (OSError, ValueError):
                continue
            if value.startswith("ref:"):
                ref = value[4:].strip()
                break
            return value if _SHA_RE.match(value) else None
        else:
            return _packed_ref(common, ref)
    return None


def _packed_ref(common: Path, ref: str) -> str | None:
    try:
        with open(common / "packed-refs", encoding="utf-8") as fh:
            for line in fh:
                sha, _, name = line.rstrip("\n").partition(" ")
                if name == ref and _SHA_RE.match(sha):
                    return sha
    except OSError:
        return None
    return None


def read_head(root: Path) -> str | None:
    """The commit HEAD names, read from the ref files (no git process); None when it cannot be
    read that way (unborn branch, reftable, an odd layout): the caller then asks git."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if _SHA_RE.match(head):
        return head  # detached
    if head.startswith("ref:"):
        return _resolve_ref(git_dir, head[4:].strip())
    return None


def _unborn(root: Path) -> bool:
    """True when HEAD names a branch that has no commit yet, in the files-backend layout (a
    reftable repository keeps its refs elsewhere: then this is False and git is asked)."""
    git_dir = _git_dir(root)
    if git_dir is None or (_common_dir(git_dir) / "reftable").exists():
        return False
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return head.startswith("ref:") and _resolve_ref(git_dir, head[4:].strip()) is None


def head_moved(root: Path, watermark: str | None) -> str | None:
    """HEAD's commit if it is not the watermark (the index is behind), else None."""
    head = read_head(root)
    if head is None and _unborn(root):
        return None  # no commit yet: nothing can have moved
    if head is None:
        from ..errors import VaultmemError
        from .gitdiff import head_commit

        try:
            head = head_commit(root)
        except (VaultmemError, OSError):
            return None
    if head is None or head == watermark:
        return None
    return head


def blobs_at(root: Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """path -> blob sha at `commit`, for the `paths` it holds (one git process)."""
    if not paths:
        return {}
    lines = "".join(f"{commit}:{p}\n" for p in paths if "\n" not in p)
    proc = subprocess.run(
        ["git", "-C", os.fspath(root), "cat-file", "--batch-check=%(objectname) %(objecttype)"],
        input=lines.encode("utf-8", "surrogateescape"),
        capture_output=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )
    out: dict[str, str] = {}
    wanted = [p for p in paths if "\n" not in p]
    for path, line in zip(
        wanted, proc.stdout.decode("ascii", "replace").splitlines(), strict=False
    ):
        sha, _, kind = line.partition(" ")
        if kind == "blob":
            out[path] = sha
    return out


class _HasPath(Protocol):
    @property
    def path(self) -> str: ...


H = TypeVar("H", bound=_HasPath)


def drop_stale(conn: Conn, vault_id: int, root: Path, head: str, hits: Sequence[H]) -> list[H]:
    """The hits whose note is still at HEAD with the blob the index holds."""
    from .. import store

    paths = [h.path for h in hits]
    if not paths:
        return []
    indexed = store.indexed_blobs(conn, vault_id, paths)
    conn.commit()
    current = blobs_at(root, head, paths)
    return [h for h in hits if current.get(h.path) == indexed.get(h.path)]


def start_catch_up(root: Path, config: Path | None = None) -> bool:
    """Start the catch-up a git hook would (detached, low priority, logged under .git);
    True if it was started. Never raises: a reader must not fail for it."""
    try:
        from ..files import open_regular
        from .statedir import state_files
        from .writer_lock import lock_is_held

        files = state_files(root)
        files.mark_pending()
        # A running ingester sees the pending mark and loops: do not start a second Python.
        if lock_is_held(files.lock):
            return False
        cmd = [sys.executable, "-m", "vaultmem", "ingest", "--from-hook"]
        if config is not None:
            cmd += ["--config", os.fspath(config)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        log_fd = open_regular(files.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(log_fd, "ab") as log:
            subprocess.Popen(
                cmd,
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        return True
    except (OSError, ValueError, Exception):  # noqa: BLE001 - best effort by design
        return False


def fresh_hits(
    conn: Conn, vault_id: int, root: Path, watermark: str | None, hits: Sequence[Any]
) -> list[Any]:
    """`hits` as HEAD holds them: when HEAD moved past the index, stale hits are dropped and a
    background catch-up is started."""
    head = head_moved(root, watermark)
    if head is None:
        return list(hits)
    from ..vaults import config_path

    start_catch_up(root, config_path())
    return drop_stale(conn, vault_id, root, head, hits)
