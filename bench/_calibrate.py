"""Fit the relevance gate's calibration (`search.relevance.Calibration`) on dumped prompts
(`_devset.Searched`), and judge it leave-one-corpus-out.

A weighted logistic regression over the gate's signals (`search.relevance.signals`) of each
prompt's first GATE_HITS hits: a hit is a positive when it is one of the prompt's relevant
notes; every hit of an unanswerable prompt is a negative. Each corpus weighs the same, and within
one the answerable and unanswerable prompts weigh the same. The two bands are then chosen on
the same training corpora (`choose_bands`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vaultmem.search import script_of
from vaultmem.search.relevance import SIGNALS, Calibration, QueryStats, signals

GATE_HITS = 10
# The pointer band minimises, over the training corpora, the answers it loses and the
# unanswerable prompts it lets through, each in units of its bar (issue 27's acceptance):
# losing 3 % of same-language answers costs as much as letting 20 % of unanswerable prompts
# through. The text band lets at most TEXT_NOISE of the unanswerable prompts get full text.
MISS_BAR = {"same": 0.03, "cross": 0.10}
NOISE_BAR = 0.20
TEXT_NOISE = 0.03
L2 = 1e-2


@dataclass
class Row:
    corpus: str
    group: str  # same / cross / unanswerable set
    answerable: bool
    relevant: list[bool]  # per hit
    features: np.ndarray  # hits x signals
    ungated: list[str]  # paths, best first
    relevant_paths: frozenset[str]


def rows_of(corpus: str, searched: Sequence) -> list[Row]:
    out = []
    for s in searched:
        if s.content_free or not s.hits:
            out.append(
                Row(corpus, s.prompt.group, bool(s.prompt.relevant), [], np.zeros((0, len(SIGNALS))), [], s.prompt.relevant)
            )
            continue
        stats = QueryStats(
            script=script_of(s.prompt.text),
            cosines=tuple(s.cosines),
            terms=tuple(s.terms),
            term_df=tuple(s.term_df),
            n_chunks=s.n_chunks,
            generic_similarity=s.generic_similarity,
        )
        hits = s.hits[:GATE_HITS]
        feats = []
        for h in hits:
            h = dataclasses.replace(
                h,
                matched=s.matched.get((h.path, h.chunk_index), frozenset()),
                note_script=script_of(h.text),
            )
            feats.append(signals(h, stats).vector_of())
        out.append(
            Row(
                corpus,
                s.prompt.group,
                bool(s.prompt.relevant),
                [h.path in s.prompt.relevant for h in hits],
                np.array(feats, dtype=float),
                [h.path for h in s.hits],
                s.prompt.relevant,
            )
        )
    return out


def fit(rows: Sequence[Row], top: int = 5) -> tuple[np.ndarray, float]:
    """Weights and bias of a weighted, L2-regularised logistic regression (Newton's method)."""
    xs, ys, ws = [], [], []
    corpora = sorted({r.corpus for r in rows})
    for c in corpora:
        mine = [r for r in rows if r.corpus == c and len(r.relevant)]
        for answerable in (True, False):
            part = [r for r in mine if r.answerable == answerable]
            if not part:
                continue
            for r in part:
                n = min(top, len(r.relevant))
                for i in range(n):
                    xs.append(r.features[i])
                    ys.append(1.0 if r.relevant[i] else 0.0)
                    ws.append(1.0 / (len(part) * n))
    x = np.array(xs)
    y = np.array(ys)
    w = np.array(ws)
    w = w / w.sum() * len(w)
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mu) / sd])
    beta = np.zeros(z.shape[1])
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-z @ beta))
        g = z.T @ (w * (p - y)) + L2 * len(x) * np.r_[0.0, beta[1:]]
        hdiag = w * p * (1 - p)
        hm = (z * hdiag[:, None]).T @ z + L2 * len(x) * np.diag(np.r_[0.0, np.ones(len(beta) - 1)])
        step = np.linalg.solve(hm, g)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    weights = beta[1:] / sd
    bias = beta[0] - float((beta[1:] * mu / sd).sum())
    return weights, bias


def scores(row: Row, weights: np.ndarray, bias: float) -> np.ndarray:
    return row.features @ weights + bias if len(row.relevant) else np.zeros(0)


@dataclass
class Delivered:
    paths: list[str]  # text and pointers, in ranking order (k = 5)
    text: list[str]


def deliver(row: Row, s: np.ndarray, text: float, pointer: float, k: int = 5) -> Delivered:
    paths, full = [], []
    for i, path in enumerate(row.ungated[: len(s)]):
        if s[i] >= pointer and len(paths) < k:
            paths.append(path)
            if s[i] >= text:
                full.append(path)
    return Delivered(paths, full)


def choose_bands(rows: Sequence[Row], weights: np.ndarray, bias: float) -> tuple[float, float]:
    """(text, pointer) bands on these (training) rows, see the module docstring."""
    per: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        s = scores(r, weights, bias)
        mine = per.setdefault(r.corpus, {"same": [], "cross": [], "none": []})
        if r.answerable:
            rel = [s[i] for i in range(min(5, len(s))) if r.relevant[i]]
            if rel:  # findable: the ungated first five hold an answer
                mine["cross" if r.group == "cross" else "same"].append(max(rel))
        else:
            mine["none"].append(float(s[:5].max()) if len(s) else -np.inf)
    arrays = {c: {k: np.array(v) for k, v in d.items()} for c, d in per.items()}

    def cost(t: float) -> float:
        total = 0.0
        for d in arrays.values():
            for key, bar in MISS_BAR.items():
                if len(d[key]):
                    total += float((d[key] < t).mean()) / bar
            if len(d["none"]):
                total += float((d["none"] >= t).mean()) / NOISE_BAR
        return total / len(arrays)

    grid = np.arange(-8.0, 4.0, 0.05)
    pointer = float(min(grid, key=cost))
    noise = np.concatenate([d["none"] for d in arrays.values()])
    noise = noise[np.isfinite(noise)]
    text = float(np.quantile(noise, 1.0 - TEXT_NOISE)) if len(noise) else pointer
    return max(text, pointer), pointer


def calibrate(rows: Sequence[Row]) -> Calibration:
    weights, bias = fit(rows)
    text, pointer = choose_bands(rows, weights, bias)
    return Calibration(tuple(round(float(w), 5) for w in weights), round(float(bias), 4), round(text, 3), round(pointer, 3))
