"""The database lease a writer holds on one vault's index: one writer per vault, for every
machine that writes it.

What it guards: the passes that write a vault's text and move its watermark, so that two
machines that ingest one shared vault, or one vault's index written from two clones,
serialize. It is held only while text is written; embedding is done without it, through claims
any worker can make (`store.claims`). Its partner on this machine is the file lock
(`index.writer_lock`), which a git hook can probe without starting Python; the lease is the
one the database enforces, for every machine.

Why a lease row and not a PostgreSQL lock: a pooler in transaction mode (PgBouncer, Supabase's,
Neon's) hands a server connection to another client after every transaction, so a
session-level advisory lock would be held by whichever client used that connection last, and
released by nobody. A lease row works through any pooler: `try_acquire` takes it when it is
free or expired (the server's clock decides, never a client's), and `renew` runs first in every
write transaction (`VaultLease.writing`), extending the expiry and checking that this holder
still has it: the row lock it takes keeps a competitor from taking the lease until that
transaction commits, so two writers' transactions never interleave, and a writer whose lease
ran out (it stalled longer than the lease) finds out before it writes anything. A crashed
holder's lease simply expires after VAULTMEM_WRITER_LEASE seconds.

A frozen holder (a laptop suspended, a SIGSTOPped process) is the one a lease alone cannot end:
its open transaction keeps the lease row locked, and a competitor's `try_acquire` would wait
for that lock for as long as the server keeps the session (~11 minutes through a pooler). So a
writer's transaction is bound to its lease (`bind_to_lease`: idle, statement and lock timeouts
of one lease plus MARGIN_SECONDS), and `try_acquire` waits at most ACQUIRE_LOCK_MS for the row:
the server ends the frozen transaction one lease after its last statement, when its lease has
run out too, and the next writer takes over.

A writer on this machine whose process is gone (SIGKILL, out of memory) does not make the next
run wait for that expiry: its lease is taken over at once (`_gone`). "This machine" is the
holder's process space (the kernel's boot id and pid namespace, in its token), not its
hostname, which other machines may share. Were the judgement wrong all the same, the writer
still alive would find the lease gone at its next write transaction and write nothing.

`VaultLease` is a writer run's handle on the lease. The row functions below it leave
transaction control to the caller, as `tables` does, except `try_acquire`, `take_over` and
`release_if_ours`, which commit.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from ..errors import VaultmemError
from .db import Conn, Vault
from .schema_lock import write_transaction

__all__ = [
    "Holder",
    "LeaseLost",
    "LeaseState",
    "VaultLease",
    "WriterBusy",
    "WriterStalled",
    "bind_to_lease",
    "holder",
    "in_this_space",
    "lease_of",
    "process_space",
    "release_if_ours",
    "renew",
    "take_over",
    "try_acquire",
    "waiting_because",
]

log = logging.getLogger(__name__)

# How long a writer waits for another one's lease before it gives up (the other's passes are
# text only, so they are short; a stuck writer's lease expires well before this).
WAIT_SECONDS = 600.0
# A writer's transaction may outlive its lease by this much before the server ends it (idle
# between statements, one statement, or waiting for one lock).
MARGIN_SECONDS = 5.0
# How long `try_acquire` waits for the lease row while another writer's transaction holds it.
ACQUIRE_LOCK_MS = 1000


class LeaseLost(VaultmemError):
    """Another writer took this vault's lease (this one stalled past its expiry)."""


class WriterBusy(VaultmemError):
    """Another writer holds the vault's lease and did not release it in time."""


class WriterStalled(LeaseLost):
    """The server ended a writer's transaction that outlived its lease (it was frozen, or one
    statement or lock wait took longer than the lease)."""


