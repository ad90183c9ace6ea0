"""The embedding backlog as work anyone can take: claims, the shared cache, the workers' rows.

Design decisions:
- The backlog is derived from the truth, never queued apart from it: a chunk is in it while
  its vector is missing or from another model than its vault's (`index_state.model_id`). So
  nothing can fall out of it: a chunk written while a worker was embedding its twin is simply
  found again, and filled from the cache without a model call.
- A claim is a row lock (`FOR UPDATE SKIP LOCKED`) held by the claiming transaction while its
  batch is embedded: two workers never take the same chunk, and a worker killed mid-batch
  holds nothing once its connection is gone (its transaction rolls back, through a pooler
  too). Chunks of the same text in other rows (another vault, the same paragraph twice) are
  made one model call by a transaction-scoped advisory lock per (model, content hash), taken
  before the cache is checked: a text is embedded once per model and trust domain.
- The cache is read across trust domains never: an entry is used for a chunk only when its
  writer may write the chunk's vault (`vaultmem_trusts` in schema.sql), and only when it has
  the model's dimension. Another member's entry for the same text, whatever vector it holds,
  is not seen; an entry of the wrong dimension is passed over and the text embedded again.
- Filling other rows with a vector skips rows another transaction holds (an ingester
  rewriting that note): they stay in the backlog and the next claim fills them from the cache.
  A claimer therefore never waits for anyone while it holds claims, so it cannot deadlock.

Every function runs in the caller's transaction (the claim's), as `tables` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from .db import Conn, hnsw_index_name

__all__ = [
    "Claimed",
    "WorkerRow",
    "backlog_counts",
    "cached_vectors",
    "claim",
    "fill_from_cache",
    "index_dimension",
    "lock_texts",
    "misfit_entries",
    "register_worker",
    "stop_worker",
    "store_vectors",
    "touch_worker",
    "vault_ids_named",
    "workers",
]

# The advisory-lock namespace of "embedding this text with this model" ("vmeb").
_LOCK_NAMESPACE = 0x766D6562


class Claimed(NamedTuple):
    """A backlog chunk this transaction holds, and the model its vault wants."""

    vault_id: int
    path: str
    chunk_index: int
    content_hash: str
    heading: str
    content: str
    model_id: str


def claim(
    conn: Conn,
    limit: int,
    *,
    models: Sequence[str] | None = None,
    vault_ids: Sequence[int] | None = None,
) -> list[Claimed]:
    """Lock up to `limit` backlog chunks no other transaction holds, most recently written
    first, of vaults whose model is among `models` (None: any) and among `vault_ids` (None:
    every vault this role may write). Held until the caller's transaction ends."""
    params: dict[str, Any] = {"n": limit}
    where = ""
    if models is not None:
        params["m"] = list(models)
        where += " AND s.model_id = ANY(%(m)s)"
    if vault_ids is not None:
        params["v"] = list(vault_ids)
        where += " AND p.vault_id = ANY(%(v)s)"
    rows = conn.execute(
        f"""
        SELECT p.vault_id, p.path, p.chunk_index, p.content_hash, p.heading, p.content,
               s.model_id
          FROM memory_primary p JOIN index_state s ON s.vault_id = p.vault_id
          JOIN vaults v ON v.id = p.vault_id AND vaultmem_may_write(v.owner)
         WHERE s.model_id IS NOT NULL
           AND p.embedding IS NULL{where}
         ORDER BY p.updated_at DESC
         LIMIT %(n)s
           FOR UPDATE OF p SKIP LOCKED
        """,
        params,
    ).fetchall()
    return [
        Claimed(
            r["vault_id"],
            r["path"],
            r["chunk_index"],
            r["content_hash"],
            r["heading"],
            r["content"],
            r["model_id"],
        )
        for r in rows
    ]


