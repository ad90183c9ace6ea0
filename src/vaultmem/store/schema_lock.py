"""The schema lock: a PostgreSQL advisory lock that keeps a schema upgrade and index writes
apart.

What it guards: the tables' shape while anyone writes them. A schema upgrade takes SCHEMA_KEY
exclusively before any DDL; every index write transaction takes it shared before touching a
table (`write_transaction`). So an upgrade waits for the writers in flight, writers that start
meanwhile wait for the upgrade, and neither can hold a table the other waits for: no
DeadlockDetected between one vault's `init` and another's ingest. An up-to-date schema takes no
lock at all (`db.apply_schema` checks first).

Why an advisory lock, transaction-scoped only (`pg_advisory_xact_lock*`): it is released by
COMMIT or ROLLBACK, so it works through PgBouncer in transaction mode (a session-level lock
would stay with whichever server connection the pooler handed out) and a crashed client never
leaves one behind. One order for every writer: this lock first, table locks after.

vaultmem's other advisory locks: `claims.lock_texts` (one model call per text and model, keys
in the two-key form under the namespace "vmeb"; PostgreSQL keeps the one-key and two-key forms
apart, so they cannot meet this one). One writer per vault is no advisory lock but a lease row
(`vault_lease`): a session-level lock would not survive a pooler.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Schema changes (exclusive) against index writes (shared). "vaul" in ASCII: the key the
# schema apply has always taken, so an older vaultmem's `init` still serialises with this one.
SCHEMA_KEY = 0x7661756C

__all__ = ["SCHEMA_KEY", "hold_schema_for_upgrade", "hold_schema_for_writing", "write_transaction"]


def hold_schema_for_upgrade(conn: Any) -> None:
    """Inside the caller's transaction: wait until no index write is in flight, and keep new
    ones waiting until the transaction ends (the schema apply's upgrade path)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_KEY,))


def hold_schema_for_writing(conn: Any) -> None:
    """Inside the caller's transaction: wait for an upgrade in progress, and keep the next
    one waiting until the transaction ends (every index write)."""
    conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (SCHEMA_KEY,))


@contextmanager
def write_transaction(conn: Any) -> Iterator[None]:
    """`conn.transaction()` for a write to vaultmem's tables: the shared schema lock is taken
    first, so a concurrent schema upgrade and this write never deadlock (see above)."""
    with conn.transaction():
        hold_schema_for_writing(conn)
        yield