class VaultLease:
    """The lease on one vault's index for one writer run, over the writer's connection."""

    def __init__(self, conn: Conn, vault: Vault, seconds: float) -> None:
        self.conn = conn
        self.vault = vault
        self.seconds = max(1.0, seconds)
        self.who = holder()
        self.held = False

    def acquire(self, *, wait: float = WAIT_SECONDS) -> None:
        """Take the lease, waiting (polling) while another writer holds it."""
        deadline = time.monotonic() + wait
        delay = 0.05
        told = False
        while True:
            if try_acquire(self.conn, self.vault.id, self.who, self.seconds) is not None:
                self.held = True
                return
            other = lease_of(self.conn, self.vault.id)
            if other is not None and _gone(other):
                if take_over(self.conn, self.vault.id, self.who, self.seconds, other.holder):
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
                release_if_ours(self.conn, self.vault.id, self.who)

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
        """One write transaction of the vault's index, bound to the lease (`bind_to_lease`:
        the server ends it if this writer stalls past the lease) and the lease renewed (and
        checked) first."""
        try:
            with write_transaction(self.conn):
                if self.held:
                    bind_to_lease(self.conn, self.seconds)
                    renew(self.conn, self.vault.id, self.who, self.seconds)
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


def waiting_because(other: LeaseState) -> str:
    """Why a writer waits for `other`'s lease, honestly: its time left, or, once it has run
    out, that the server is about to end the holder's still-open transaction."""
    if other.expired:
        return (
            "its lease has run out but its last transaction is still open (a frozen or suspended "
            "machine); the server ends it one lease after its last statement, then this run "
            "takes over"
        )
    return f"if it has stopped, its lease runs out within {max(1, math.ceil(other.remaining))} s"


def _gone(lease: LeaseState) -> bool:
    """Whether the lease's holder was a process of this machine (this boot, this pid
    namespace: `in_this_space`) that is no longer running."""
    if lease.pid is None or lease.pid <= 0 or not in_this_space(lease.holder):
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. EPERM: another user's process, alive
        return False
    return False


def session_limit_ms(seconds: float) -> int:
    """The timeouts of a writer's transaction with a lease of `seconds`, in milliseconds."""
    return int((max(1.0, seconds) + MARGIN_SECONDS) * 1000)


def bind_to_lease(conn: Conn, seconds: float) -> None:
    """In the caller's write transaction (before its first write): the server ends it if it
    stays idle, runs one statement, or waits for one lock longer than the lease plus
    MARGIN_SECONDS. Transaction-local (SET LOCAL), so it works through a pooler."""
    limit = str(session_limit_ms(seconds))
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %(l)s, true),"
        " set_config('statement_timeout', %(l)s, true), set_config('lock_timeout', %(l)s, true)",
        {"l": limit},
    )


@dataclass(frozen=True)
class Holder:
    """Who holds (or asks for) a lease: a unique token, and for people its machine and pid."""

    token: str
    hostname: str
    pid: int


def holder() -> Holder:
    """A new holder for this process (one per writer run). Its token names the process space
    it runs in (`process_space`), so that a writer can tell a lease left by a process of its
    own space (whose pid it can check) from one of another machine that has the same name."""
    return Holder(
        f"{socket.gethostname()}:{os.getpid()}:{process_space()}:{uuid.uuid4().hex[:12]}",
        socket.gethostname(),
        os.getpid(),
    )


@functools.cache
def process_space() -> str:
    """Where this process's pids mean something: this boot of this kernel and this pid
    namespace (Linux: the kernel's boot id and the namespace's inode), "" where that cannot be
    read (then no lease is ever judged by its pid). Hostnames are no such thing: two laptops
    are both "MacBook-Pro", and containers of one host may share its name."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            boot = fh.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    digits = "".join(c for c in namespace if c.isdigit())
    return f"{boot}.{digits}" if boot and digits else ""


def in_this_space(token: str) -> bool:
    """Whether a holder token (`holder`) was made by a process of this process space."""
    here = process_space()
    parts = token.split(":")
    return bool(here) and len(parts) == 4 and parts[2] == here


@dataclass(frozen=True)
class LeaseState:
    """The lease of a vault as it stands: who holds it, until when (server time)."""

    holder: str
    hostname: str
    pid: int | None
    acquired_at: datetime
    expires_at: datetime
    expired: bool
    # Seconds until it expires, by the server's clock (0 once expired; `lease_of` only)
    remaining: float = 0.0


def try_acquire(conn: Conn, vault_id: int, who: Holder, seconds: float) -> LeaseState | None:
    """Take the vault's lease for `seconds` if it is free, expired or already ours. Returns
    None when it is taken; the current holder is then `lease_of(conn, vault_id)`. Commits.
    Waits at most ACQUIRE_LOCK_MS for the row a writer's open transaction holds (None then)."""
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (str(ACQUIRE_LOCK_MS),))
            row = _acquire(conn, vault_id, who, seconds)
    except psycopg.errors.LockNotAvailable:
        conn.rollback()
        return None
    conn.commit()
    return _state(row) if row else None


