"""Fusion: one query's candidate rows (`candidates`) turned into its ranking, one hit per note,
each hit carrying the evidence the relevance gate (`relevance`) weighs.

Design decisions:
- Fusion is chosen per model (`profiles.FUSION_PROFILES`): relative score fusion (each list's scores
  rescaled to 0..1 and summed with weights; the default model's profile) or weighted reciprocal
  rank fusion. Both have one change for mixed-language vaults: full-text search cannot match a
  note written in another script than the query (an English question shares no tokens with a
  Chinese note), so a missing lexical match there says nothing about relevance. Plain fusion
  treats it as "not relevant" and lets same-language notes that merely share words bury the
  cross-language answer. For a candidate whose dominant script differs from the query's, the
  missing lexical part is imputed as equal to its vector part.
- A profile (`profiles.Fusion`) also holds the gate's calibrations for its model and its noise
  ceilings per language pair: one value per model says how its scores are read, so fusion,
  the gate and the ingest (`prepare_generic`) cannot disagree about it.
- Evidence is measured here, while each row is at hand, in nats: how rare the matched words
  are in this vault (`lexical_evidence`), how far the cosine is above the model's noise
  ceiling for the language pair (`vector_evidence`). The gate weighs each on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..embed import generic
from ..index.lexical import tokens
from .hits import Hit
from .profiles import Fusion, fusion_for
from .prompt import script_of

if TYPE_CHECKING:
    from ..embed import Embedder


def prepare_generic(embedder: Embedder) -> None:
    """Embed the gate's generic requests (module `generic`) for `embedder` if its profile uses
    them. For the ingest and the warm service: a search never embeds them."""
    if fusion_for(embedder.model_id).generic_requests:
        generic.prepare(embedder)


# Pseudo-chunks added to the vault's chunk count when judging how rare a word is (see
# lexical_evidence): a prior that any one word of a prompt is in at most 1 note of ~100.
LEXICAL_PRIOR_CHUNKS = 100


def lexical_evidence(
    matched: Iterable[str],
    term_df: Sequence[int] | None,
    terms: Sequence[str],
    n_chunks: int | None,
) -> float | None:
    """Nats of evidence that a chunk holding these query terms holds them for a reason.

    -ln of the number of chunks expected to hold all of them by chance, if terms fell on chunks
    independently at their document frequencies: sum of ln((N + N0) / df) over the matched
    terms, minus ln N. 0 means one chunk of the vault would be expected to match this much by
    chance; each nat more, e times fewer. It follows the index (a word in every note is worth
    nothing, one in a single note of 10,000 is worth 9 nats) and needs no language rules: a
    Chinese phrase matches as several rare bigrams, a common word as little. N0 =
    LEXICAL_PRIOR_CHUNKS pseudo-chunks that hold none of the terms keep a small vault's counts
    from being over-trusted (in a vault of 10 notes, a word in one of them is not "one note in
    ten" of everything one could ask about); in a large vault they change nothing. Single
    Latin letters (the "g" of "G-CSF") are no evidence. None when no term counts or the
    statistics are missing."""
    if term_df is None or not n_chunks:
        return None
    df = dict(zip(terms, term_df, strict=False))
    n = max(int(n_chunks), 1)
    kept = [df[t] for t in matched if df.get(t, 0) > 0 and not (len(t) == 1 and t.isascii())]
    if not kept:
        return None
    room = n + LEXICAL_PRIOR_CHUNKS
    return sum(math.log(room / min(d, n)) for d in kept) - math.log(n)


def vector_evidence(
    cosine: float | None, query_script: str | None, note_script: str | None, fusion: Fusion
) -> float | None:
    """A hit's vector evidence in nats: its cosine above the model's noise ceiling for the
    language pair (`Fusion.similarity_floor`), in units of `Fusion.cosine_per_nat`; None
    without a cosine. A hit with a vector that is not among the vector candidates is given the
    weakest candidate's cosine by the caller (an upper bound)."""
    if cosine is None:
        return None
    return (cosine - fusion.similarity_floor(query_script, note_script)) / fusion.cosine_per_nat


def fuse(
    rows: Sequence[dict[str, Any]],
    *,
    query: str,
    terms: Sequence[str],
    fusion: Fusion,
    use_vector: bool,
    use_lexical: bool,
    use_agnostic: bool = False,
) -> list[Hit]:
    """Weighted RRF or relative score fusion, with imputation; best chunk per note.

    `use_agnostic`: the rows also hold the second opinion's list (`urank`, weighed by
    `fusion.agnostic_weight`) and every candidate's cosine by it (`ucos`, kept as
    `Hit.agnostic` for the gate).

    A part is imputed (set equal to the other one) where its retriever could not have found the
    candidate, so its absence says nothing: a candidate in another script than the query (an
    English question, a Chinese note) cannot match its words, so when the vector search found
    it its missing lexical part is imputed from its vector part (otherwise same-language word
    matches would always bury it); a chunk still waiting in the embedding backlog cannot be a
    vector candidate, so its vector part is imputed from its lexical part (otherwise, while
    the backlog drains, a vector list drawn from a tenth of the chunks would outvote full text).
    """
    use_agnostic = use_agnostic and fusion.agnostic_weight > 0
    top = (
        (fusion.vector_weight if use_vector else 0.0)
        + (fusion.lexical_weight if use_lexical else 0.0)
        + (fusion.agnostic_weight if use_agnostic else 0.0)
    )
    # The best possible fused score, so that hit.score is 0..1: each part is at most 1 for
    # "score" and 1 / (k + 1) (rank 1) for RRF.
    best_part = 1.0 if fusion.method == "score" else 1.0 / (fusion.rrf_k + 1)
    norm = top * best_part if top > 0 else 1.0
    vector_part, lexical_part = _normalisers(rows, fusion, use_vector, use_lexical)
    agnostic_part = _agnostic_normaliser(rows, fusion) if use_agnostic else None
    qscript = script_of(query)
    term_set = set(terms)
    # The weakest vector candidate: a chunk with a vector that is not among them is at most
    # this similar to the query.
    cosines = [float(r["vscore"]) for r in rows if use_vector and r["vrank"] is not None]
    weakest = min(cosines) if cosines else None
    best: dict[str, Hit] = {}
    for r in rows:
        vrank, lrank = r["vrank"], r["lrank"]
        fused = 0.0
        vector_imputed = imputed = False
        if use_vector and vrank is not None:
            fused += fusion.vector_weight * vector_part(r)
        elif use_vector and lrank is not None and not r.get("has_vector", True):
            fused += fusion.vector_weight * lexical_part(r)
            vector_imputed = True
        if use_lexical and lrank is not None:
            fused += fusion.lexical_weight * lexical_part(r)
        if agnostic_part is not None and r.get("urank") is not None:
            fused += fusion.agnostic_weight * agnostic_part(r)
        cscript = script_of(r["content"])
        if (
            lrank is None
            and use_lexical
            and use_vector
            and vrank is not None
            and fusion.impute_cross_script
            and qscript is not None
            and cscript is not None
            and cscript != qscript
        ):
            fused += fusion.lexical_weight * vector_part(r)
            imputed = True
        matched = r.get("matched")
        if matched is None:
            indexed = f"{r['title']}\n{r['heading']}\n{r['content']}"
            matched = term_set.intersection(tokens(indexed))
        cosine = float(r["vscore"]) if r["vscore"] is not None else None
        if cosine is None and use_vector and r.get("has_vector", True):
            cosine = weakest
        hit = Hit(
            path=r["path"],
            chunk_index=r["chunk_index"],
            heading=r["heading"],
            text=r["content"],
            content_hash=r.get("content_hash") or "",
            line_map=tuple(r.get("line_map") or ()),
            agnostic=float(r["ucos"]) if r.get("ucos") is not None else None,
            title=r["title"],
            commit_sha=r["commit_sha"],
            tags=tuple(r["tags"] or ()),
            score=round(fused / norm, 6),
            fused=fused,
            vector_rank=vrank,
            vector_score=float(r["vscore"]) if r["vscore"] is not None else None,
            lexical_rank=lrank,
            lexical_score=float(r["lscore"]) if r["lscore"] is not None else None,
            lexical_imputed=imputed,
            vector_imputed=vector_imputed,
            matched_terms=len(matched),
            matched=frozenset(matched),
            note_script=cscript,
            lexical_evidence=lexical_evidence(matched, r.get("term_df"), terms, r.get("n_chunks")),
            vector_evidence=vector_evidence(cosine, qscript, cscript, fusion),
        )
        prev = best.get(hit.path)
        if prev is None or (hit.fused, -hit.chunk_index) > (prev.fused, -prev.chunk_index):
            best[hit.path] = hit
    hits = list(best.values())
    hits.sort(key=lambda h: (-h.fused, h.path))
    return hits


def _agnostic_normaliser(
    rows: Sequence[dict[str, Any]], fusion: Fusion
) -> Callable[[dict[str, Any]], float]:
    """The second opinion's list's contribution of one candidate row (as `_normalisers`)."""
    if fusion.method == "rrf":
        return lambda r: 1.0 / (fusion.rrf_k + r["urank"])
    cos = [float(r["ucos"]) for r in rows if r.get("urank") is not None and r["ucos"] is not None]
    lo, hi = (min(cos), max(cos)) if cos else (0.0, 0.0)
    return lambda r: (float(r["ucos"]) - lo) / (hi - lo) if hi > lo else 1.0


def _normalisers(
    rows: Sequence[dict[str, Any]], fusion: Fusion, use_vector: bool, use_lexical: bool
) -> tuple[Callable[[dict[str, Any]], float], Callable[[dict[str, Any]], float]]:
    """Each list's contribution of one candidate row, before weighting (0..1 for "score")."""
    k = fusion.rrf_k
    if fusion.method == "rrf":
        return (lambda r: 1.0 / (k + r["vrank"])), (lambda r: 1.0 / (k + r["lrank"]))
    cos = [float(r["vscore"]) for r in rows if use_vector and r["vrank"] is not None]
    bm25 = [float(r["lscore"]) for r in rows if use_lexical and r["lrank"] is not None]
    lo, hi = (min(cos), max(cos)) if cos else (0.0, 0.0)
    best_bm25 = max(bm25) if bm25 else 0.0

    def vector_part(r: dict[str, Any]) -> float:
        # Min-max: e5 cosines sit in a narrow band (unrelated ~0.78, relevant ~0.85), so
        # dividing by the best would flatten them; the spread among candidates is the signal.
        return (float(r["vscore"]) - lo) / (hi - lo) if hi > lo else 1.0

    def lexical_part(r: dict[str, Any]) -> float:
        # BM25 relative to the best match: 1.0 for it, a fraction for weaker ones.
        return float(r["lscore"]) / best_bm25 if best_bm25 > 0 else 1.0

    return vector_part, lexical_part
