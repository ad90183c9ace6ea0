"""The warm path offline, for `relevance.py`: each prompt of a warm dump
(`_devset.load_or_dump_warm`: the second opinion's list and cosines in the candidate statement)
as the library's own `search.with_second_opinion` hands it to the gate."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from vaultmem.search import with_second_opinion

K = 5


def with_generic(warm: dict[float, list[Any]], opinion: Any) -> dict[float, list[Any]]:
    """A warm dump whose query stats lack the second opinion's generic similarity (dumped
    before it existed) with it, as the live search computes it (`SecondOpinion.query`)."""
    seen: dict[str, float | None] = {}

    def value(text: str) -> float | None:
        if text not in seen:
            asked = opinion.query(text)
            seen[text] = asked.generic_similarity if asked is not None else None
        return seen[text]

    out: dict[float, list[Any]] = {}
    for w, searched in warm.items():
        out[w] = [
            s
            if s.stats is None
            or getattr(s.stats, "agnostic_generic", None) is not None
            or not s.stats.cosines
            else dataclasses.replace(
                s, stats=dataclasses.replace(s.stats, agnostic_generic=value(s.prompt.text))
            )
            for s in searched
        ]
    return out


def judged(searched: Sequence[Any]) -> list[Any]:
    """`searched` with the query stats the gate reads the second opinion from."""
    out = []
    for s in searched:
        if s.content_free or not s.hits or not s.stats.cosines:  # nothing asked: no vectors
            out.append(s)
            continue
        hits, stats = with_second_opinion(list(s.hits), s.stats, None, k=K)
        out.append(dataclasses.replace(s, hits=hits, stats=stats))
    return out
