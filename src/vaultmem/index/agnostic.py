"""The second opinion's chunk vectors (`search.second_opinion`): filling them.

A language-agnostic model's vector of each chunk is kept on its row (`memory_primary.agnostic`)
and in the shared vector cache by content hash. `fill` gives a vault's chunks theirs after
their own vectors: the ingester runs it once a vault's backlog is empty (`ingest`), the warm
service in the background. Only for a vault this role may write (a shared vault's are filled
by its owner's ingester).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from ..embed import Embedder
from ..store import agnostic_vectors, db, vector_cache
from .markdown import embedding_input

__all__ = ["FILL_BATCH", "fill"]

log = logging.getLogger(__name__)

# Chunks embedded per step of a fill: ~50 ms of the model, so a prompt the warm service
# answers meanwhile waits for the model no longer than that.
FILL_BATCH = 4


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
    row: those the shared cache holds are copied at once, the rest are embedded FILL_BATCH at a
    time, each batch committed. `model()` gives the model, asked only when a chunk needs
    embedding (loading one takes seconds; None: it cannot run here, the rest waits). `go_on()`
    runs before each batch (it may wait) and stops the fill by returning False;
    `progress(done, total)` follows the batches. Returns the chunks given a vector."""
    agnostic_vectors.retire_agnostic(conn, vault_id, model_id)
    hashes = agnostic_vectors.missing_agnostic(conn, vault_id, model_id)
    conn.commit()
    if not hashes:
        return 0
    db.ensure_agnostic_index(conn, model_id, dimension)
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
        if new:
            vectors = embedder.embed_documents([embedding_input(*texts[h]) for h in new])
            done += _store(conn, vault_id, model_id, new, vectors, dimension)
        if progress is not None:
            progress(i + len(batch), len(todo))
    return done


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
    try:
        vector_cache.store_vectors(conn, model_id, hashes, vectors)
        filled = agnostic_vectors.fill_agnostic(conn, vault_id, model_id, hashes, dimension)
        conn.commit()
        return filled
    except psycopg.Error as exc:
        # Searches judge such chunks without the opinion until a later fill stores them.
        log.warning("second opinion's vectors not stored: %s", type(exc).__name__)
        conn.rollback()
        return 0