def lock_texts(conn: Conn, model_id: str, hashes: Sequence[str]) -> list[str]:
    """The `hashes` this transaction now alone may embed with `model_id` for this role (advisory
    locks held until it ends); the others are being embedded by another transaction of the
    same role right now. Another role embeds its own copy (its own trust domain)."""
    if not hashes:
        return []
    rows = conn.execute(
        "SELECT h FROM unnest(%s::text[]) AS h"
        " WHERE pg_try_advisory_xact_lock(%s, hashtext(%s || current_user || ':' || h))",
        (list(dict.fromkeys(hashes)), _LOCK_NAMESPACE, model_id + ":"),
    ).fetchall()
    return [r["h"] for r in rows]


def _fits(dimension: int | None) -> str:
    """SQL (on the cache's alias `c`) true for an entry of `dimension` (None: any)."""
    return "" if dimension is None else f" AND vector_dims(c.embedding) = {int(dimension)}"


def cached_vectors(
    conn: Conn, model_id: str, hashes: Sequence[str], dimension: int | None = None
) -> set[str]:
    """Which of `hashes` this role's own cache entries hold a `model_id` vector of (of
    `dimension`, when given): the texts it need not embed again. An entry of this role is fit
    for every vault the role may write."""
    if not hashes:
        return set()
    rows = conn.execute(
        "SELECT content_hash FROM embedding_cache c WHERE model_id = %s"
        " AND content_hash = ANY(%s) AND written_by = vaultmem_current_role()" + _fits(dimension),
        (model_id, list(hashes)),
    ).fetchall()
    return {r["content_hash"] for r in rows}


def cached_embeddings(
    conn: Conn, model_id: str, hashes: Sequence[str], dimension: int | None = None
) -> dict[str, np.ndarray]:
    """The `model_id` vectors of `hashes` written by this role or a role acting for it (those
    the cache holds)."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM embedding_cache c"
        " WHERE model_id = %s AND content_hash = ANY(%s)"
        " AND vaultmem_trusts(written_by, vaultmem_current_role())"
        + _fits(dimension)
        + " ORDER BY content_hash, written_by = vaultmem_current_role() DESC",
        (model_id, list(dict.fromkeys(hashes))),
        binary=True,  # vectors in pgvector's binary form: a quarter of the text form's cost
    ).fetchall()
    return {r["content_hash"]: _array(r["embedding"]) for r in rows}


def index_dimension(conn: Conn, model_id: str, vault_ids: Sequence[int]) -> int | None:
    """The dimension of the `model_id` vectors the vaults' chunks hold or will hold: the one
    the model's HNSW index fixes (its cast refuses a vector of another dimension in a row of
    that model), read from the index's definition, a catalog lookup. None before the index
    exists (a model's first run makes it, from the embedder's dimension). Asked once per
    catch-up: read from the chunks (`embedding IS NOT NULL LIMIT 1`) it was a sequential scan
    of memory_primary each time, of the whole vault while it had no vector (text only), and
    past other vaults' rows in a shared database. `vault_ids`: the vaults it is asked for
    (every vault's vectors of a model share its index)."""
    del vault_ids
    row = conn.execute(
        "SELECT substring(pg_get_indexdef(to_regclass(%s)) FROM 'vector\\((\\d+)\\)') AS d",
        (hnsw_index_name(model_id),),
    ).fetchone()
    return int(row["d"]) if row and row["d"] else None


def misfit_entries(conn: Conn, vault_id: int, model_id: str, dimension: int) -> int:
    """Texts of the vault's backlog for which it would trust a cache entry that does not have
    the model's dimension: passed over (the text is embedded again), and worth reporting. Read
    from the backlog (its partial index), so the count costs what the change costs."""
    row = conn.execute(
        "SELECT count(DISTINCT p.content_hash) AS n FROM memory_primary p"
        " JOIN embedding_cache c ON c.model_id = %(m)s AND c.content_hash = p.content_hash"
        " JOIN vaults v ON v.id = p.vault_id"
        " WHERE p.vault_id = %(v)s AND p.embedding IS NULL"
        " AND vaultmem_trusts(c.written_by, v.owner) AND vector_dims(c.embedding) <> %(d)s",
        {"v": vault_id, "m": model_id, "d": int(dimension)},
    ).fetchone()
    return int(row["n"]) if row else 0


def _array(value: Any) -> np.ndarray:
    # pgvector's loader gives a numpy array for a typed column and a `Vector` for an untyped
    # one (the cache's column holds every model's dimension).
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy else value, dtype=np.float32)


