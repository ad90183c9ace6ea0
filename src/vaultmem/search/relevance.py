"""The relevance gate: for each of a query's fused hits (`fusion`), whether it reaches the user
as full text, as a one-line pointer, or not at all (`Verdict`, `Delivery`, `Drop`).

Content-free prompts never get here (`prompt.is_content_free`: nothing is searched).

Design decisions:
- Graded, not binary. A wrong "yes" used to inject 2,500 characters of noise and a wrong "no"
  lost the answer; a pointer (path, title, heading, why) costs the agent ~80 characters and it
  reads the note with the MCP `get` tool if it judges it relevant, so the doubtful middle gets
  pointers and only strong evidence gets full text.
- Per note. Each hit is judged on its own evidence (`Signals`): a note that shares nothing with
  the prompt does not ride along because another note was strong.
- Signals that adapt to the vault rather than thresholds that fit one corpus: how far the
  note's cosine stands above the query's own candidates (`lift`: a vault where every note is
  0.82 from an English prompt says nothing at 0.82), how rare the matched words are in this
  vault (`lexical`, `unique`), how much of the query's rare vocabulary the note holds
  (`coverage`), whether the prompt is closer to generic coding work than to the note
  (`generic`, and `agnostic_generic` by the second opinion).
- Two questions, two models: does this vault answer the prompt at all (the prompt's score, from
  its first hits together), and is this note one of the answers (the hit's score). Both are
  logistic models read in nats, fitted per embedding model on six dev corpora of different
  shapes, each corpus reported only with a fit made without it (bench/relevance.py,
  leave-one-corpus-out); they live in the model's profile (`profiles.Fusion`, `Calibration`).
- A second, language-agnostic opinion where a long-lived process can afford it: the warm
  service and the MCP server also ask Universal Sentence Encoder multilingual
  (`second_opinion`), which adds its own candidate list and every candidate's cosine by it
  (`agnostic`, and `agnostic_lift` over the judged notes' median). multilingual-e5-small puts
  unrelated English prompts closer to a Chinese vault than its real questions; USE, trained to
  align translations, tells them apart better. Those searches are weighed by the profile's
  `second_calibration`, fitted with the two signals; a cold process (the hook without its
  service, `vaultmem query`) keeps the e5-only `calibration` (loading USE costs ~1.3 s).
- VAULTMEM_GATE moves every band (the prompt's, a note's pointer and text bands) by the same
  number of nats.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from .hits import Delivery, Hit


class Outcome(StrEnum):
    """What one prompt delivers: the strongest band any of its hits reached."""

    NOTES = "notes"
    POINTERS = "pointers"
    NOTHING = "nothing"


class Drop(StrEnum):
    """Why the gate left a hit out."""

    NO_ANSWER = "no-answer"  # the prompt is below its band: the vault does not answer it
    NO_EVIDENCE = "no-evidence"  # the note's own evidence is below the pointer band
    BELOW_MIN_SCORE = "below-min-score"  # fused score under VAULTMEM_MIN_SCORE
    BEYOND_K = "beyond-k"  # relevant enough, but k better hits came first


# The signals, in the order of Calibration.weights.
SIGNALS = (
    "lift",
    "cross",
    "vector",
    "lexical",
    "coverage",
    "unique",
    "generic",
    "agnostic",
    "agnostic_lift",
    "agnostic_generic",
)
# Cosine steps in which `lift` is measured (hundredths: the spread of e5-style cosines).
LIFT_UNIT = 0.01
# A term counts as `unique` evidence when no other chunk of the vault holds it; single Latin
# letters and two-letter Latin words are left out (an "ls", a "go" is no name).
UNIQUE_MIN_LATIN = 3
UNIQUE_FULL_CHUNKS = 100
# Pseudo-chunks in the idf of `coverage` (as fusion.LEXICAL_PRIOR_CHUNKS).
PRIOR_CHUNKS = 100


@dataclass(frozen=True)
class QueryStats:
    """What the gate knows about the query as a whole (from the candidate statement)."""

    script: str | None
    cosines: tuple[float, ...]  # the vector candidates' cosines (chunks), any order
    terms: tuple[str, ...]
    term_df: tuple[int, ...]  # chunks of the vault holding each term (0: none)
    n_chunks: int
    # The prompt's cosine to the closest generic coding request (`embed.generic`); None when
    # the model's profile does not use them.
    generic_similarity: float | None = None
    # The median of the second opinion's cosines over the judged window's hits (`Hit.agnostic`);
    # None when no second opinion was asked.
    agnostic_median: float | None = None
    # The prompt's cosine by the second opinion to the closest generic coding request
    # (`embed.generic`, embedded by that model too); None without a second opinion.
    agnostic_generic: float | None = None

    # What every hit's signals read of the query, derived once per query rather than once per
    # hit (cached on the instance: a frozen dataclass keeps its __dict__).

    @functools.cached_property
    def median_cosine(self) -> float | None:
        return statistics.median(self.cosines) if self.cosines else None

    @functools.cached_property
    def weakest_cosine(self) -> float | None:
        return min(self.cosines) if self.cosines else None

    @functools.cached_property
    def document_frequency(self) -> dict[str, int]:
        """Each counted term's chunk count (single letters and two-letter Latin words out)."""
        return {t: d for t, d in zip(self.terms, self.term_df, strict=False) if _counts(t)}

    @functools.cached_property
    def rarity(self) -> dict[str, float]:
        """Each counted term's idf in this vault (terms no chunk holds are the rarest)."""
        n = max(self.n_chunks, 1)
        return {t: _idf(d, n) for t, d in self.document_frequency.items()}

    @functools.cached_property
    def total_rarity(self) -> float:
        return sum(self.rarity.values())

    @functools.cached_property
    def unique_weight(self) -> float:
        """What a word no other chunk holds is worth here, 0..1: little in a vault of four notes
        (most words are in one note there), full from UNIQUE_FULL_CHUNKS chunks on."""
        return min(1.0, math.log1p(max(self.n_chunks, 1)) / math.log1p(UNIQUE_FULL_CHUNKS))


