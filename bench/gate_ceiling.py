"""How far the relevance gate's signals can go, corpus by corpus: the acceptance bars of issue 27
with the shipped method, with bands no product could know, and with a fit no product could make.

`relevance.py` reports each corpus with a calibration fitted on the other five, its bands
chosen on them too (what ships). This asks what is left on the table, for the cold path (e5
only) and the warm one (with the second opinion, at the shipped list weight):

  shipped    the calibration fitted without the corpus, with its own bands (relevance.py's)
  bands      the same models, with the prompt and pointer bands chosen ON the held-out corpus:
             an oracle for any rule that would set the bands per vault (its noise level, its
             size, its languages)
  ceiling    models and bands both fitted on the corpus itself: an oracle for any calibration
             of these signals at all

For the two oracles every pair of bands on a grid is tried and the one kept that is furthest
inside the bars at their worst (each bar's slack in units of itself, as `_calibrate` weighs
misses: 3 points of same-language answers, 10 of cross-language ones, 20 of unanswerable
prompts that get anything). The full-text bar (at most 5 % of unanswerable prompts get a
note as text) is left out: the text band alone meets it and moves no other figure. Where even
the ceiling misses a bar, no choice of weights or bands over these signals meets it on that
corpus; what misses it is named, with the best the oracle reached.

The figures under "shipped" are recomputed here from the scores and must equal relevance.py's
(the run checks them against the library's own gate, `relevance.tally`).

Usage:
  VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/gate_ceiling.py
  python bench/gate_ceiling.py --no-second       # the cold path only
  python bench/gate_ceiling.py --agnostic-candidates 50   # the second opinion's first 50
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import _calibrate
import numpy as np
import relevance

from vaultmem.search.relevance import Calibration

# Each bar: (name, figure, bound, is a floor, the unit its slack is measured in).
BARS = (
    ("same kept", "same_kept", 97.0, True, 3.0),
    ("same nothing", "same_nothing", 3.0, False, 3.0),
    ("cross kept", "cross_kept", 90.0, True, 10.0),
    ("cross nothing", "cross_nothing", 10.0, False, 10.0),
    ("anything", "anything", 20.0, False, 20.0),
)
PROMPT_GRID = np.arange(-8.0, 8.0, 0.05)
POINTER_GRID = np.arange(-8.0, 6.0, 0.05)


@dataclass
class Scored:
    """One corpus's prompts under one calibration's two models (no bands yet)."""

    # answerable, per group ("same", "cross"): rows of (prompt score, best relevant note's
    # score among the first five or -inf, best score among the first five, findable)
    answerable: dict[str, np.ndarray]
    # unanswerable: rows of (prompt score, best score among the first five)
    unanswerable: np.ndarray


def scored(rows: Sequence[_calibrate.Row], cal: Calibration) -> Scored:
    groups: dict[str, list[tuple[float, float, float, float]]] = {"same": [], "cross": []}
    none: list[tuple[float, float]] = []
    for r in rows:
        group = "cross" if r.group == "cross" else "same"
        if r.stats is None:  # content-free or no hits: nothing is searched, nothing delivered
            if r.answerable:
                groups[group].append((-np.inf, -np.inf, -np.inf, 0.0))
            else:
                none.append((-np.inf, -np.inf))
            continue
        p, first, rel = _calibrate.judged(r, cal)
        if r.answerable:
            groups[group].append(
                (p, max(rel, default=-np.inf), float(first.max()), float(bool(rel)))
            )
        else:
            none.append((p, float(first.max())))
    return Scored(
        {g: np.array(v, dtype=float).reshape(-1, 4) for g, v in groups.items()},
        np.array(none, dtype=float).reshape(-1, 2),
    )


def figures(s: Scored, prompt: float, pointer: np.ndarray) -> dict[str, np.ndarray]:
    """The bars' figures (percent) with prompt band `prompt`, for each pointer band given."""
    pointer = np.atleast_1d(pointer)
    out: dict[str, np.ndarray] = {}
    for group, a in s.answerable.items():
        if not len(a):
            continue
        passes = (a[:, 0] >= prompt)[:, None]
        findable = a[:, 3] == 1
        kept = passes & (a[:, 1][:, None] >= pointer[None, :]) & findable[:, None]
        out[f"{group}_kept"] = 100.0 * kept.sum(axis=0) / max(findable.sum(), 1)
        got = passes & (a[:, 2][:, None] >= pointer[None, :])
        out[f"{group}_nothing"] = 100.0 * (1.0 - got.mean(axis=0))
    u = s.unanswerable
    let = (u[:, 0] >= prompt)[:, None] & (u[:, 1][:, None] >= pointer[None, :])
    out["anything"] = 100.0 * let.mean(axis=0)
    return out