def _acquire(conn: Conn, vault_id: int, who: Holder, seconds: float) -> Any:
    return conn.execute(
        """
        INSERT INTO writer_leases AS l (vault_id, holder, hostname, pid, expires_at)
        VALUES (%(v)s, %(h)s, %(host)s, %(pid)s, now() + make_interval(secs => %(s)s))
        ON CONFLICT (vault_id) DO UPDATE SET
            holder = EXCLUDED.holder, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
            acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END,
            expires_at = EXCLUDED.expires_at
        WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
        RETURNING holder, hostname, pid, acquired_at, expires_at, false AS expired
        """,
        {"v": vault_id, "h": who.token, "host": who.hostname, "pid": who.pid, "s": seconds},
    ).fetchone()


def take_over(
    conn: Conn, vault_id: int, who: Holder, seconds: float, from_holder: str
) -> LeaseState | None:
    """Take the vault's lease from `from_holder` (a writer known to be gone), if that one still
    holds it: None when it was released or taken meanwhile. Commits. Safe even if the judgement
    was wrong: a writer still alive finds the lease gone at its next write (`renew`)."""
    row = conn.execute(
        """
        UPDATE writer_leases SET holder = %(h)s, hostname = %(host)s, pid = %(pid)s,
            acquired_at = now(), expires_at = now() + make_interval(secs => %(s)s)
        WHERE vault_id = %(v)s AND holder = %(old)s
        RETURNING holder, hostname, pid, acquired_at, expires_at, false AS expired
        """,
        {
            "v": vault_id,
            "h": who.token,
            "host": who.hostname,
            "pid": who.pid,
            "s": seconds,
            "old": from_holder,
        },
    ).fetchone()
    conn.commit()
    return _state(row) if row else None


def renew(conn: Conn, vault_id: int, who: Holder, seconds: float) -> None:
    """Extend the lease, in the caller's write transaction (its first statement). Raises
    LeaseLost when this holder no longer has it: the caller's transaction must then roll back."""
    row = conn.execute(
        "UPDATE writer_leases SET expires_at = now() + make_interval(secs => %s)"
        " WHERE vault_id = %s AND holder = %s RETURNING 1 AS ok",
        (seconds, vault_id, who.token),
    ).fetchone()
    if row is None:
        raise LeaseLost(
            "another writer took over this vault's index while this one was stalled; nothing "
            "of this transaction was written, and the other writer brings the index to its tip"
        )


def release_if_ours(conn: Conn, vault_id: int, who: Holder) -> None:
    """Give the lease up (if still ours). Commits."""
    conn.execute(
        "DELETE FROM writer_leases WHERE vault_id = %s AND holder = %s", (vault_id, who.token)
    )
    conn.commit()


def lease_of(conn: Conn, vault_id: int) -> LeaseState | None:
    row = conn.execute(
        "SELECT holder, hostname, pid, acquired_at, expires_at, expires_at < now() AS expired,"
        " greatest(extract(epoch FROM expires_at - now()), 0)::float8 AS remaining"
        " FROM writer_leases WHERE vault_id = %s",
        (vault_id,),
    ).fetchone()
    conn.commit()
    return _state(row) if row else None


def _state(row: Any) -> LeaseState:
    return LeaseState(
        row["holder"],
        row["hostname"],
        row["pid"],
        row["acquired_at"],
        row["expires_at"],
        bool(row["expired"]),
        float(row.get("remaining") or 0.0),
    )
