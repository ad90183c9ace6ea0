"""The vault's writer lock: a file lock on .git/vaultmem/ingest.lock, held by the one process
on this machine that writes the vault's index.

What it guards: the write path of one vault on this machine (ingest, rebuild, a saved changes
file, audit decisions all run under `writer`). Why a file lock: a git hook must see, without
starting Python, that an ingester is running and will pick up its commit (the pending mark),
and only the kernel's lock answers that for a shell. Every Python holder or prober goes
through `hold_lock` / `lock_is_held`, which use portalocker's exclusive lock: on POSIX that is
flock(2), the very lock the git hooks' shell block probes with the flock(1) command
(`git_hooks.render_block`), so a hook, an ingester and a reader all see the same lock. flock
is released by the kernel the moment a holder dies, so a crash never leaves the vault locked.

The lock is local to this machine; the writer lease in the database (`store.vault_lease`) is
what serializes writers of one vault on several machines. `hold_lock` also serves
`gitwrite`'s own lock file beside it (vaultmem's commits to the vault, one at a time).

Light on purpose (no store, no embedders): readers probe the lock (`freshness.start_catch_up`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import portalocker

from ..errors import VaultmemError
from ..files import atomic_write, open_regular, read_regular

if TYPE_CHECKING:
    from .statedir import StateFiles


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
