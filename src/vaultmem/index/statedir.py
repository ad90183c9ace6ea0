"""The vault's state folder under .git/vaultmem: where its files are (the writer lock's file,
the pending mark, the waiting mark, the hook log) and what other processes read from it (the
backlog drainer's progress, the hook log).

The lock itself is `writer_lock`. Kept apart from `ingest` (which pulls in the embedders and
the store) so that readers, which only mark a pass as pending and probe the lock
(`freshness.start_catch_up`), stay light.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..dburl import redact_url
from ..errors import VaultmemError
from ..files import atomic_write, open_regular, read_regular, refusal, touch
from ..terminal import clean
from . import gitdiff
from .writer_lock import lock_is_held


@dataclass(frozen=True)
class StateFiles:
    dir: Path

    @property
    def lock(self) -> Path:
        return self.dir / "ingest.lock"

    @property
    def pending(self) -> Path:
        return self.dir / "pending"

    @property
    def log(self) -> Path:
        return self.dir / "ingest.log"

    @property
    def starting(self) -> Path:
        """Set by a git hook that started an ingester, until that ingester holds the lock."""
        return self.dir / "starting"

    @property
    def waiting(self) -> Path:
        """Set by a command in the foreground (rebuild, init, audit) while it waits for the lock:
        a background run steps aside for it (`writer_lock.Writer.waited_for`)."""
        return self.dir / "waiting"

    def mark_pending(self) -> None:
        """Ask the writer for another pass (never through a symbolic link)."""
        touch(self.pending)


def state_files(root: Path) -> StateFiles:
    """The vault's state folder under .git, private to its owner (0700): the log names notes
    and errors, and nobody else on the machine has any business reading it. Its files are
    never read or written through a symbolic link (files.py); a linked folder is refused."""
    d = gitdiff.git_dir(root) / "vaultmem"
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700, parents=True)
    st = d.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise refusal(d, "remove the link; vaultmem recreates the folder")
    with contextlib.suppress(OSError):  # a folder we do not own is left as it is
        if st.st_mode & 0o077:
            d.chmod(0o700)
    return StateFiles(d)


# --- what other processes read: progress and the hook log ---------------------------------------


def duration(seconds: float) -> str:
    """A time left for people (`vaultmem status`, `init`, the ui's overview): seconds, minutes
    or hours, whichever reads best."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


class ProgressFile:
    """The live state of an embedding backlog drain, for `vaultmem status` (another process).

    A small JSON file under .git/vaultmem, rewritten at most every PROGRESS_EVERY seconds:
    the drainer's pid, when it started, chunks done of the total and the smoothed rate."""

    PROGRESS_EVERY = 1.0

    def __init__(self, files: StateFiles) -> None:
        self.path = files.dir / "progress.json"
        self.started = time.time()
        self._last = 0.0

    def update(self, *, done: int, total: int, rate: float | None, final: bool = False) -> None:
        now = time.time()
        if not final and now - self._last < self.PROGRESS_EVERY:
            return
        self._last = now
        data = {
            "pid": os.getpid(),
            "started_at": self.started,
            "updated_at": now,
            "done": done,
            "total": total,
            "rate": rate,
            "finished": final,
        }
        with contextlib.suppress(OSError, VaultmemError):  # a linked file: not written
            atomic_write(self.path, json.dumps(data))

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def read_progress(root: Path) -> dict[str, Any] | None:
    """The running drainer's progress (see ProgressFile), or None if no drainer is alive."""
    try:
        path = gitdiff.git_dir(root) / "vaultmem" / "progress.json"
        raw = read_regular(path, below=path.parent.parent)
        if raw is None:
            return None
        data = json.loads(raw.decode("utf-8"))
        os.kill(int(data["pid"]), 0)  # alive?
    except (OSError, ValueError, KeyError, TypeError, VaultmemError):
        return None
    if not isinstance(data, dict) or data.get("finished"):
        return None
    return data


def wait_for_rate(root: Path, limit: float, grace: float = 5.0) -> dict[str, Any] | None:
    """The running drainer's progress once it has measured its rate (chunks/s), waiting up to
    `limit` seconds; None when it finished first, when none holds the lock `grace` seconds
    on (a drainer just started takes a moment to), or when no rate came in time."""
    now = time.monotonic()
    deadline, grace_ends = now + limit, now + grace
    seen = False
    while time.monotonic() < deadline:
        live = read_progress(root)
        if live is not None:
            seen = True
            if live.get("rate"):
                return live
        elif seen:
            return None  # it reported progress, and reports none now: it is done
        elif time.monotonic() > grace_ends and not lock_is_held(state_files(root).lock):
            return None  # no drainer at all (or one that finished before reporting)
        time.sleep(0.2)
    return None


def log_line(state: StateFiles, message: str) -> None:
    """Append one line to the hook log (0600): passwords hidden, control characters escaped."""
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    line = clean(redact_url(message), newlines=False)
    fd = open_regular(state.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)  # the hook's shell may have created it with the umask's mode
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(f"{stamp} pid={os.getpid()} {line}\n")