def slack(figs: dict[str, np.ndarray]) -> np.ndarray:
    """How far inside the bars each setting is at its worst bar (< 0: some bar missed)."""
    worst = None
    for _, key, bound, floor, unit in BARS:
        if key not in figs:
            continue
        v = figs[key]
        s = (v - bound) / unit if floor else (bound - v) / unit
        worst = s if worst is None else np.minimum(worst, s)
    assert worst is not None
    return worst


@dataclass
class Point:
    prompt: float
    pointer: float
    figs: dict[str, float]

    @property
    def missed(self) -> list[str]:
        return [
            name
            for name, key, bound, floor, _ in BARS
            if key in self.figs
            and (self.figs[key] < bound - 1e-9 if floor else self.figs[key] > bound + 1e-9)
        ]


def at(s: Scored, prompt: float, pointer: float) -> Point:
    figs = figures(s, prompt, np.array([pointer]))
    return Point(prompt, pointer, {k: float(v[0]) for k, v in figs.items()})


def best(s: Scored) -> Point:
    """The grid's bands furthest inside the bars at their worst."""
    top: tuple[float, float, int] | None = None
    for prompt in PROMPT_GRID:
        sl = slack(figures(s, float(prompt), POINTER_GRID))
        i = int(np.argmax(sl))
        if top is None or sl[i] > top[0]:
            top = (float(sl[i]), float(prompt), i)
    assert top is not None
    return at(s, top[1], float(POINTER_GRID[top[2]]))


def cell(p: Point) -> str:
    f = p.figs
    parts = []
    for group in ("same", "cross"):
        if f"{group}_kept" in f:
            parts.append(f"{group} {f[f'{group}_kept']:.1f} / {f[f'{group}_nothing']:.1f}")
    parts.append(f"anything {f['anything']:.1f}")
    missed = p.missed
    return " · ".join(parts) + (f" — misses {', '.join(missed)}" if missed else " — all met")


def check_shipped(rows: Sequence[_calibrate.Row], fusion: Any, field: str, p: Point) -> None:
    """The recomputed figures at the calibration's own bands are what the library delivers."""
    figs = relevance.tally(list(rows), fusion)
    for group in ("same", "cross"):
        t = figs.get(group)
        if t is None or not t.n:
            continue
        kept = 100.0 * t.kept_findable / t.findable if t.findable else 0.0
        assert abs(kept - p.figs[f"{group}_kept"]) < 1e-6, (field, group, kept, p.figs)
        assert abs(100.0 * t.nothing / t.n - p.figs[f"{group}_nothing"]) < 1e-6, (field, group)
    none = [t for g, t in figs.items() if g.startswith("none: ")]
    anything = 100.0 * sum(t.anything for t in none) / sum(t.n for t in none)
    assert abs(anything - p.figs["anything"]) < 1e-6, (field, anything, p.figs)


def report(title: str, rows_by: dict[str, list[_calibrate.Row]], base: Any, field: str) -> None:
    print(f"\n## {title}")
    print(
        "Each cell: kept of findable / nothing, same- and cross-language; unanswerable prompts "
        "that get anything (%); then the bars missed."
    )
    print(
        "| corpus | shipped (fit without it, its bands) | bands chosen on it | ceiling (fit on it) |"
    )
    print("|---|---|---|---|")
    for name, rows in rows_by.items():
        held_out = _calibrate.fit([r for n, rs in rows_by.items() if n != name for r in rs])
        s = scored(rows, held_out)
        shipped = at(s, held_out.prompt, held_out.hit_pointer)
        check_shipped(rows, dataclasses.replace(base, **{field: held_out}), field, shipped)
        bands = best(s)
        ceiling = best(scored(rows, _calibrate.fit(rows)))
        print(f"| {name} | {cell(shipped)} | {cell(bands)} | {cell(ceiling)} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--no-second", action="store_true", help="the cold path only")
    relevance.add_collection_options(ap)
    args = ap.parse_args()
    loaded = relevance.load_collection(
        args.provider,
        second=not args.no_second,
        check=False,
        agnostic_candidates=args.agnostic_candidates,
        by_line=args.by_line,
    )
    base = loaded.base
    report("Cold (the one-shot hook: e5 only)", loaded.rows_by, base, "calibration")
    if loaded.second_by:
        w = base.agnostic_weight
        report(
            f"Warm (with the second opinion as shipped: its list at weight {w:g})",
            loaded.second_by[w],
            base,
            "second_calibration",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
