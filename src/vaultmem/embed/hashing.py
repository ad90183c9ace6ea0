"""The "hash" provider, FOR TESTS ONLY: a deterministic hashed bag of words, with no notion of
meaning, so storage and ranking plumbing can be tested quickly and identically everywhere."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ..text import CJK_RE
from .base import BaseEmbedder, Matrix, Vector, first_row, normalise

__all__ = ["HashEmbedder"]

_WORD = re.compile(r"[^\W\d_]+|\d+", re.UNICODE)


class HashEmbedder(BaseEmbedder):
    """FOR TESTS ONLY: a deterministic hashed bag of words, no model, no meaning.

    Texts sharing words get similar vectors, which is enough to test storage and ranking
    plumbing quickly and identically on every machine. Words are NFKC-casefolded; CJK text is
    split into single characters. Empty text maps to a fixed unit vector.
    """

    DEFAULT_DIMENSION = 64

    def __init__(self, dimension: int = DEFAULT_DIMENSION) -> None:
        if dimension < 2:
            raise ConfigError(f"the hash embedder needs at least 2 dimensions, got {dimension}")
        self.dimension = dimension
        self.model_id = f"hash:v1-{dimension}"

    def _tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for word in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
            if CJK_RE.search(word):
                out.extend(word)
            else:
                out.append(word)
        return out

    def _embed(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for token in self._tokens(text):
            digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vec[value % self.dimension] += 1.0 if (value >> 32) & 1 else -1.0
        if not vec.any():
            vec[0] = 1.0
        return vec

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        return normalise(np.stack([self._embed(t) for t in texts]))

    def embed_query(self, text: str) -> Vector:
        return first_row(normalise(self._embed(text)[None, :]))
