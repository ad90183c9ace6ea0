"""The second opinion: a language-agnostic model's view of the prompt, as a candidate list of
its own and as the gate's evidence.

multilingual-e5-small ranks well within a language, but across scripts its cosines say little:
unrelated English prompts sit closer to a Chinese vault than its real English questions do, and
on long English conversations it puts the answer to a Chinese question in the first five for
one question in five (issue 27, `bench/use_ranking.py`). Universal Sentence Encoder
multilingual v3 was trained to align translations. The candidate statement adds its own
candidate list (weighed by `Fusion.agnostic_weight`, its first `Fusion.agnostic_candidates`)
and every candidate's cosine by it (`candidates.AgnosticQuery`), and the gate reads that
cosine (`Hit.agnostic`) as two more signals (`relevance.Signals.agnostic`, `agnostic_lift`),
and the prompt's cosine by it to the closest generic coding request (`agnostic_generic`, as
e5's `generic`), under the profile's `second_calibration`; the weight and the calibration are
chosen leave-one-corpus-out by `bench/relevance.py`.

Design decisions:
- Where the process can afford the model (~1.3 s to load): the warm service and the MCP server
  (in the background: until it is ready their searches are judged without it), and the one-shot
  commands `vaultmem context` and `vaultmem query`. The cold hook, bound by Claude Code's hook
  timeout, never loads it and keeps the e5-only calibration.
- One query embedding (~1 ms); the chunks' vectors are compared in the database.
- Read by line for the judged window (`retrieval.by_line`): the model was trained on sentences,
  and a 1,500-character chunk of a meeting log averages forty turns, so the line that answers a
  Chinese question drowns (its chunk is first for 5 % of `_meetings`' Chinese questions, the
  line for 81 %: bench/README, "Where the long-note and cross-language answers are lost"). The
  fill also keeps a vector per line (`memory_primary.agnostic_lines`, float16), the judged
  hits' are read in one query, and each judged hit's cosine is the larger of its chunk's and
  its best line's, as the calibration was fitted (`bench/_line_opinion.py`, `chunkmax`); the
  passage of a note in another language is anchored on that line (`Hit.agnostic_line`). A
  judged hit whose lines are not filled yet keeps its chunk's cosine and wakes the fill.
- Each chunk's vector is kept on its row (`memory_primary.agnostic`, with the model's id), so
  its list is one partial HNSW index scan filtered by vault, as the embedding's list is (from
  the shared cache alone the planner could only scan every vector of the vault, ~8 ms a prompt
  per 1,000 chunks). It is also kept in the shared cache by content hash, so a chunk written
  again (an edit elsewhere in its note, a rename) gets it back without the model, and `vaultmem
  gc` and quarantine drop it with the chunk.
- Filled after the chunk's own vector: by the ingester once its backlog is empty (so a new
  vault has them when `vaultmem init` finishes), and by the warm service in the background (at
  the lowest CPU priority, pausing while it answers a request). Only by a role that may write
  the vault: a shared vault's are filled by its owner's ingester.
- A prompt never waits for one: if a judged chunk has no vector yet (a note just committed),
  that search is judged without the opinion and the warm service's fill is woken.
- It is an opinion, never a requirement: any failure leaves the search judged without it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from ..embed import Embedder
    from .candidates import AgnosticQuery

log = logging.getLogger(__name__)

__all__ = ["SecondOpinion"]


class SecondOpinion:
    """A loaded language-agnostic embedder, and the prompt-to-chunk cosines it gives."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        # Set when a search met a chunk whose vector is not filled yet (wakes the fill).
        self.missing = threading.Event()
        # A prompt embedded ahead (`answered`): its text and vector.
        self._ahead: tuple[str, Any] | None = None

    @classmethod
    def load(cls) -> SecondOpinion | None:
        """A second opinion with a model of its own (`embed.second_opinion.new_model`, ~1.3 s),
        for a process that keeps it (the warm service); None where it cannot run here. It is no
        second opinion for a vault whose own model it is: callers ask
        `embed.second_opinion.wanted` first."""
        from ..embed import generic
        from ..embed.second_opinion import new_model

        model = new_model()
        if model is None:
            return None
        generic.vectors(model)  # the generic requests, embedded once, before the first prompt
        return cls(model)

    @classmethod
    def shared(cls) -> SecondOpinion | None:
        """This process's second opinion, on the model every caller in it shares
        (`embed.second_opinion.shared_model`): `vaultmem context` and `query`."""
        from ..embed.second_opinion import shared_model

        with _shared_lock:
            if not _shared:
                model = shared_model()
                _shared.append(cls(model) if model is not None else None)
            return _shared[0]

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    def query(self, text: str, *, candidates: bool = True) -> AgnosticQuery | None:
        """The prompt as the candidate statement asks the second opinion about it
        (`candidates.AgnosticQuery`; `candidates`: its own list too, not only each candidate's
        cosine); None when the model fails (judged without it)."""
        from .candidates import AgnosticQuery

        try:
            ahead = self._ahead
            vector = ahead[1] if ahead and ahead[0] == text else self.embedder.embed_query(text)
            return AgnosticQuery(self.model_id, vector, candidates, self.generic(vector))
        except Exception as exc:  # noqa: BLE001 - an opinion: the search goes on without it
            log.warning("second opinion unavailable: %s", type(exc).__name__)
            return None

    def generic(self, vector: Any) -> float:
        """The prompt's (`vector`) cosine to the closest generic coding request by this model
        (`embed.generic`: its 189 texts embed in ~0.1 s, once a process, kept in memory)."""
        import numpy as np

        from ..embed import generic

        matrix = generic.vectors(self.embedder)
        assert matrix is not None  # embedded when not cached
        return float(np.max(matrix @ np.asarray(vector, dtype=np.float32)))

    def answered(self, text: str) -> SecondOpinion:
        """This opinion with the prompt `text` embedded now, for a warm search to use later.
        Called before the vault model's prefetch thread starts (`embed.prefetching`): in a
        thread of its own beside it the two models contend for the interpreter, and the warm
        search was no faster (measured at 5,000 chunks), so it runs first, on its own. Itself,
        on a model error (the search then asks again and goes on without it)."""
        try:
            vector = self.embedder.embed_query(text)
        except Exception:  # noqa: BLE001 - `query` reports it when the search asks
            return self
        twin = SecondOpinion(self.embedder)
        twin.missing = self.missing  # wakes this opinion's fill
        twin._ahead = (text, vector)
        return twin

    def fill(
        self,
        conn: psycopg.Connection[Any],
        vault_id: int,
        *,
        go_on: Callable[[], bool],
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Give the vault's chunks their vector from this model (`index.agnostic.fill`)."""
        from ..index import agnostic

        model = self.embedder
        return agnostic.fill(
            conn,
            vault_id,
            model.model_id,
            model.dimension,
            lambda: model,
            go_on=go_on,
            progress=progress,
        )


_shared_lock = threading.Lock()
_shared: list[SecondOpinion | None] = []
