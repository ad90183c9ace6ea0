"""The second opinion's vectors on the chunk rows (`memory_primary.agnostic`, and its lines'
`agnostic_lines`): which are missing, filling them (the chunk's from the shared vector cache,
`vector_cache`), and reading the lines' back for a search.

Design decision: a row's second-opinion vector is always of the vault's second-opinion model or
NULL, so the missing ones are the NULL rows a partial index finds without reading the vault.
A row's line vectors are of the model its `agnostic_model_id` names (stored only beside a vector
of the vault's model, cleared with it): float16, half the bytes of float32, well within what a
cosine compared against others needs.
Only a role that may write a vault fills it (another's shared vault is filled by its owner's
ingester). Every function runs in the caller's transaction, as `tables` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .db import Conn
from .vector_cache import fits_dimension

__all__ = [
    "chunk_inputs",
    "fill_agnostic",
    "line_vectors",
    "missing_agnostic",
    "retire_agnostic",
    "store_lines",
    "without_lines",
    "without_vector",
]


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
            "UPDATE memory_primary"
            " SET agnostic = NULL, agnostic_lines = NULL, agnostic_model_id = NULL"
            " WHERE vault_id = %s AND (agnostic IS NOT NULL OR agnostic_lines IS NOT NULL)"
            " AND agnostic_model_id IS DISTINCT FROM %s",
            (vault_id, model_id),
        )


def missing_agnostic(conn: Conn, vault_id: int, model_id: str) -> list[str]:
    """The content hashes of the vault's chunks that have no second-opinion vector from
    `model_id` on their row yet, or not their lines' (each once, in path order), if this role
    may write the vault (another's shared vault is filled by its owner's ingester)."""
    rows = conn.execute(
        """
        SELECT content_hash FROM (
            SELECT DISTINCT ON (p.content_hash) p.content_hash, p.path, p.chunk_index
              FROM memory_primary p
             WHERE p.vault_id = %(v)s
               AND (p.agnostic IS NULL OR p.agnostic_lines IS NULL)
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
        + fits_dimension(dimension),
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


def without_vector(conn: Conn, vault_id: int, hashes: Sequence[str]) -> set[str]:
    """Which of `hashes` some chunk of the vault holds without its second-opinion vector."""
    return _unfilled(conn, vault_id, hashes, "agnostic")


def without_lines(conn: Conn, vault_id: int, hashes: Sequence[str]) -> set[str]:
    """Which of `hashes` some chunk of the vault holds without its lines' vectors."""
    return _unfilled(conn, vault_id, hashes, "agnostic_lines")


def _unfilled(conn: Conn, vault_id: int, hashes: Sequence[str], column: str) -> set[str]:
    if not hashes:
        return set()
    rows = conn.execute(
        # `column` is one of this module's two names, never input
        "SELECT DISTINCT content_hash FROM memory_primary"
        f" WHERE vault_id = %s AND content_hash = ANY(%s) AND {column} IS NULL",
        (vault_id, list(hashes)),
    ).fetchall()
    return {r["content_hash"] for r in rows}


def store_lines(conn: Conn, vault_id: int, model_id: str, content_hash: str, vectors: Any) -> int:
    """Keep the line vectors (`vectors`: lines x dimension, by `model_id`) of the vault's chunks
    of `content_hash` that hold that model's vector and no line vectors yet; rows another
    transaction holds are left for the next fill. Returns the rows given them."""
    blob = np.asarray(vectors, dtype=np.float16).tobytes()
    cur = conn.execute(
        """
        UPDATE memory_primary p SET agnostic_lines = %(b)s
          FROM (SELECT vault_id, path, chunk_index FROM memory_primary
                 WHERE vault_id = %(v)s AND content_hash = %(h)s
                   AND agnostic_model_id = %(m)s AND agnostic_lines IS NULL
                 FOR UPDATE SKIP LOCKED) q
         WHERE p.vault_id = q.vault_id AND p.path = q.path AND p.chunk_index = q.chunk_index""",
        {"b": blob, "v": vault_id, "h": content_hash, "m": model_id},
    )
    return cur.rowcount


def line_vectors(
    conn: Conn, vault_id: int, model_id: str, chunks: Sequence[tuple[str, int]], dimension: int
) -> dict[tuple[str, int], np.ndarray]:
    """The line vectors (lines x `dimension`, float32) of those of the vault's `chunks` (path,
    chunk index) that hold them from `model_id`, in one query; a chunk without is absent."""
    if not chunks:
        return {}
    cur = conn.execute(
        "SELECT p.path, p.chunk_index, p.agnostic_lines FROM memory_primary p"
        " JOIN unnest(%s::text[], %s::int[]) AS c(path, chunk_index)"
        " ON p.path = c.path AND p.chunk_index = c.chunk_index"
        " WHERE p.vault_id = %s AND p.agnostic_model_id = %s AND p.agnostic_lines IS NOT NULL",
        ([c[0] for c in chunks], [c[1] for c in chunks], vault_id, model_id),
    )
    out: dict[tuple[str, int], np.ndarray] = {}
    # A search's connection may have any row factory (a bench's plain one): read by position.
    for path, chunk_index, blob in (tuple(r.values()) if isinstance(r, dict) else r for r in cur):
        flat = np.frombuffer(bytes(blob), dtype=np.float16)
        if flat.size % dimension == 0:  # else not this model's: read as not filled
            out[(path, chunk_index)] = flat.reshape(-1, dimension).astype(np.float32)
    return out
