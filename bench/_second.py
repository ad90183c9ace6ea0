"""The second opinion (`search.second_opinion`) offline, for `relevance.py`: USE multilingual's
vectors of the dev collection's prompts and judged chunks (embedded as the product embeds them,
`index.markdown.embedding_input`), cached under VAULTMEM_BENCH_DIR, and each dumped prompt's hits
and statistics as the library's own `search.with_second_opinion` marks them."""

from __future__ import annotations

import dataclasses
import pickle
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from _corpora import bench_dir

from vaultmem.embed.use import UseEmbedder
from vaultmem.index.markdown import embedding_input
from vaultmem.search import Fusion, SecondOpinion, with_second_opinion
from vaultmem.search.relevance import PROMPT_WINDOW

K = 5
WINDOW = max(K, PROMPT_WINDOW)


def chunk_text(hit: Any) -> str:
    return embedding_input(hit.heading, hit.text)


class CachedOpinion(SecondOpinion):
    """The second opinion from vectors computed beforehand (keyed by the text embedded)."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors

    @property
    def model_id(self) -> str:
        return UseEmbedder.model_id

    def cosines(self, conn: Any, query: str, hits: Sequence[Any]) -> list[float] | None:
        q = self.vectors[query]
        return [float(self.vectors[chunk_text(h)] @ q) for h in hits]


def vectors_for(searched: Sequence[Any]) -> dict[str, np.ndarray]:
    """USE vectors of every prompt and judged chunk of `searched`, from the cache or embedded
    now (and cached)."""
    texts = {s.prompt.text for s in searched if s.hits and not s.content_free}
    texts |= {chunk_text(h) for s in searched if not s.content_free for h in s.hits[:WINDOW]}
    path = bench_dir() / "use-second-opinion.pkl"
    cache: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.is_file() else {}
    todo = sorted(t for t in texts if t not in cache)
    if todo:
        model, t0 = UseEmbedder(), time.perf_counter()
        for i in range(0, len(todo), 32):
            batch = todo[i : i + 32]
            for t, v in zip(batch, model.embed_documents(batch), strict=True):
                cache[t] = np.asarray(v, dtype=np.float32)
            if i % 1024 == 0:
                print(
                    f"  USE: {i + len(batch)}/{len(todo)} texts, {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(cache))
        tmp.replace(path)
    return {t: cache[t] for t in texts}


def with_opinion(searched: Sequence[Any], fusion: Fusion) -> list[Any]:
    """`searched` as a long-lived process judges it: hits and stats with the second opinion."""
    opinion = CachedOpinion(vectors_for(searched))
    out = []
    for s in searched:
        if s.content_free or not s.hits:
            out.append(s)
            continue
        hits, stats = with_second_opinion(
            None, s.prompt.text, list(s.hits), s.stats, fusion, opinion, k=K
        )
        out.append(dataclasses.replace(s, hits=hits, stats=stats))
    return out
