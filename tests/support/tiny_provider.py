"""An embedding provider as small as one can be, written as a new provider would be: this module
(its embedder and how the settings build it) and one registry entry (`SPEC`, which
tests/test_providers.py adds to `embed.providers.PROVIDERS`). Nothing else in vaultmem names it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vaultmem.config import Settings
from vaultmem.embed import BaseEmbedder, Embedder
from vaultmem.embed.base import Matrix, Vector, normalise
from vaultmem.embed.providers import ProviderSpec


class TinyEmbedder(BaseEmbedder):
    """Every text's vector is its length, folded into `dimension` slots."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.model_id = f"tiny:{dimension}"

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        rows = np.ones((len(texts), self.dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            row[len(text) % self.dimension] += 1.0
        return normalise(rows)

    def embed_query(self, text: str) -> Vector:
        return self.embed_documents([text])[0]


def build(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    """VAULTMEM_EMBEDDING_MODEL, when set, is the dimension (3 by default)."""
    return TinyEmbedder(int(model or "3"))


SPEC = ProviderSpec("tiny", build)
