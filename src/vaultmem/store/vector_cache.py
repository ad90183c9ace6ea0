"""The shared vector cache: one vector per (model, text, writer), filled into every chunk of
that text its vault trusts.

Design decisions:
- The cache is read across trust domains never: an entry is used for a chunk only when its
  writer may write the chunk's vault (`vaultmem_trusts` in schema.sql), and only when it has
  the model's dimension. Another member's entry for the same text, whatever vector it holds,
  is not seen; an entry of the wrong dimension is passed over and the text embedded again.
- Filling rows with a vector skips rows another transaction holds (an ingester rewriting that
  note): they stay in the backlog (`claims`) and the next claim fills them from the cache. A
  claimer therefore never waits for anyone while it holds claims, so it cannot deadlock.

Every function runs in the caller's transaction (the claim's), as `tables` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .db import Conn, hnsw_index_name

__all__ = [
    "cached_embeddings",
    "cached_vectors",
    "fill_from_cache",
    "fits_dimension",
    "index_dimension",
    "misfit_entries",
    "store_vectors",
]


def fits_dimension(dimension: int | None) -> str:
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
        " AND content_hash = ANY(%s) AND written_by = vaultmem_current_role()"
        + fits_dimension(dimension),
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
        + fits_dimension(dimension)
        + " ORDER BY content_hash, written_by = vaultmem_current_role() DESC",
        (model_id, list(dict.fromkeys(hashes))),
        binary=True,  # vectors in pgvector's binary form: a quarter of the text form's cost
    ).fetchall()
    return {r["content_hash"]: _array(r["embedding"]) for r in rows}


def index_dimension(conn: Conn, model_id: str) -> int | None:
    """The dimension of the `model_id` vectors chunks hold or will hold: the one the model's
    HNSW index fixes (its cast refuses a vector of another dimension in a row of that model),
    read from the index's definition, a catalog lookup. None before the index exists (a
    model's first run makes it, from the embedder's dimension). Asked once per catch-up: read
    from the chunks (`embedding IS NOT NULL LIMIT 1`) it was a sequential scan of
    memory_primary each time, of the whole vault while it had no vector (text only), and past
    other vaults' rows in a shared database (every vault's vectors of a model share its
    index)."""
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
           AND c.model_id = %(m)s AND c.content_hash = p.content_hash{fits_dimension(dimension)}
        """,
        params,
    )
    return cur.rowcount
