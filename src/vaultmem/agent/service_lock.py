"""The warm service's lock: a file lock on `<vaultmem home>/run/warm-<fingerprint>.lock`, held
by the one warm service of an environment for its whole life.

What it guards: one warm service per environment (the fingerprint in the file's name). A
service on its way out (stopped, idle, replaced) holds it until it has closed its connections
and model, so one that starts meanwhile waits for that instead of running beside it, and
`warm stop` can tell when the next hook may start another. Why a file lock (flock(2)): the
kernel releases it the moment its holder dies, so a crashed service never blocks the next
one, and nothing else (a pid file, a socket probe) says both "alive" and "done closing".

The vault's writer lock (`index.writer_lock`) is the same kind of lock on another file; this
one guards a process, not a vault.
"""

from __future__ import annotations

import os
import time

__all__ = ["take", "wait_until_free"]


def take(lock_path: str, patience: float) -> int | None:
    """Hold the service lock at `lock_path`, waiting up to `patience` seconds for a service
    that is stopping to let go of it: the open descriptor (closing it releases the lock), or
    None when another service still holds it."""
    import fcntl

    lock_fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o600)
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock_fd
        except OSError:
            if time.monotonic() > deadline:
                os.close(lock_fd)
                return None
            time.sleep(0.1)


def wait_until_free(lock_path: str, wait: float) -> bool:
    """Whether the service lock at `lock_path` came free within `wait` seconds."""
    import fcntl

    deadline = time.monotonic() + wait
    try:
        fd = os.open(lock_path, os.O_WRONLY)
    except FileNotFoundError:
        return True
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
    finally:
        os.close(fd)
