"""The database half of "one writer per vault": the lease an ingester holds while it writes.

Two locks guard a vault's index, for two reasons. The file lock (`statedir.writer`) is local:
it lets a git hook see, without starting Python, that an ingester on this machine is running
and will pick up its commit (the pending mark). The lease (`store.leases`) is global: it is
held in the database, so two machines that ingest one shared vault, or one vault's index
written from two clones, serialize. It is held only while text is written (the passes that
move the watermark); embedding is done without it, through claims any worker can make
(`store.claims`). Every write transaction renews it first (`VaultLease.writing`), so a
writer that stalled past the lease finds out before it writes, and a crashed one's lease
expires after VAULTMEM_WRITER_LEASE seconds.

A writer on this machine whose process is gone (SIGKILL, out of memory) does not make the next
run wait for that expiry: its lease is taken over at once (`_gone`). "This machine" is the
holder's process space (the kernel's boot id and pid namespace, in its token), not its
hostname, which other machines may share. Were the judgement wrong all the same, the writer
still alive would find the lease gone at its next write transaction and write nothing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg

from .. import store
from ..errors import VaultmemError
from ..store import db, leases

log = logging.getLogger(__name__)

# How long a writer waits for another one's lease before it gives up (the other's passes are
# text only, so they are short; a stuck writer's lease expires well before this).
WAIT_SECONDS = 600.0


class WriterBusy(VaultmemError):
    """Another writer holds the vault's lease and did not release it in time."""


class VaultLease:
    """The lease on one vault's index for one writer run, over the writer's connection."""

    def __init__(self, conn: db.Conn, vault: db.Vault, seconds: float) -> None:
        self.conn = conn
        self.vault = vault
        self.seconds = max(1.0, seconds)
        self.who = leases.holder()
        self.held = False

    def acquire(self, *, wait: float = WAIT_SECONDS) -> None:
        """Take the lease, waiting (polling) while another writer holds it."""
        deadline = time.monotonic() + wait
        delay = 0.05
        told = False
        while True:
            if leases.acquire(self.conn, self.vault.id, self.who, self.seconds) is not None:
                self.held = True
                return
            other = leases.lease_of(self.conn, self.vault.id)
            if other is not None and _gone(other):
                if leases.take_over(self.conn, self.vault.id, self.who, self.seconds, other.holder):
                    log.info(
                        "took over vault %s's lease from pid %s, which is no longer running",
                        self.vault.name,
                        other.pid,
                    )
                    self.held = True
                    return
                continue  # released or taken meanwhile: ask again
            if other is not None and not told and wait > 0:
                # Said once, so a run that waits (another machine's writer, or one that died
                # there and whose lease has yet to run out) is not silent.
                told = True
                log.warning(
                    "waiting for another writer of vault %s (%s, pid %s): %s",
                    self.vault.name,
                    other.hostname,
                    other.pid,
                    waiting_because(other),
                )
            if time.monotonic() >= deadline:
                since = ""
                if other is not None:
                    age = (datetime.now(UTC) - other.acquired_at).total_seconds()
                    since = f" ({other.hostname}, pid {other.pid}, for {age:.0f} s)"
                raise WriterBusy(
                    f"another writer holds vault {self.vault.name}'s index{since}: this run "
                    "gave up waiting; its commits are caught up by the next run"
                )
            # Jitter, so writers waiting on one lease do not poll in step.
            time.sleep(delay * (0.5 + random.random()))
            delay = min(1.0, delay * 2)

    def release(self, *, failed: bool = False) -> None:
        """Give the lease up, committing what the writer's connection has pending (a write
        transaction that ran inside an implicit one is a savepoint of it), unless the writer
        `failed`: then that is rolled back first."""
        if self.held:
            self.held = False
            with contextlib.suppress(Exception):  # an expired lease needs no release
                if failed:
                    self.conn.rollback()
                leases.release(self.conn, self.vault.id, self.who)

    @contextlib.contextmanager
    def held_for(self) -> Iterator[None]:
        """Hold the lease for the block (taken unless held already)."""
        if self.held:
            yield
            return
        self.acquire()
        try:
            yield
        except BaseException:
            self.release(failed=True)
            raise
        self.release()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction of the vault's index, bound to the lease (`leases.bind_to_lease`:
        the server ends it if this writer stalls past the lease) and the lease renewed (and
        checked) first."""
        try:
            with store.write_transaction(self.conn):
                if self.held:
                    leases.bind_to_lease(self.conn, self.seconds)
                    leases.renew(self.conn, self.vault.id, self.who, self.seconds)
                yield
        except (
            psycopg.errors.IdleInTransactionSessionTimeout,
            psycopg.errors.QueryCanceled,
            psycopg.errors.LockNotAvailable,
        ) as exc:
            if not self.held:
                raise
            self.held = False  # the lease is another writer's to take now
            raise WriterStalled(
                f"this writer of vault {self.vault.name} stalled longer than its lease "
                f"({self.seconds:.0f} s, VAULTMEM_WRITER_LEASE) and the server ended its "
                "transaction; nothing of it was written: run the command again"
            ) from exc


class WriterStalled(leases.LeaseLost):
    """The server ended a writer's transaction that outlived its lease (it was frozen, or one
    statement or lock wait took longer than the lease)."""


def waiting_because(other: leases.LeaseState) -> str:
    """Why a writer waits for `other`'s lease, honestly: its time left, or, once it has run
    out, that the server is about to end the holder's still-open transaction."""
    if other.expired:
        return (
            "its lease has run out but its last transaction is still open (a frozen or suspended "
            "machine); the server ends it one lease after its last statement, then this run "
            "takes over"
        )
    return f"if it has stopped, its lease runs out within {max(1, math.ceil(other.remaining))} s"


def _gone(lease: leases.LeaseState) -> bool:
    """Whether the lease's holder was a process of this machine (this boot, this pid
    namespace: `leases.in_this_space`) that is no longer running."""
    if lease.pid is None or lease.pid <= 0 or not leases.in_this_space(lease.holder):
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. EPERM: another user's process, alive
        return False
    return False