def retire_agnostic(conn: Conn, vault_id: int, model_id: str) -> None:
    """Make `model_id` the vault's second-opinion model: a row's second-opinion vector is
    always of it or NULL, so the missing ones are the NULL rows (a partial index finds them
    without reading the vault). A new model clears the old one's vectors, once; a role that
    may not write the vault changes nothing."""
    changed = conn.execute(
        "UPDATE index_state SET agnostic_model_id = %s"
        " WHERE vault_id = %s AND agnostic_model_id IS DISTINCT FROM %s RETURNING vault_id",
        (model_id, vault_id, model_id),
    ).fetchone()
    if changed:
        conn.execute(
            "UPDATE memory_primary SET agnostic = NULL, agnostic_model_id = NULL"
            " WHERE vault_id = %s AND agnostic IS NOT NULL"
            " AND agnostic_model_id IS DISTINCT FROM %s",
            (vault_id, model_id),
        )


def missing_agnostic(conn: Conn, vault_id: int, model_id: str) -> list[str]:
    """The content hashes of the vault's chunks that have no second-opinion vector from
    `model_id` on their row yet (each once, in path order), if this role may write the vault
    (another's shared vault is filled by its owner's ingester)."""
    rows = conn.execute(
        """
        SELECT content_hash FROM (
            SELECT DISTINCT ON (p.content_hash) p.content_hash, p.path, p.chunk_index
              FROM memory_primary p
             WHERE p.vault_id = %(v)s
               AND p.agnostic IS NULL
               AND EXISTS (SELECT 1 FROM vaults v
                            WHERE v.id = %(v)s AND vaultmem_may_write(v.owner))
             ORDER BY p.content_hash, p.path, p.chunk_index
        ) m ORDER BY path, chunk_index
        """,
        {"v": vault_id, "m": model_id},
    ).fetchall()
    return [r["content_hash"] for r in rows]


def fill_agnostic(
    conn: Conn, vault_id: int, model_id: str, hashes: Sequence[str], dimension: int | None = None
) -> int:
    """Give the vault's chunks with one of `hashes` their second-opinion vector from the shared
    cache (where it holds one the vault trusts, of `dimension` when given); rows another
    transaction holds (an embedding claim, an ingest) are left for the next fill. Returns the
    chunks filled."""
    if not hashes:
        return 0
    cur = conn.execute(
        """
        UPDATE memory_primary p
           SET agnostic = c.embedding, agnostic_model_id = c.model_id
          FROM embedding_cache c, vaults v,
               (SELECT vault_id, path, chunk_index FROM memory_primary
                 WHERE vault_id = %(v)s AND content_hash = ANY(%(h)s)
                   AND agnostic IS NULL
                 FOR UPDATE SKIP LOCKED) q
         WHERE p.vault_id = q.vault_id AND p.path = q.path AND p.chunk_index = q.chunk_index
           AND v.id = p.vault_id AND vaultmem_trusts(c.written_by, v.owner)
           AND c.model_id = %(m)s AND c.content_hash = p.content_hash"""
        + _fits(dimension),
        {"v": vault_id, "m": model_id, "h": list(hashes)},
    )
    return cur.rowcount


def chunk_inputs(conn: Conn, vault_id: int, hashes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Heading and text of one chunk of the vault per content hash (those it still holds)."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT DISTINCT ON (content_hash) content_hash, heading, content FROM memory_primary"
        " WHERE vault_id = %s AND content_hash = ANY(%s) ORDER BY content_hash",
        (vault_id, list(hashes)),
    ).fetchall()
    return {r["content_hash"]: (r["heading"], r["content"]) for r in rows}


