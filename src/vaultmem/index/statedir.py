"""The vault's state folder under .git/vaultmem: the writer lock, the pending mark, the hook log
and the backlog drainer's progress file.

Design decision: the vault has one writer at a time, and "is someone writing?" has one answer.
Every Python holder or prober of `ingest.lock` goes through `hold_lock` / `lock_is_held`, which
use portalocker's exclusive lock: on POSIX that is flock(2), the very lock the git hooks' shell
block probes with the flock(1) command (`git_hooks.render_block`), so a hook, an ingester and a
reader all see the same lock. flock is released by the kernel the moment a holder dies, so a
crash never leaves the vault locked.

Kept apart from `ingest` (which pulls in the embedders and the store) so that readers, which
only mark a pass as pending and probe the lock (`freshness.start_catch_up`), stay light.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import portalocker

from ..dburl import redact_url
from ..errors import VaultmemError
from ..files import atomic_write, open_regular, read_regular, refusal, touch
from ..terminal import clean
from . import gitdiff


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
        a background run steps aside for it (`Writer.waited_for`)."""
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


# --- the lock ----------------------------------------------------------------------------------


@contextlib.contextmanager
def hold_lock(path: Path, *, wait: bool) -> Iterator[bool]:
    """Hold the exclusive lock on `path` for the block: yields True once it is held (waiting
    for it if `wait`), False at once, holding nothing, when another process has it and `wait`
    is False."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    fh = open(fd, "a")  # noqa: SIM115 - closed below, after unlocking
    flags = portalocker.LockFlags.EXCLUSIVE
    if not wait:
        flags |= portalocker.LockFlags.NON_BLOCKING
    try:
        portalocker.lock(fh, flags)
    except portalocker.LockException:
        fh.close()
        yield False
        return
    try:
        yield True
    finally:
        portalocker.unlock(fh)
        fh.close()


def lock_is_held(path: Path) -> bool:
    """True if some holder has the lock on `path` right now (a probe: the lock is taken and
    released at once, never waited for). Another holder in this very process counts too."""
    with hold_lock(path, wait=False) as held:
        return not held


@dataclass(frozen=True)
class Writer:
    """The vault's single writer, while `writer()` holds the lock.

    Triggers that find the lock taken leave the "pending" mark instead of waiting; the holder
    takes the mark (`take_pending`) before each pass and checks `pending()` when it is done, so
    a commit that lands mid-run is never lost."""

    files: StateFiles

    def take_pending(self) -> bool:
        """True if a pass was requested since the last take; clears the request."""
        try:
            self.files.pending.unlink()  # removes a link itself, never what it points to
        except FileNotFoundError:
            return False
        return True

    def pending(self) -> bool:
        return self.files.pending.exists()

    def waited_for(self) -> bool:
        """True while a foreground command waits for the lock: a background drainer finishes
        its batch and lets it in (the embedding goes on after it, or by it)."""
        return _waiter(self.files) is not None


@contextlib.contextmanager
def writer(files: StateFiles, *, wait: bool, foreground: bool = False) -> Iterator[Writer | None]:
    """Hold the vault's writer lock; yields None at once if it is taken and `wait` is False.

    The one entry to the write path: ingest, rebuild, a saved changes file and audit decisions
    all run under it. A `foreground` writer that has to wait says so (the `waiting` mark), and
    a background drainer holding the lock steps aside for it at its next batch."""
    announced = False
    if wait and foreground:
        with hold_lock(files.lock, wait=False) as held:
            free = held
        if not free:
            with contextlib.suppress(OSError, VaultmemError):
                atomic_write(files.waiting, str(os.getpid()))
                announced = True
    try:
        with hold_lock(files.lock, wait=wait) as held:
            if announced:
                _drop_waiting(files)
                announced = False
            yield Writer(files) if held else None
    finally:
        if announced:
            _drop_waiting(files)


def _waiter(files: StateFiles) -> int | None:
    """The pid of a live process (not this one) waiting for the lock, else None."""
    try:
        raw = read_regular(files.waiting, limit=32)
        pid = int(raw or b"")
        if pid == os.getpid():
            return None
        os.kill(pid, 0)
    except (OSError, ValueError, VaultmemError):
        return None
    return pid


def _drop_waiting(files: StateFiles) -> None:
    """Remove the waiting mark if it is this process's (another waiter may have replaced it)."""
    with contextlib.suppress(OSError, ValueError, VaultmemError):
        if int(read_regular(files.waiting, limit=32) or b"") == os.getpid():
            files.waiting.unlink()


def wait_until_let_in(files: StateFiles, limit: float = 30.0) -> None:
    """After stepping aside: give the waiting writer the time to take the lock (its mark goes
    when it has), so this process does not win the lock straight back."""
    deadline = time.monotonic() + limit
    while _waiter(files) is not None and time.monotonic() < deadline:
        time.sleep(0.05)


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
