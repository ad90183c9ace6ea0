"""The second opinion's chunk vectors (`search.second_opinion`): filling them.

A language-agnostic model's vector of each chunk is kept on its row (`memory_primary.agnostic`)
and in the shared vector cache by content hash, and its vector of each of the chunk's lines
(`embed.second_opinion.opinion_lines`) on the row only (`agnostic_lines`: a chunk written again
has its lines embedded again, ~1.5 ms a line). `fill` gives a vault's chunks theirs after
their own vectors: the ingester runs it once a vault's backlog is empty (`ingest`), the warm
service in the background. Only for a vault this role may write (a shared vault's are filled
by its owner's ingester).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import psycopg

from ..embed import Embedder
from ..embed.second_opinion import opinion_lines
from ..store import agnostic_vectors, db, vector_cache
from .markdown import embedding_input

__all__ = ["FILL_BATCH", "FILL_LINES", "fill"]

log = logging.getLogger(__name__)

# Chunks embedded per step of a fill: ~50 ms of the model, so a prompt the warm service
# answers meanwhile waits for the model no longer than that.
FILL_BATCH = 4
# Lines embedded per step, for the same reason (~1.5 ms a line): a chunk's lines may take
# several steps (a long one has up to `opinion_lines`' 80), stored once all are embedded.
FILL_LINES = 32


def fill(
    conn: psycopg.Connection[Any],
    vault_id: int,
    model_id: str,
    dimension: int,
    model: Callable[[], Embedder | None],
    *,
    go_on: Callable[[], bool] = lambda: True,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Give the vault's chunks their vector from the model `model_id` (of `dimension`) on the
    row, and their lines' (`opinion_lines`): chunk vectors the shared cache holds are copied at
    once, the rest are embedded FILL_BATCH chunks at a time, then their lines FILL_LINES at a
    time, each chunk's committed. `model()` gives the model, asked only when something needs
    embedding (loading one takes seconds; None: it cannot run here, the rest waits). `go_on()`
    runs before each step (it may wait) and stops the fill by returning False;
    `progress(done, total)` follows the chunks. Returns the chunks given a vector, or their
    lines' where the chunk had its vector already."""
    agnostic_vectors.retire_agnostic(conn, vault_id, model_id)
    hashes = agnostic_vectors.missing_agnostic(conn, vault_id, model_id)
    conn.commit()
    if not hashes:
        return 0
    db.ensure_agnostic_index(conn, model_id, dimension)
    had_vector = set(hashes) - agnostic_vectors.without_vector(conn, vault_id, hashes)
    done = agnostic_vectors.fill_agnostic(conn, vault_id, model_id, hashes, dimension)
    conn.commit()
    todo = agnostic_vectors.missing_agnostic(conn, vault_id, model_id)
    conn.commit()
    embedder = model() if todo else None
    if embedder is None:
        return done
    for i in range(0, len(todo), FILL_BATCH):
        if not go_on():
            break
        batch = todo[i : i + FILL_BATCH]
        texts = agnostic_vectors.chunk_inputs(conn, vault_id, batch)
        new = [h for h in batch if h in texts]  # a chunk gone since the list was read
        unfilled = agnostic_vectors.without_vector(conn, vault_id, new)
        lineless = agnostic_vectors.without_lines(conn, vault_id, new)
        bare = [h for h in new if h in unfilled]
        if bare:
            vectors = embedder.embed_documents([embedding_input(*texts[h]) for h in bare])
            done += _store(conn, vault_id, model_id, bare, vectors, dimension)
        for h in [h for h in new if h in lineless]:
            lines = _embed_lines(embedder, opinion_lines(texts[h][1]), go_on)
            if lines is None:
                return done
            stored = _store_lines(conn, vault_id, model_id, h, lines)
            done += stored if h in had_vector else 0
        if progress is not None:
            progress(i + len(batch), len(todo))
    return done


def _embed_lines(embedder: Embedder, lines: list[str], go_on: Callable[[], bool]) -> Any:
    """The vectors of a chunk's `lines`, FILL_LINES at a time, `go_on()` asked before each
    step (None: it said stop); an empty matrix for a chunk without lines."""
    parts = []
    for j in range(0, len(lines), FILL_LINES):
        if not go_on():
            return None
        parts.append(np.asarray(embedder.embed_documents(lines[j : j + FILL_LINES])))
    return np.concatenate(parts) if parts else np.empty((0, embedder.dimension), np.float32)


def _store_lines(
    conn: psycopg.Connection[Any], vault_id: int, model_id: str, content_hash: str, vectors: Any
) -> int:
    """Keep a chunk's line vectors on its rows, committed at once (as `_store`)."""
    return _committed(
        conn,
        "line vectors",
        lambda: agnostic_vectors.store_lines(conn, vault_id, model_id, content_hash, vectors),
    )


def _store(
    conn: psycopg.Connection[Any],
    vault_id: int,
    model_id: str,
    hashes: list[str],
    vectors: Any,
    dimension: int,
) -> int:
    """Keep a batch of chunk vectors in the shared cache and on the vault's rows, committed at
    once (a failure loses that batch, nothing else: the next fill retries it)."""

    def write() -> int:
        vector_cache.store_vectors(conn, model_id, hashes, vectors)
        return agnostic_vectors.fill_agnostic(conn, vault_id, model_id, hashes, dimension)

    return _committed(conn, "vectors", write)


def _committed(conn: psycopg.Connection[Any], what: str, write: Callable[[], int]) -> int:
    """`write()`'s count, committed; 0 and rolled back when the database refuses it. Searches
    judge such chunks without the opinion until a later fill stores them."""
    try:
        done = write()
        conn.commit()
        return done
    except psycopg.Error as exc:
        log.warning("second opinion's %s not stored: %s", what, type(exc).__name__)
        conn.rollback()
        return 0