@dataclass(frozen=True)
class Signals:
    """One hit's evidence, each signal on its own scale (see SIGNALS)."""

    lift: float  # cosine above the median of the query's vector candidates, in LIFT_UNITs
    cross: float  # 1.0 for a note in another script than the query
    vector: float  # fusion's vector evidence: cosine above the model's pair ceiling, in nats
    lexical: float  # fusion's lexical evidence, nats (0: no word in common)
    coverage: float  # share of the query's word rarity (idf) that the note holds, 0..1
    unique: float  # up to 1.0 if the note holds a query word no other chunk holds
    # How much closer the prompt is to generic coding work ("add type hints to this function")
    # than to this note, in LIFT_UNITs (0 when the profile has no generic requests)
    generic: float
    # The second opinion (`Hit.agnostic`), in LIFT_UNITs: its cosine, and that cosine above the
    # median of the judged hits' (0 for both without a second opinion)
    agnostic: float = 0.0
    agnostic_lift: float = 0.0
    # How much closer the second opinion puts the prompt to generic coding work than to this
    # note, in LIFT_UNITs (0 without a second opinion): `generic` by a model that tells a
    # request to change code from a question about a note better than e5 does across
    # languages and on long conversational notes
    agnostic_generic: float = 0.0

    def vector_of(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in SIGNALS)


def _idf(df: int, n: int) -> float:
    return math.log((n + PRIOR_CHUNKS) / (df + 0.5))


def _counts(term: str) -> bool:
    return not (term.isascii() and len(term) < UNIQUE_MIN_LATIN)


def signals(hit: Hit, stats: QueryStats) -> Signals:
    """The evidence `hit` carries for the query (pure: no database, no model)."""
    cross = (
        stats.script is not None and hit.note_script is not None and hit.note_script != stats.script
    )
    median = stats.median_cosine
    cosine = hit.vector_score
    if cosine is None and not hit.vector_imputed:
        cosine = stats.weakest_cosine  # not among the vector candidates: at most the weakest
    lift = (cosine - median) / LIFT_UNIT if cosine is not None and median is not None else 0.0
    rarity, total = stats.rarity, stats.total_rarity
    held = sum(rarity[t] for t in hit.matched if t in rarity)
    df = stats.document_frequency
    unique = any(df.get(t) == 1 for t in hit.matched)
    return Signals(
        lift=lift,
        cross=1.0 if cross else 0.0,
        vector=hit.vector_evidence if hit.vector_evidence is not None else 0.0,
        lexical=min(max(hit.lexical_evidence or 0.0, 0.0), 12.0),
        coverage=0.0 if cross or total <= 0 else held / total,
        unique=stats.unique_weight if unique else 0.0,
        generic=(
            (stats.generic_similarity - cosine) / LIFT_UNIT
            if stats.generic_similarity is not None and cosine is not None
            else 0.0
        ),
        agnostic=hit.agnostic / LIFT_UNIT if hit.agnostic is not None else 0.0,
        agnostic_lift=(
            (hit.agnostic - stats.agnostic_median) / LIFT_UNIT
            if hit.agnostic is not None and stats.agnostic_median is not None
            else 0.0
        ),
        agnostic_generic=(
            (stats.agnostic_generic - hit.agnostic) / LIFT_UNIT
            if hit.agnostic is not None
            and stats.agnostic_generic is not None
            and stats.agnostic_median is not None
            else 0.0
        ),
    )


