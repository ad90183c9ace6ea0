"""The embedding half of a writer run: the backlog drained batch by batch, then the gate's
generic requests and the second opinion's vectors.

Design decision: vectors never hold up text. A writer's text passes (`ingest`) make a note
searchable (full-text) at once, under the lease; its vectors are filled afterwards from the
backlog (`store.claims`: the chunks whose vector is missing), one claimed batch per
transaction (`embed_claimed`), so a failure leaves nothing half-written and any worker on any
machine (`worker`, which runs the same step) can drain it too. Batches are sized to take about
BATCH_SECONDS at the measured rate, so a new commit (`should_pause`) waits at most that long
for its own text pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import store
from ..embed import Embedder, generic
from ..errors import VaultmemError
from ..store import claims, db, vector_cache
from . import markdown

if TYPE_CHECKING:
    from .ingest import Ingester, IngestResult

__all__ = ["ClaimStep", "drain", "embed_claimed", "fill_second_opinion", "prepare_generic"]

log = logging.getLogger(__name__)

# Embedding batches: the first is small (the rate is unknown), later ones take about this long,
# which bounds how long a new commit waits behind the backlog.
FIRST_BATCH = 8
BATCH_SECONDS = 1.0


@dataclass(frozen=True)
class ClaimStep:
    """What one claimed batch came to: chunks claimed, texts sent to the model, chunks filled
    from the cache without a call (a twin embedded earlier), chunks given a vector, model time."""

    claimed: int
    embedded: int
    reused: int
    filled: int
    seconds: float


def embed_claimed(
    conn: db.Conn,
    embedder_for: Embedder | Callable[[str], Embedder],
    limit: int,
    *,
    vault_ids: list[int] | None = None,
    models: list[str] | None = None,
    dimension: int | None = None,
) -> ClaimStep:
    """Claim up to `limit` backlog chunks, embed the texts no one has embedded yet with each
    vault's model (`embedder_for`: one embedder, or a function from a model id to one), and
    give every claimed chunk its vector, in the caller's transaction. The claims are released
    when it ends; if it rolls back (a model error, a kill), nothing was written and the
    chunks are simply in the backlog again. `dimension`: the (one) model's, when the caller
    knows it; else the index's (`vector_cache.index_dimension`): cached entries of another are
    passed over."""
    known_dimension = dimension
    claimed = claims.claim(conn, limit, models=models, vault_ids=vault_ids)
    by_model: dict[str, dict[str, claims.Claimed]] = {}
    for c in claimed:
        by_model.setdefault(c.model_id, {}).setdefault(c.content_hash, c)
    embedded = reused = filled = 0
    seconds = 0.0
    for model_id, texts in by_model.items():

        def model(model_id: str = model_id) -> Embedder:
            embedder = embedder_for if not callable(embedder_for) else embedder_for(model_id)
            if embedder.model_id != model_id:
                raise VaultmemError(
                    f"the embedder for {model_id} makes {embedder.model_id} vectors: refusing "
                    "to mix them into the index"
                )
            return embedder

        # The model's dimension, as the index already holds it (asking the embedder could cost
        # a model call): cached entries of another dimension are passed over.
        dimension = known_dimension or vector_cache.index_dimension(conn, model_id)
        mine = claims.lock_texts(conn, model_id, list(texts))
        if dimension is None and vector_cache.cached_vectors(conn, model_id, mine):
            dimension = model().dimension  # entries to judge, and no vector to judge them by
        cached = vector_cache.cached_vectors(conn, model_id, mine, dimension)
        todo = [h for h in mine if h not in cached]
        if todo:
            embedder = model()
            inputs = [markdown.embedding_input(texts[h].heading, texts[h].content) for h in todo]
            t0 = time.monotonic()
            vectors = embedder.embed_documents(inputs)
            seconds += time.monotonic() - t0
            vector_cache.store_vectors(conn, model_id, todo, vectors)
            embedded += len(todo)
            dimension = dimension or int(vectors.shape[1])
        reused += len(cached)
        filled += vector_cache.fill_from_cache(conn, model_id, mine, None, dimension)
    return ClaimStep(len(claimed), embedded, reused, filled, seconds)


def drain(
    ing: Ingester,
    result: IngestResult,
    *,
    should_pause: Callable[[], bool] = lambda: False,
    limit: int | None = None,
) -> bool:
    """Embed chunks lacking a vector from the current model. True when the backlog is empty.

    Each batch is one claim (`store.claims`: rows no worker holds, newest first), one model
    call and one transaction: a failure leaves nothing half-written, and the rows stay in
    the backlog for the next run or any worker. Batches are sized to take about
    BATCH_SECONDS at the measured rate (never more than VAULTMEM_EMBEDDING_BATCH_SIZE), so a
    new commit (`should_pause`) waits at most that long for its text pass. Progress (done,
    total, rate) is written for `vaultmem status`."""
    vid, model = ing.vault.id, ing.embedder.model_id
    with ing.writing():
        known = ing.known_dimension()
        if known is not None:  # a cached vector is used only with the model's dimension
            result.reused += store.fill_from_cache(ing.conn, vid, model, None, known)
        store.set_model(ing.conn, vid, model)
    total = store.backlog_size(ing.conn, vid, model)
    ing.conn.commit()
    if total == 0:
        result.backlog = 0
        prepare_generic(ing.embedder)
        fill_second_opinion(ing, result, should_pause=should_pause)
        return True
    dimension = ing.embedder.dimension  # needed for the index anyway
    if known is None:
        with ing.writing():
            result.reused += store.fill_from_cache(ing.conn, vid, model, None, dimension)
        total = store.backlog_size(ing.conn, vid, model)
        ing.conn.commit()
    db.ensure_vector_index(ing.conn, model, dimension)
    ing.conn.commit()
    misfits = vector_cache.misfit_entries(ing.conn, vid, model, dimension)
    ing.conn.commit()
    if misfits:
        # Never fatal: such an entry is passed over and its text embedded again.
        result.cache_skipped += misfits
        log.warning(
            "passed over %d cached vectors that are not %d-dimensional (%s): their texts "
            "are embedded again; `vaultmem gc --cache` purges them",
            misfits,
            ing.embedder.dimension,
            model,
        )
    done = 0
    ceiling = max(1, ing.settings.embedding_batch_size)
    batch = min(ceiling, FIRST_BATCH)
    rate: float | None = None  # chunks per second, smoothed
    warm = False
    tracker = ing.tracker
    while True:
        if should_pause() or (limit is not None and done >= limit):
            break
        with store.write_transaction(ing.conn):
            step = embed_claimed(
                ing.conn,
                ing.embedder,
                batch,
                vault_ids=[vid],
                models=[model],
                dimension=dimension,
            )
        if step.claimed == 0:
            break  # nothing left, or all of it being embedded by workers right now
        done += step.filled
        result.embedded += step.embedded
        result.reused += step.reused
        result.embed_seconds += step.seconds
        if step.embedded:
            if warm:
                # The first call loads the model: its rate says nothing about the next ones.
                now = step.embedded / max(step.seconds, 1e-6)
                rate = now if rate is None else 0.7 * rate + 0.3 * now
                batch = max(1, min(ceiling, int(rate * BATCH_SECONDS)))
                result.embed_rate = rate
            warm = True
        ing.progress("embed", done, total)
        if tracker is not None:
            tracker.update(done=done, total=total, rate=rate)
    if tracker is not None:
        # This drain is over (the backlog is empty, or a commit's text pass comes first):
        # say so now, not when the run ends, or the throttled last update ("8 of 40 done")
        # would stand beside an empty backlog through the steps that follow.
        tracker.update(done=done, total=total, rate=rate, final=True)
    prepare_generic(ing.embedder)
    result.backlog = store.backlog_size(ing.conn, vid, model)
    ing.conn.commit()
    if result.backlog == 0:
        fill_second_opinion(ing, result, should_pause=should_pause)
    return result.backlog == 0


def fill_second_opinion(
    ing: Ingester, result: IngestResult, *, should_pause: Callable[[], bool] = lambda: False
) -> None:
    """Once every chunk has its vector: give the chunks their second opinion's vector too
    (`search.second_opinion`), where the vault's model is calibrated with it. The model
    (~1.3 s to load) is loaded only when a chunk needs embedding (`agnostic.fill`); a new
    commit pauses it like the backlog. Best effort: searches judge a chunk without one as a
    one-shot hook does."""
    from ..embed import second_opinion
    from ..embed.use import UseEmbedder
    from . import agnostic

    if not second_opinion.wanted(ing.settings):
        return
    result.second_opinion += agnostic.fill(
        ing.conn,
        ing.vault.id,
        UseEmbedder.model_id,
        UseEmbedder.dimension,
        second_opinion.shared_model,
        go_on=lambda: not should_pause(),
        progress=lambda done, total: ing.progress("second opinion", done, total),
    )


def prepare_generic(embedder: Embedder) -> None:
    """Embed the relevance gate's generic requests if they are not cached for this model
    yet (`embed.generic`): searches never do, so this run, in the background, does. Once
    per model and machine; a no-op (a file check) after that. Only for an embedder with a
    cache of its own (a local model): a remote API is never sent the list."""
    if embedder.cache_dir is None:
        return
    try:
        generic.prepare(embedder)
    except VaultmemError:
        pass  # the next run tries again; until then the gate works without them
