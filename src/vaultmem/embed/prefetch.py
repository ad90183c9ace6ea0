"""A prompt's query vector computed beside the database work that does not need it
(`prefetching`), for the long-lived processes that answer prompts (the warm service, the MCP
server)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from .base import Embedder, Matrix, Vector

__all__ = ["Prefetched", "prefetching"]


class Prefetched:
    """An embedder that started embedding one query in a background thread when it was made.

    Design decision: in a long-lived process (the warm service) the query embedding is the
    largest single step of a prompt's search, and the database work before it (finding the
    vault, the preferences, the index state, the full-text list) does not depend on it; the
    engines release the GIL, so both proceed at once. `embed_query` of that same text returns
    the prefetched vector (or raises its error); anything else goes to the wrapped embedder.
    Call `close` when done: it waits for a vector nobody asked for, so the engine never runs
    two embeddings at once. Only for local engines: a remote API is never sent a prompt that
    the search might not embed (a vault with no vectors from its model)."""

    def __init__(self, inner: Embedder, text: str) -> None:
        self.inner = inner
        self.text = text
        self._result: list[Vector] = []
        self._error: list[BaseException] = []
        self._worker = threading.Thread(target=self._run, name="vaultmem-prefetch", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        try:
            self._result.append(self.inner.embed_query(self.text))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the vector
            self._error.append(exc)

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    @property
    def cache_dir(self) -> Path | None:
        return self.inner.cache_dir

    @property
    def prefetching(self) -> bool:
        """Always: tells the search's candidate fetch that a vector is on its way, so it fetches
        the full-text list first."""
        return True

    def keep_warm(self) -> None:
        self.inner.keep_warm()

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        self.close()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vector:
        self.close()
        if text != self.text:
            return self.inner.embed_query(text)
        if self._error:
            raise self._error[0]
        return self._result[0]

    def close(self) -> None:
        """Wait until the background embedding has finished (at once if it has)."""
        self._worker.join()

    @staticmethod
    def suits(embedder: Embedder) -> bool:
        """Whether `embedder` runs here (not a remote API)."""
        from .openai_api import OpenAIEmbedder  # only its type: the openai package stays unloaded

        return not isinstance(embedder, OpenAIEmbedder)


@contextmanager
def prefetching(embedder: Embedder, text: str) -> Iterator[Embedder]:
    """`embedder`, already embedding the query `text` where it runs locally (a Prefetched),
    else as it is; on exit, waits for a prefetch nobody asked for."""
    if not Prefetched.suits(embedder):
        yield embedder
        return
    ahead = Prefetched(embedder, text)
    try:
        yield ahead
    finally:
        ahead.close()