# The prompt-level decision reads the first PROMPT_WINDOW hits of the ranking: the best and
# second-best hit scores, and the largest value of each signal among them.
PROMPT_WINDOW = 5
PROMPT_SIGNALS = ("best", "second", *(f"max_{name}" for name in SIGNALS))


def prompt_features(
    scores: Sequence[float], vectors: Sequence[Sequence[float]]
) -> tuple[float, ...]:
    """The prompt-level features (PROMPT_SIGNALS) from its first hits' scores and signal
    vectors (`Signals.vector_of`), best first."""
    scores = list(scores[:PROMPT_WINDOW])
    vectors = list(vectors[:PROMPT_WINDOW])
    ranked = sorted(scores, reverse=True)
    best = ranked[0]
    second = ranked[1] if len(ranked) > 1 else best
    return (best, second, *(float(max(col)) for col in zip(*vectors, strict=True)))


@dataclass(frozen=True)
class Calibration:
    """How signals become scores, and the bands. Two logistic models, both read in nats:

    - a hit's score (`hit_weights` over SIGNALS): the log-odds that this note is relevant;
    - the prompt's score (`prompt_weights` over PROMPT_SIGNALS): the log-odds that the vault
      answers the prompt at all, from its first hits taken together.

    A hit is delivered as a pointer when the prompt scores at least `prompt` and the hit at
    least `hit_pointer` (each note needs evidence of its own), as text when the hit also
    scores at least `hit_text`. VAULTMEM_GATE adds its level to every band."""

    hit_weights: tuple[float, ...]
    hit_bias: float
    prompt_weights: tuple[float, ...]
    prompt_bias: float
    prompt: float
    hit_pointer: float
    hit_text: float
    # From here to hit_text a note is delivered as a short passage (its lines that hold the
    # prompt's words) rather than a pointer; inf: no passage band (bench/delivery.py chooses it,
    # leave-one-corpus-out, so that everyday coding prompts rarely get one)
    hit_passage: float = math.inf
    # A pointer-band note is delivered as its passage when those lines hold at least this share
    # of the prompt's word rarity (`agent.delivery`); inf: never. Chosen with hit_passage.
    passage_coverage: float = math.inf

    def __post_init__(self) -> None:
        if len(self.hit_weights) != len(SIGNALS):
            raise ValueError(f"{len(SIGNALS)} hit weights needed, not {len(self.hit_weights)}")
        if len(self.prompt_weights) != len(PROMPT_SIGNALS):
            raise ValueError(
                f"{len(PROMPT_SIGNALS)} prompt weights needed, not {len(self.prompt_weights)}"
            )

    def to_dict(self) -> dict[str, object]:
        """The calibration as a fitted file holds it (`bench/fits/`): signal names beside the
        weights, and null for a band that is never reached."""
        return {
            "hit_weights": dict(zip(SIGNALS, self.hit_weights, strict=True)),
            "hit_bias": self.hit_bias,
            "prompt_weights": dict(zip(PROMPT_SIGNALS, self.prompt_weights, strict=True)),
            "prompt_bias": self.prompt_bias,
            **{
                name: None if math.isinf(getattr(self, name)) else getattr(self, name)
                for name in ("prompt", "hit_pointer", "hit_text", "hit_passage", "passage_coverage")
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        """The calibration of a fitted file (`to_dict`); a weight per signal, by name."""
        hit, prompt = data["hit_weights"], data["prompt_weights"]
        if set(hit) != set(SIGNALS) or set(prompt) != set(PROMPT_SIGNALS):
            raise ValueError("a fitted calibration names other signals than the gate reads")

        def band(name: str, missing: float) -> float:
            value = data.get(name)
            return missing if value is None else float(value)

        return cls(
            tuple(float(hit[n]) for n in SIGNALS),
            float(data["hit_bias"]),
            tuple(float(prompt[n]) for n in PROMPT_SIGNALS),
            float(data["prompt_bias"]),
            band("prompt", math.inf),
            band("hit_pointer", math.inf),
            band("hit_text", math.inf),
            band("hit_passage", math.inf),
            band("passage_coverage", math.inf),
        )

    def score(self, s: Signals) -> float:
        return self.hit_bias + sum(
            w * x for w, x in zip(self.hit_weights, s.vector_of(), strict=True)
        )

    def band(self, score: float, level: float = 0.0) -> Delivery | None:
        """How a note with this score would be delivered once its prompt is answered."""
        if score >= self.hit_text + level:
            return Delivery.TEXT
        if score >= self.hit_passage + level:
            return Delivery.PASSAGE
        return Delivery.POINTER if score >= self.hit_pointer + level else None

    def prompt_score(self, features: Sequence[float]) -> float:
        return self.prompt_bias + sum(
            w * x for w, x in zip(self.prompt_weights, features, strict=True)
        )


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one hit: delivered (as text or a pointer), or dropped and why."""

    hit: Hit
    drop: Drop | None = None
    delivery: Delivery | None = None
    score: float = -math.inf  # the hit's calibrated score, nats
    signals: Signals | None = None
    prompt_score: float = -math.inf  # the prompt's calibrated score, nats (same for all hits)
    # The calibration it was judged by (the profile's, or its lexical-only one)
    calibration: Calibration | None = None
    # What the gate read of the query as a whole (the same for all of a query's verdicts)
    stats: QueryStats | None = None

    @property
    def kept(self) -> bool:
        return self.drop is None


def outcome_of(hits: Sequence[Hit]) -> Outcome:
    """What delivering these hits amounts to: notes if any is text or a passage, else pointers,
    else nothing."""
    kept = {h.delivery for h in hits}
    if Delivery.TEXT in kept or Delivery.PASSAGE in kept:
        return Outcome.NOTES
    return Outcome.POINTERS if Delivery.POINTER in kept else Outcome.NOTHING


class Profile(Protocol):
    """What the gate reads of a model's profile (`profiles.Fusion`): its calibrations. A
    protocol, so that the profiles, which hold `Calibration` values, import this module and
    not the other way round."""

    @property
    def calibration(self) -> Calibration: ...
    @property
    def lexical_calibration(self) -> Calibration: ...
    @property
    def second_calibration(self) -> Calibration | None: ...


def calibration_for(fusion: Profile, stats: QueryStats) -> Calibration:
    """The calibration a search is judged by: without a single vector candidate (a lexical
    search, a vault before its first vectors) the lexical-only one, fitted on such searches;
    with the second opinion's cosines the one fitted with them; else the profile's own."""
    if not stats.cosines:
        return fusion.lexical_calibration
    if stats.agnostic_median is not None and fusion.second_calibration is not None:
        return fusion.second_calibration
    return fusion.calibration


def gate(
    hits: Sequence[Hit],
    *,
    fusion: Profile,
    stats: QueryStats,
    min_score: float = 0.0,
    k: int = 5,
    level: float = 0.0,
) -> list[Verdict]:
    """A verdict per hit, in the ranking's order: text, pointer, or dropped.

    The prompt is judged first, on its first PROMPT_WINDOW hits together (does this vault
    answer it at all?); then each hit on its own evidence (`signals`), so a note that shares
    nothing with the prompt never rides along with a strong one. Both scores are weighed by
    the model's `Calibration`; `level` (VAULTMEM_GATE) moves every band. At most `k` hits are
    delivered, in ranking order (a pointer may come before a text hit ranked below it)."""
    cal = calibration_for(fusion, stats)
    sigs = [signals(h, stats) for h in hits]
    scores = [cal.score(s) for s in sigs]
    vectors = [s.vector_of() for s in sigs]
    p = cal.prompt_score(prompt_features(scores, vectors)) if hits else -math.inf
    answers = p >= cal.prompt + level
    out: list[Verdict] = []
    kept = 0
    for rank, (h, sig, score) in enumerate(zip(hits, sigs, scores, strict=True)):
        delivery = cal.band(score, level)
        drop: Drop | None = None
        if not answers:
            drop = Drop.NO_ANSWER
        elif rank >= max(k, PROMPT_WINDOW):
            # Only the ranking's first places are judged (the models were fitted on them): a
            # note ranked 40th is not offered because its own signals happen to be fair.
            drop = Drop.BEYOND_K
        elif delivery is None:
            drop = Drop.NO_EVIDENCE
        elif h.score < min_score:
            drop = Drop.BELOW_MIN_SCORE
        elif kept >= k:
            drop = Drop.BEYOND_K
        else:
            kept += 1
        out.append(Verdict(h, drop, delivery if drop is None else None, score, sig, p, cal, stats))
    return out
