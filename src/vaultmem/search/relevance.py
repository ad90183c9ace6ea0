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
  (`coverage`) and how much of it the vault has never seen (`unknown`), whether the prompt is
  closer to generic coding work than to the note (`generic`). The weights that turn them into one score, in nats
  (log-odds that the note is relevant), are fitted per embedding model on six dev corpora of
  different shapes, each reported only with weights fitted without it (bench/relevance.py,
  leave-one-corpus-out); they live in the model's `fusion.Fusion` profile (`Calibration`).
- VAULTMEM_GATE moves both bands by the same number of nats.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fusion import Fusion, Hit


class Delivery(StrEnum):
    """How a kept hit reaches the user."""

    TEXT = "text"  # the note's text, in the fenced block
    POINTER = "pointer"  # one line: path, title, heading, why; the agent reads it with `get`


class Outcome(StrEnum):
    """What one prompt delivers: the strongest band any of its hits reached."""

    NOTES = "notes"
    POINTERS = "pointers"
    NOTHING = "nothing"


class Drop(StrEnum):
    """Why the gate left a hit out."""

    NO_EVIDENCE = "no-evidence"  # below the pointer band
    BELOW_MIN_SCORE = "below-min-score"  # fused score under VAULTMEM_MIN_SCORE
    BEYOND_K = "beyond-k"  # relevant enough, but k better hits came first


# The signals, in the order of Calibration.weights.
SIGNALS = ("lift", "cross", "vector", "lexical", "coverage", "unknown", "unique", "generic")
# Cosine steps in which `lift` is measured (hundredths: the spread of e5-style cosines).
LIFT_UNIT = 0.01
# A term counts as `unique` evidence when no other chunk of the vault holds it; single Latin
# letters and two-letter Latin words are left out (an "ls", a "go" is no name).
UNIQUE_MIN_LATIN = 3
# Pseudo-chunks in the idf of `coverage` and `unknown` (as fusion.LEXICAL_PRIOR_CHUNKS).
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

    @property
    def median_cosine(self) -> float | None:
        return statistics.median(self.cosines) if self.cosines else None


@dataclass(frozen=True)
class Signals:
    """One hit's evidence, each signal on its own scale (see SIGNALS)."""

    lift: float  # cosine above the median of the query's vector candidates, in LIFT_UNITs
    cross: float  # 1.0 for a note in another script than the query
    vector: float  # fusion's vector evidence: cosine above the model's pair ceiling, in nats
    lexical: float  # fusion's lexical evidence, nats (0: no word in common)
    coverage: float  # share of the query's word rarity (idf) that the note holds, 0..1
    unknown: float  # share of the query's word rarity that no note of the vault holds, 0..1
    unique: float  # 1.0 if the note holds a query word no other chunk holds
    # How much closer the prompt is to generic coding work ("add type hints to this function")
    # than to this note, in LIFT_UNITs (0 when the profile has no generic requests)
    generic: float

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
    if cosine is None and stats.cosines and not hit.vector_imputed:
        cosine = min(stats.cosines)  # not among the vector candidates: at most the weakest
    lift = (cosine - median) / LIFT_UNIT if cosine is not None and median is not None else 0.0
    df = {t: d for t, d in zip(stats.terms, stats.term_df, strict=False) if _counts(t)}
    n = max(stats.n_chunks, 1)
    rarity = {t: _idf(d, n) for t, d in df.items()}
    total = sum(rarity.values())
    held = sum(rarity[t] for t in hit.matched if t in rarity)
    unseen = sum(rarity[t] for t, d in df.items() if d == 0)
    unique = any(df.get(t) == 1 for t in hit.matched)
    return Signals(
        lift=lift,
        cross=1.0 if cross else 0.0,
        vector=hit.vector_evidence if hit.vector_evidence is not None else 0.0,
        lexical=min(max(hit.lexical_evidence or 0.0, 0.0), 12.0),
        coverage=0.0 if cross or total <= 0 else held / total,
        unknown=0.0 if total <= 0 else unseen / total,
        unique=1.0 if unique else 0.0,
        generic=(
            (stats.generic_similarity - cosine) / LIFT_UNIT
            if stats.generic_similarity is not None and cosine is not None
            else 0.0
        ),
    )


@dataclass(frozen=True)
class Calibration:
    """How signals become a score (nats: log-odds that the note is relevant) and the bands.

    `weights` follow SIGNALS. A hit is delivered as text at a score of at least `text`, as a
    pointer at `pointer`; VAULTMEM_GATE adds its level to both."""

    weights: tuple[float, ...]
    bias: float
    text: float
    pointer: float

    def __post_init__(self) -> None:
        if len(self.weights) != len(SIGNALS):
            raise ValueError(f"a calibration has {len(SIGNALS)} weights, not {len(self.weights)}")

    def score(self, s: Signals) -> float:
        return self.bias + sum(w * x for w, x in zip(self.weights, s.vector_of(), strict=True))


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one hit: delivered (as text or a pointer), or dropped and why."""

    hit: Hit
    drop: Drop | None = None
    delivery: Delivery | None = None
    score: float = -math.inf  # the calibrated score, nats
    signals: Signals | None = None

    @property
    def kept(self) -> bool:
        return self.drop is None


def outcome_of(hits: Sequence[Hit]) -> Outcome:
    """What delivering these hits amounts to: notes if any is text, else pointers, else nothing."""
    kept = {h.delivery for h in hits}
    if Delivery.TEXT in kept:
        return Outcome.NOTES
    return Outcome.POINTERS if Delivery.POINTER in kept else Outcome.NOTHING


def gate(
    hits: Sequence[Hit],
    *,
    fusion: Fusion,
    stats: QueryStats,
    min_score: float = 0.0,
    k: int = 5,
    level: float = 0.0,
) -> list[Verdict]:
    """A verdict per hit, in the ranking's order: text, pointer, or dropped.

    Each hit's score is its own (`signals`, weighed by the model's `Calibration`): at least
    `text + level` is delivered as text, at least `pointer + level` as a pointer, below that
    it is dropped. At most `k` hits are delivered, in ranking order (a pointer may come before
    a text hit ranked below it)."""
    cal = fusion.calibration
    out: list[Verdict] = []
    kept = 0
    for h in hits:
        sig = signals(h, stats)
        score = cal.score(sig)
        if score >= cal.text + level:
            delivery: Delivery | None = Delivery.TEXT
        elif score >= cal.pointer + level:
            delivery = Delivery.POINTER
        else:
            delivery = None
        if delivery is None:
            out.append(Verdict(h, Drop.NO_EVIDENCE, None, score, sig))
        elif h.score < min_score:
            out.append(Verdict(h, Drop.BELOW_MIN_SCORE, None, score, sig))
        elif kept >= k:
            out.append(Verdict(h, Drop.BEYOND_K, delivery, score, sig))
        else:
            out.append(Verdict(h, None, delivery, score, sig))
            kept += 1
    return out
