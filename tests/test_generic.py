"""The generic coding requests the relevance gate measures prompts against: both languages
the gate was calibrated on, embedded once per model and then read back from the cache file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vaultmem.embed import HashEmbedder, generic


@pytest.fixture(autouse=True)
def _no_memory() -> None:
    generic.forget()  # each test starts as a new process would


def test_the_requests_are_in_english_and_chinese() -> None:
    texts = generic.texts()
    assert len(texts) >= 100
    assert not any(t.startswith("#") for t in texts)
    assert any(t.isascii() for t in texts) and any("\u4e00" <= ch <= "\u9fff" for ch in texts[-1])


class CountingEmbedder(HashEmbedder):
    """A real (hashed) embedder that says how many texts it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded = 0

    def embed_documents(self, texts):  # type: ignore[no-untyped-def]
        self.embedded += len(texts)
        return super().embed_documents(texts)


def test_the_vectors_are_embedded_once_and_then_read_from_the_cache(tmp_path: Path) -> None:
    first = CountingEmbedder()
    m = generic.vectors(first, tmp_path)
    assert first.embedded == len(generic.texts())
    assert m.shape == (len(generic.texts()), first.dimension)
    (cached,) = tmp_path.glob("generic-*.npy")
    generic.forget()  # a new process
    second = CountingEmbedder()
    assert np.array_equal(generic.vectors(second, tmp_path), m)
    assert second.embedded == 0
    # A torn cache file is embedded again and replaced.
    cached.write_bytes(b"\x93NUMPY torn")
    generic.forget()
    third = CountingEmbedder()
    assert np.array_equal(generic.vectors(third, tmp_path), m)
    assert third.embedded == len(generic.texts())
    assert np.array_equal(np.load(cached), m)


def test_an_unwritable_cache_directory_costs_only_the_embedding(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    e = CountingEmbedder()
    assert generic.vectors(e, blocked / "models").shape[0] == len(generic.texts())


def test_a_search_never_embeds_them_and_uses_them_once_prepared(tmp_path: Path) -> None:
    class Cached(CountingEmbedder):
        cache_dir = tmp_path

    e = Cached()
    q = e.embed_query("rename this variable")
    assert generic.similarity(e, q) is None  # seconds of embedding: never on a hook's path
    assert e.embedded == 0 and not list(tmp_path.glob("generic-*.npy"))
    generic.prepare(e)  # what the ingest and the warm service do
    assert e.embedded == len(generic.texts())
    generic.forget()  # a new process finds them in the cache file
    m = np.load(next(tmp_path.glob("generic-*.npy")))
    assert generic.similarity(e, q) == pytest.approx(float(np.max(m @ q)), abs=1e-6)
    assert e.embedded == len(generic.texts())