def store_vectors(conn: Conn, model_id: str, hashes: Sequence[str], vectors: np.ndarray) -> None:
    """Add vectors to the shared cache in this role's name (a text already there keeps its
    vector, unless that one has another dimension: an entry that was passed over is mended)."""
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO embedding_cache (model_id, content_hash, embedding) VALUES (%s, %s, %s)"
            " ON CONFLICT (model_id, content_hash, written_by) DO UPDATE"
            " SET embedding = EXCLUDED.embedding, created_at = now()"
            " WHERE vector_dims(embedding_cache.embedding) <> vector_dims(EXCLUDED.embedding)",
            [
                (model_id, h, np.asarray(v, dtype=np.float32))
                for h, v in zip(hashes, vectors, strict=True)
            ],
        )


def fill_from_cache(
    conn: Conn,
    model_id: str,
    hashes: Sequence[str],
    vault_ids: Sequence[int] | None = None,
    dimension: int | None = None,
) -> int:
    """Give every backlog chunk with one of `hashes` (of a vault whose model is `model_id`, and
    among `vault_ids` when given) a cached vector its vault trusts (of `dimension` when given);
    rows another transaction holds are left for later. Returns the chunks filled."""
    if not hashes:
        return 0
    params: dict[str, Any] = {"m": model_id, "h": list(hashes)}
    where = ""
    if vault_ids is not None:
        params["v"] = list(vault_ids)
        where = " AND q.vault_id = ANY(%(v)s)"
    cur = conn.execute(
        f"""
        UPDATE memory_primary p
           SET embedding = c.embedding, model_id = c.model_id, updated_at = now()
          FROM embedding_cache c, vaults v,
               (SELECT q.vault_id, q.path, q.chunk_index
                  FROM memory_primary q JOIN index_state s ON s.vault_id = q.vault_id
                 WHERE q.content_hash = ANY(%(h)s) AND s.model_id = %(m)s
                   AND q.embedding IS NULL{where}
                   FOR UPDATE OF q SKIP LOCKED) t
         WHERE p.vault_id = t.vault_id AND p.path = t.path AND p.chunk_index = t.chunk_index
           AND v.id = p.vault_id AND vaultmem_trusts(c.written_by, v.owner)
           AND c.model_id = %(m)s AND c.content_hash = p.content_hash{_fits(dimension)}
        """,
        params,
    )
    return cur.rowcount


def backlog_counts(conn: Conn, vault_ids: Sequence[int] | None = None) -> dict[str, int]:
    """Chunks waiting for a vector, by the model their vault wants, in the vaults this role
    may write (among `vault_ids` when given): the work a worker of this role can take."""
    params: dict[str, Any] = {}
    where = ""
    if vault_ids is not None:
        params["v"] = list(vault_ids)
        where = " AND p.vault_id = ANY(%(v)s)"
    rows = conn.execute(
        f"""
        SELECT s.model_id, count(*) AS n
          FROM memory_primary p JOIN index_state s ON s.vault_id = p.vault_id
          JOIN vaults v ON v.id = p.vault_id AND vaultmem_may_write(v.owner)
         WHERE s.model_id IS NOT NULL
           AND p.embedding IS NULL{where}
         GROUP BY 1 ORDER BY 1
        """,
        params,
    ).fetchall()
    return {r["model_id"]: int(r["n"]) for r in rows}


def vault_ids_named(conn: Conn, name: str) -> list[int]:
    """Ids of the vaults this role sees by that name (a shared vault's, or a local one's)."""
    rows = conn.execute("SELECT id FROM vaults WHERE name = %s ORDER BY id", (name,)).fetchall()
    return [int(r["id"]) for r in rows]


# --- the workers' own rows ---------------------------------------------------------------------


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
