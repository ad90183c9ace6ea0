"""Fit the relevance gate's calibration (`search.relevance.Calibration`) on dumped prompts
(`_devset.Searched`), and deliver through the library's own gate with it.

Two weighted, L2-regularised logistic regressions, fitted by Newton's method:
- the hit model, over the signals (`search.relevance.signals`) of each prompt's first
  PROMPT_WINDOW hits: a positive is one of the prompt's relevant notes; every hit of an
  unanswerable prompt is a negative;
- the prompt model, over the prompt-level features (`search.relevance.prompt_features`): a
  positive is an answerable prompt whose ungated first five hits hold an answer (the gate can
  only keep what the ranking found), a negative an unanswerable prompt.
Each training corpus weighs the same, and within one its positives and negatives weigh the same.
The bands are then chosen on the same training corpora (`choose_bands`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vaultmem.search import Fusion
from vaultmem.search.relevance import (
    PROMPT_SIGNALS,
    PROMPT_WINDOW,
    SIGNALS,
    Calibration,
    QueryStats,
    Verdict,
    gate,
    prompt_features,
    signals,
)

L2 = 1e-2
# The prompt band minimises, over the training corpora, the findable answers it loses and the
# unanswerable prompts it lets through, each in units of its bar (issue 27's acceptance):
# losing 3 % of same-language answers costs as much as letting 20 % of unanswerable prompts
# through, and 10 % of cross-language answers as much.
MISS_BAR = {"same": 0.03, "cross": 0.10}
NOISE_BAR = 0.20
# A relevant note below the hit band is lost even when the prompt passes: the band keeps all
# but HIT_MISS of the relevant notes among the first five of findable answerable prompts.
HIT_MISS = 0.01
# Full text: in no training corpus do more than TEXT_NOISE of the prompts it cannot answer
# get a note as text (the worst corpus sets the band: a small vault every technical prompt
# resembles is where full text costs most).
TEXT_NOISE = 0.03


@dataclass
class Row:
    corpus: str
    group: str  # same / cross, or the unanswerable set
    answerable: bool
    relevant: frozenset[str]
    hits: list[Any]  # search.Hit, with `matched` and `note_script` as the live search sets them
    stats: QueryStats | None  # None: content-free or no hits (nothing is searched)
    signals: np.ndarray  # hits x SIGNALS
    prompt: str = ""  # the prompt's text (what a pointer's reason is read from)

    @property
    def findable(self) -> bool:
        return any(h.path in self.relevant for h in self.hits[:5])

    @property
    def ungated(self) -> list[str]:
        return [h.path for h in self.hits]


def rows_of(corpus: str, searched: Sequence[Any]) -> list[Row]:
    out = []
    for s in searched:
        if s.content_free or not s.hits:
            none = np.zeros((0, len(SIGNALS)))
            out.append(
                Row(
                    corpus,
                    s.prompt.group,
                    bool(s.prompt.relevant),
                    s.prompt.relevant,
                    [],
                    None,
                    none,
                    s.prompt.text,
                )
            )
            continue
        sig = np.array([signals(h, s.stats).vector_of() for h in s.hits[: PROMPT_WINDOW * 2]])
        out.append(
            Row(
                corpus,
                s.prompt.group,
                bool(s.prompt.relevant),
                s.prompt.relevant,
                s.hits,
                s.stats,
                sig,
                s.prompt.text,
            )
        )
    return out


def _logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """Weights and bias (in the features' own units) of a weighted L2 logistic regression."""
    w = w / w.sum() * len(w)
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mu) / sd])
    beta = np.zeros(z.shape[1])
    ridge = L2 * len(x) * np.diag(np.r_[0.0, np.ones(len(beta) - 1)])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        g = z.T @ (w * (p - y)) + ridge @ beta
        h = (z * (w * p * (1 - p))[:, None]).T @ z + ridge
        step = np.linalg.solve(h, g)
        beta -= step
        if np.abs(step).max() < 1e-9:
            break
    weights = beta[1:] / sd
    return weights, float(beta[0] - (beta[1:] * mu / sd).sum())


