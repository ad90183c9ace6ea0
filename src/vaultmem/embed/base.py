"""What every embedder is: the `Embedder` protocol, the defaults providers inherit
(`BaseEmbedder`), and the helpers they share.

Design decision: the optional capabilities (a directory for files derived from the model, being
told that the process lives long, a query vector already on its way) are part of the protocol,
each with a default in `BaseEmbedder`, so callers read them as plain attributes instead of
probing for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ..errors import EmbeddingError

__all__ = [
    "BaseEmbedder",
    "Embedder",
    "Matrix",
    "Vector",
    "check_dimension",
    "estimate_tokens",
    "normalise",
]

Vector = np.ndarray  # float32, shape (dimension,)
Matrix = np.ndarray  # float32, shape (n, dimension)


class Embedder(Protocol):
    """What the rest of vaultmem needs from an embedding model."""

    @property
    def model_id(self) -> str:
        """Stable id stored with every vector, "<provider>:<model>"; a new id means reindex."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector this embedder returns."""
        ...

    @property
    def cache_dir(self) -> Path | None:
        """Where files derived from the model are kept (an onnx graph, `generic`'s vectors);
        None where nothing derived from the model is worth keeping on disk."""
        ...

    @property
    def prefetching(self) -> bool:
        """True when a query vector is already being computed in another thread (a
        `prefetch.Prefetched`): a search then fetches its full-text list meanwhile."""
        ...

    def keep_warm(self) -> None:
        """Told once by a long-lived process (the warm service, the MCP server): an embedder
        may then load more up front to answer each query faster. Most need nothing."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        """Embed texts to index: float32 array, shape (len(texts), dimension), unit rows."""
        ...

    def embed_query(self, text: str) -> Vector:
        """Embed a search query: float32 array of shape (dimension,), unit length."""
        ...


class BaseEmbedder:
    """The optional capabilities' defaults, for providers (and test stand-ins) without them:
    no cache directory, no prefetched vector, nothing to do in a long-lived process."""

    @property
    def cache_dir(self) -> Path | None:
        return None

    @property
    def prefetching(self) -> bool:
        return False

    def keep_warm(self) -> None:
        return None


def check_dimension(model_id: str, got: int, expected: int | None) -> None:
    """Raise EmbeddingError when an embedder's `got` vector size is not the index's `expected`."""
    if expected is not None and got != expected:
        raise EmbeddingError(
            f"{model_id} makes {got}-dimensional vectors but the index holds "
            f"{expected}-dimensional ones: set VAULTMEM_EMBEDDING_PROVIDER and "
            "VAULTMEM_EMBEDDING_MODEL back to what the index was built with, or rebuild the index"
        )


def normalise(matrix: np.ndarray) -> Matrix:
    """Rows scaled to unit length (float32); an all-zero row stays zero rather than NaN."""
    out = np.ascontiguousarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def first_row(matrix: Matrix) -> Vector:
    """The vector of a one-text batch (what `embed_query` returns from `embed_documents`)."""
    row: Vector = matrix[0]
    return row


def estimate_tokens(text: str) -> int:
    """A cheap upper-ish bound on tokens: UTF-8 bytes / 3 (~1 per CJK char, ~1 per 3 ASCII)."""
    return len(text.encode("utf-8", "surrogatepass")) // 3 + 1
