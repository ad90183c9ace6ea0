"""The embedding backlog as work anyone can take: claims on the chunks still lacking a vector.

Design decisions:
- The backlog is derived from the truth, never queued apart from it: a chunk is in it while
  its vector is missing or from another model than its vault's (`index_state.model_id`). So
  nothing can fall out of it: a chunk written while a worker was embedding its twin is simply
  found again, and filled from the cache (`vector_cache`) without a model call.
- A claim is a row lock (`FOR UPDATE SKIP LOCKED`) held by the claiming transaction while its
  batch is embedded: two workers never take the same chunk, and a worker killed mid-batch
  holds nothing once its connection is gone (its transaction rolls back, through a pooler
  too). Chunks of the same text in other rows (another vault, the same paragraph twice) are
  made one model call by a transaction-scoped advisory lock per (model, content hash), taken
  before the cache is checked (`lock_texts`): a text is embedded once per model and trust
  domain.
- A claimer never waits for anyone while it holds claims (the cache fill skips rows another
  transaction holds), so it cannot deadlock.

The shared vector cache is `vector_cache`, the workers' own rows `worker_registry`. Every
function runs in the caller's transaction (the claim's), as `tables` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .db import Conn

__all__ = [
    "Claimed",
    "backlog_counts",
    "claim",
    "lock_texts",
    "vault_ids_named",
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