def _balanced(rows: Sequence[Row], pick: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Examples from `pick(row) -> [(features, label)]`, weighted so that every corpus, and
    within it its positives and negatives, weigh the same."""
    xs, ys, ws = [], [], []
    for corpus in sorted({r.corpus for r in rows}):
        examples = [e for r in rows if r.corpus == corpus and r.stats for e in pick(r)]
        for label in (1.0, 0.0):
            part = [x for x, y in examples if y == label]
            for x in part:
                xs.append(x)
                ys.append(label)
                ws.append(1.0 / len(part))
    return np.array(xs), np.array(ys), np.array(ws)


def _hit_examples(r: Row) -> list[tuple[np.ndarray, float]]:
    n = min(PROMPT_WINDOW, len(r.hits))
    return [(r.signals[i], float(r.hits[i].path in r.relevant)) for i in range(n)]


def _prompt_vector(r: Row, hw: np.ndarray, hb: float) -> np.ndarray:
    scores = r.signals @ hw + hb
    return np.array(prompt_features(list(scores), list(r.signals)))


def _prompt_examples(hw: np.ndarray, hb: float) -> Any:
    def pick(r: Row) -> list[tuple[np.ndarray, float]]:
        if r.answerable and not r.findable:
            return []
        return [(_prompt_vector(r, hw, hb), float(r.answerable))]

    return pick


def fit(rows: Sequence[Row]) -> Calibration:
    hw, hb = _logistic(*_balanced(rows, _hit_examples))
    pw, pb = _logistic(*_balanced(rows, _prompt_examples(hw, hb)))
    draft = Calibration(tuple(hw), hb, tuple(pw), pb, 0.0, -np.inf, np.inf)
    return choose_bands(rows, draft)


def judged(r: Row, cal: Calibration) -> tuple[float, np.ndarray, list[float]]:
    """A searched row under `cal`'s two models: the prompt's score, the scores of its first
    PROMPT_WINDOW hits, and those of the relevant notes among them."""
    hw, hb = np.array(cal.hit_weights), cal.hit_bias
    first = (r.signals @ hw + hb)[: min(PROMPT_WINDOW, len(r.hits))]
    p = float(_prompt_vector(r, hw, hb) @ np.array(cal.prompt_weights) + cal.prompt_bias)
    rel = [float(first[i]) for i in range(len(first)) if r.hits[i].path in r.relevant]
    return p, first, rel


def choose_bands(rows: Sequence[Row], cal: Calibration) -> Calibration:
    """The bands for `cal`'s models on these (training) rows; see the constants above."""
    relevant_scores: list[float] = []
    per: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in rows:
        if r.stats is None:
            continue
        p, first, rel = judged(r, cal)
        mine = per.setdefault(r.corpus, {"same": [], "cross": [], "none": []})
        if r.answerable:
            if rel:
                relevant_scores += rel
                mine["cross" if r.group == "cross" else "same"].append((p, max(rel)))
        else:
            mine["none"].append((p, float(first.max())))
    hit_pointer = float(np.quantile(relevant_scores, HIT_MISS))
    arrays = {c: {k: np.array(v).reshape(-1, 2) for k, v in d.items()} for c, d in per.items()}

    def cost(t: float) -> float:
        total = 0.0
        for d in arrays.values():
            for key, bar in MISS_BAR.items():
                if len(d[key]):
                    kept = (d[key][:, 0] >= t) & (d[key][:, 1] >= hit_pointer)
                    total += float(1.0 - kept.mean()) / bar
            if len(d["none"]):
                let = (d["none"][:, 0] >= t) & (d["none"][:, 1] >= hit_pointer)
                total += float(let.mean()) / NOISE_BAR
        return total / len(arrays)

    grid = np.arange(-10.0, 6.0, 0.05)
    prompt = float(min(grid, key=cost))

    def full_text(t: float) -> float:
        """The largest share, over the training corpora, of prompts a corpus cannot answer
        that would get full text at text band `t`."""
        worst = 0.0
        for d in arrays.values():
            if len(d["none"]):
                got = (d["none"][:, 0] >= prompt) & (d["none"][:, 1] >= t)
                worst = max(worst, float(got.mean()))
        return worst

    hit_text = next(
        (float(t) for t in np.arange(hit_pointer, 12.0, 0.05) if full_text(t) <= TEXT_NOISE),
        12.0,
    )
    return dataclasses.replace(cal, prompt=prompt, hit_pointer=hit_pointer, hit_text=hit_text)


def rounded(cal: Calibration) -> Calibration:
    """The calibration as it is written into the source (search/profiles.py)."""
    return Calibration(
        tuple(round(float(w), 4) for w in cal.hit_weights),
        round(float(cal.hit_bias), 3),
        tuple(round(float(w), 4) for w in cal.prompt_weights),
        round(float(cal.prompt_bias), 3),
        round(cal.prompt, 2),
        round(cal.hit_pointer, 2),
        round(cal.hit_text, 2),
    )


def close(a: Calibration, b: Calibration, *, weight: float = 0.02, band: float = 0.1) -> bool:
    """Whether two calibrations are the same fit up to run-to-run noise (HNSW's approximate
    candidate tail moves a weight in its second decimal at most)."""
    weights = [
        *zip(a.hit_weights, b.hit_weights, strict=True),
        *zip(a.prompt_weights, b.prompt_weights, strict=True),
    ]
    bands = [
        (a.prompt, b.prompt),
        (a.hit_pointer, b.hit_pointer),
        (a.hit_text, b.hit_text),
        (a.hit_bias, b.hit_bias),
        (a.prompt_bias, b.prompt_bias),
    ]
    return all(abs(x - y) <= weight for x, y in weights) and all(
        abs(x - y) <= band for x, y in bands
    )


def deliver(row: Row, fusion: Fusion, *, level: float = 0.0, k: int = 5) -> list[Verdict]:
    """What the library's gate delivers for this prompt with `fusion` (its calibration)."""
    if row.stats is None:
        return []
    return gate(row.hits, fusion=fusion, stats=row.stats, k=k, level=level)


def fitted_path(provider: str) -> Path:
    """The fitted file of a provider's calibrations (bench/fits/<provider>.json): what
    search/profiles.py's constants are copied from, and what tests/test_relevance_gate.py
    checks them against."""
    return Path(__file__).parent / "fits" / f"{provider}.json"


def write_fitted(provider: str, field: str, cal: Calibration, *, passage: bool = False) -> None:
    """Record `cal` as the provider's fitted `field` (calibration, lexical_calibration,
    second_calibration): its weights and bands as profiles.py holds them (`rounded`), keeping
    the passage band and coverage bench/delivery.py chose; with `passage`, those two only."""
    path = fitted_path(provider)
    data = json.loads(path.read_text()) if path.is_file() else {}
    old = data.get(field)
    if passage:
        new = {**(old or {}), "hit_passage": cal.to_dict()["hit_passage"]}
        new["passage_coverage"] = cal.to_dict()["passage_coverage"]
    else:
        new = rounded(cal).to_dict()
        for key in ("hit_passage", "passage_coverage"):
            new[key] = (old or {}).get(key)
    data[field] = new
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def source_text(cal: Calibration) -> str:
    """The calibration as Python source, for search/profiles.py."""
    c = rounded(cal)
    return (
        "Calibration(\n"
        f"    # {', '.join(SIGNALS)}\n"
        f"    hit_weights={c.hit_weights},\n"
        f"    hit_bias={c.hit_bias},\n"
        f"    # {', '.join(PROMPT_SIGNALS)}\n"
        f"    prompt_weights={c.prompt_weights},\n"
        f"    prompt_bias={c.prompt_bias},\n"
        f"    prompt={c.prompt},\n"
        f"    hit_pointer={c.hit_pointer},\n"
        f"    hit_text={c.hit_text},\n"
        ")"
    )
