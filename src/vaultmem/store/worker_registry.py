"""The embedding workers' registry: one row per worker (`vaultmem worker`, an ingester's
drain), with its host, pid, models and totals, for `vaultmem status`.

Design decision: a row says what its worker last reported, nothing more. Only the worker's own
machine can tell whether its process still runs (`pid_alive`); anyone else sees how long it
has been silent (`WorkerRow.state`). Rows of workers gone for a week are removed by the next
worker of the same role to start. Every function runs in the caller's transaction, as
`tables` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .db import Conn

__all__ = [
    "WORKER_SEEN_SECONDS",
    "WorkerRow",
    "pid_alive",
    "register_worker",
    "stop_worker",
    "touch_worker",
    "workers",
]


@dataclass(frozen=True)
class WorkerRow:
    """One worker as `vaultmem status` shows it."""

    id: str
    hostname: str
    pid: int | None
    role: str
    models: list[str]
    started_at: datetime
    seen_at: datetime
    stopped_at: datetime | None
    embedded: int
    reused: int
    batches: int
    seconds: float
    seen_seconds_ago: float

    @property
    def rate(self) -> float | None:
        """Chunk texts embedded per second of model time."""
        return self.embedded / self.seconds if self.seconds > 0 else None

    def state(self, host: str, alive: Callable[[int], bool]) -> str:
        """ "stopped" (it said so), "gone" (a process of this host, `host`, whose pid `alive`
        says is not running: killed, or its machine restarted), "running" (seen within
        WORKER_SEEN_SECONDS), or "seen N s ago" (another host's, silent since: it may be
        idle, or dead; only its own machine can tell)."""
        if self.stopped_at is not None:
            return "stopped"
        if self.hostname == host and self.pid is not None and not alive(self.pid):
            return "gone"
        if self.seen_seconds_ago > WORKER_SEEN_SECONDS:
            return f"seen {self.seen_seconds_ago:.0f} s ago"
        return "running"

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "rate": self.rate}


# A worker whose row was touched this recently is shown running (unless its own host can tell
# that its process is gone).
WORKER_SEEN_SECONDS = 30.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine and is a vaultmem (a pid the
    system has given to another program since counts as gone, where /proc tells)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"vaultmem" in fh.read()
    except OSError:
        return True  # no /proc: the pid alone decides


def register_worker(conn: Conn, worker_id: str, hostname: str, pid: int, models: list[str]) -> None:
    """Add this worker's row (and remove this role's rows of workers gone for a week)."""
    conn.execute(
        "DELETE FROM embedding_workers WHERE seen_at < now() - interval '7 days'"
        " AND vaultmem_may_write(role)"
    )
    conn.execute(
        "INSERT INTO embedding_workers (id, hostname, pid, models) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET seen_at = now(), stopped_at = NULL",
        (worker_id, hostname, pid, models),
    )


def touch_worker(
    conn: Conn,
    worker_id: str,
    *,
    embedded: int,
    reused: int,
    batches: int,
    seconds: float,
    models: list[str],
) -> None:
    """Record the worker's totals so far (and that it is alive)."""
    conn.execute(
        "UPDATE embedding_workers SET seen_at = now(), embedded = %s, reused = %s, batches = %s,"
        " seconds = %s, models = %s WHERE id = %s",
        (embedded, reused, batches, seconds, models, worker_id),
    )


def stop_worker(conn: Conn, worker_id: str) -> None:
    conn.execute(
        "UPDATE embedding_workers SET stopped_at = now(), seen_at = now() WHERE id = %s",
        (worker_id,),
    )


def workers(conn: Conn, *, within_seconds: float = 3600) -> list[WorkerRow]:
    """Workers seen in the last `within_seconds`, most recently seen first."""
    rows = conn.execute(
        """
        SELECT id, hostname, pid, role::regrole::text AS role, models, started_at, seen_at,
               stopped_at, embedded, reused, batches, seconds,
               extract(epoch FROM now() - seen_at)::float8 AS ago
          FROM embedding_workers
         WHERE seen_at > now() - make_interval(secs => %s)
         ORDER BY seen_at DESC
        """,
        (within_seconds,),
    ).fetchall()
    return [
        WorkerRow(
            r["id"],
            r["hostname"],
            r["pid"],
            r["role"],
            list(r["models"]),
            r["started_at"],
            r["seen_at"],
            r["stopped_at"],
            int(r["embedded"]),
            int(r["reused"]),
            int(r["batches"]),
            float(r["seconds"]),
            float(r["ago"]),
        )
        for r in rows
    ]
