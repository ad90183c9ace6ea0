"""What the agent receives, corpus by corpus: the rendered block, not the ranking or the gate.

For every prompt of the dev collection (`_devset`: six corpora) and of a seventh corpus no
setting was ever chosen on (`_meetings`: long meeting logs, 3-8 KB), this follows the answer
through each stage of the pipeline:
  ranking   Recall@5 of the fused ranking's first five (what the gate judges)
  gate      Recall@5 of what the gate keeps (text or pointer band), k = 5
  rendered  Recall@5 of what the block holds (`agent.delivery.plan`, as `vaultmem context
            --json` lists it), and the ratio rendered / ranking
  text+passage   the relevant note arrives as text or passage (not only a pointer)
  nothing   nothing at all for the prompt
  chars     mean characters of the notes' blocks per answerable prompt
For prompts none of the notes answers: the share given text or a passage, and anything at all
(everyday coding prompts, English and Chinese, on their own lines).

Every figure for one of the six corpora is judged with a calibration fitted WITHOUT it
(leave-one-corpus-out, `relevance.shipped_and_held_out`); the meetings corpus is judged with
the fit on all six (none of them it), which is what ships (a note is printed if the profile's
constant is not that fit). `--write` records the passage bands chosen on all six in the fitted
file, bench/fits/<provider>.json. The delivery plan's own
constants (`agent.delivery.ROOMS`...) are budget choices, not fitted on any corpus.

Three paths: cold (the one-shot hook: e5 alone), warm (the second opinion's list at the
profile's weight, with its signals: the warm service, MCP, `vaultmem context`), and warm with
its signals only (list weight 0, calibration refitted at 0, held out likewise). Each is shown
with the old renderer ("before": full-text water-fill plus a 440-character pointer block) and
the delivery plan ("after"). Then a 20-prompt session of related prompts, with and without the
once-per-session ledger.

The gate runs offline over the prompts' dumped hits (cached by relevance.py's runs, the same
library `search.gate`); the plan is the library's `agent.delivery.plan` over the kept hits, as
`build_context` calls it. `--live N` also runs every N-th prompt of each corpus through the
real `build_context` (shipped settings, cold) and checks its items equal the offline plan's.

Usage:
  VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/delivery.py
  python bench/delivery.py --corpora meetings,conversations --live 10
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections import defaultdict
from typing import Any

import _calibrate
import _devset
import _line_opinion
import _meetings
import _second
import relevance
from _corpora import bench_vault
from _data import recall_at
from _setup import bench_env
from relevance import provider_of

K = 5


def old_block(kept: list[Any], prompt: str, budget: int = 2500) -> tuple[list[str], list[str], int]:
    """The renderer before issue 41 (main 0c4e12a's build_context): text hits water-filled into
    the budget less a pointer block of at most 440 characters. (text paths, pointer paths,
    characters)."""
    from _old_render import POINTERS_MAX_CHARS, Pointer, fit_context, render_pointers

    from vaultmem.agent import delivery
    from vaultmem.search import Delivery

    texts = [h for h in kept if h.delivery is not Delivery.POINTER]
    offered = [h for h in kept if h.delivery is Delivery.POINTER]
    pblock, pointed = render_pointers(
        [Pointer(h.path, h.title, h.heading, delivery.reason(h, prompt)) for h in offered],
        max_chars=min(POINTERS_MAX_CHARS, budget),
    )
    room = budget - (len(pblock) + 2 if pblock else 0)
    block, shown = fit_context(texts, max_chars=room) if texts else ("", [])
    chars = len(block) + len(pblock) + (2 if block and pblock else 0)
    return [h.path for h in shown], [p.path for p in pointed], chars


def new_block(
    kept: list[Any], row: Any, seen: set[str] | None = None, coverage: float = float("inf")
) -> Any:
    from vaultmem.agent import delivery

    return delivery.plan(
        kept,
        prompt=row.prompt,
        weights=delivery.term_weights(row.stats.rarity if row.stats else None),
        budget=2500,
        seen=seen or (),
        passage_coverage=coverage,
    )


@dataclasses.dataclass
class Figures:
    n: int = 0
    rank: float = 0.0
    gate: float = 0.0
    rendered: float = 0.0
    textual: int = 0
    nothing: int = 0
    chars: int = 0
    full: int = 0  # unanswerable: text or passage
    anything: int = 0


def measure(
    rows: list[Any], fusion: Any, coverage: float = float("inf"), *, renderer: str
) -> dict[str, Figures]:
    from vaultmem.agent.render import plan_size
    from vaultmem.search.retrieval import delivered

    out: dict[str, Figures] = defaultdict(Figures)
    for r in rows:
        kept = delivered(_calibrate.deliver(r, fusion, k=K))
        if renderer == "before":
            text, pointers, chars = old_block(kept, r.prompt)
            got = text + pointers
        else:
            p = new_block(kept, r, coverage=coverage)
            got = [i.path for i in p.items]
            text = [i.path for i in p.delivered]
            chars = plan_size(p.items)
        group = ("same" if r.group == "same" else "cross") if r.answerable else r.group
        f = out[group]
        f.n += 1
        f.chars += chars
        if r.answerable:
            rel = dict.fromkeys(r.relevant, 1)
            f.rank += recall_at(r.ungated[:K], rel, K)
            f.gate += recall_at([h.path for h in kept], rel, K)
            f.rendered += recall_at(got, rel, K)
            f.textual += any(p in r.relevant for p in text)
            f.nothing += not got
        else:
            f.full += bool(text)
            f.anything += bool(got)
    return out


def pct(a: float, b: float) -> str:
    return f"{100 * a / b:.1f}" if b else "-"


def report(title: str, per: dict[str, dict[str, dict[str, Figures]]]) -> None:
    print(f"\n## {title}\n")
    print(
        "| corpus | set | ranking R@5 | gate R@5 | rendered R@5 before → after | ratio after "
        "| text+passage % before → after | nothing % | chars before → after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for corpus, by in per.items():
        for group in ("same", "cross"):
            b, a = by["before"].get(group), by["after"].get(group)
            if not a or not a.n:
                continue
            ratio = a.rendered / a.rank if a.rank else float("nan")
            print(
                f"| {corpus} | {group} | {a.rank / a.n:.3f} | {a.gate / a.n:.3f} | "
                f"{b.rendered / b.n:.3f} → {a.rendered / a.n:.3f} | {ratio:.3f} | "
                f"{pct(b.textual, b.n)} → {pct(a.textual, a.n)} | {pct(a.nothing, a.n)} | "
                f"{b.chars / b.n:.0f} → {a.chars / a.n:.0f} |"
            )
    print(
        "\n| corpus | cannot answer | n | text+passage % before → after | anything % | chars after |"
    )
    print("|---|---|---|---|---|---|")
    for corpus, by in per.items():
        for group, a in sorted(by["after"].items()):
            if group in ("same", "cross"):
                continue
            b = by["before"][group]
            print(
                f"| {corpus} | {group} | {a.n} | {pct(b.full, b.n)} → {pct(a.full, a.n)} | "
                f"{pct(a.anything, a.n)} | {a.chars / a.n:.0f} |"
            )


def session_chars(
    rows: list[Any], fusion: Any, coverage: float = float("inf"), seed: int = 7
) -> tuple[int, int, int, int]:
    """A 20-prompt session of related prompts: five notes' questions (each note's same- and
    cross-language question, asked one after the other), each followed by a follow-up that
    retrieves what its question did (the proxy: the same dumped hits, as "and what about…"
    prompts mostly do). Characters received with and without the once-per-session ledger, and
    questions whose answer was given (as text or passage, now or earlier) each way."""
    from vaultmem.agent.render import plan_size
    from vaultmem.search.retrieval import delivered

    rng = random.Random(seed)
    by_note: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        if r.answerable and len(r.relevant) == 1:
            by_note[next(iter(r.relevant))].append(r)
    notes = sorted(n for n, rs in by_note.items() if len(rs) >= 2)
    session: list[Any] = []
    for note in rng.sample(notes, min(5, len(notes))):
        for r in by_note[note][:2]:
            session += [r, r]  # the question, then its follow-up
    totals = []
    for ledger in (False, True):
        seen: set[str] = set()
        given: set[str] = set()
        chars = answered = 0
        for r in session[:20]:
            kept = delivered(_calibrate.deliver(r, fusion, k=K))
            p = new_block(kept, r, seen if ledger else None, coverage)
            chars += plan_size(p.items)
            if ledger:
                seen |= set(p.remembered)
            given |= {i.path for i in p.delivered}
            answered += bool(r.relevant & given)
        totals += [chars, answered]
    return totals[0], totals[2], totals[1], totals[3]


# The share of everyday coding prompts (English and Chinese) that may get a note as text or a
# passage: the bar. The passage band is the lowest that keeps the dev corpora under it.
CODING_BAR = 0.02


def with_passage(fusion: Any, field: str, band: float) -> Any:
    cal = dataclasses.replace(getattr(fusion, field), hit_passage=band)
    return dataclasses.replace(fusion, **{field: cal})


COVERAGES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, float("inf"))


def choose_passage(rows: list[Any], fusion: Any, field: str) -> tuple[float, float]:
    """The passage band (nats, for `fusion`'s `field` calibration) and the passage coverage
    (`agent.delivery.PASSAGE_COVERAGE`) chosen on `rows`: of the bands from the text band down
    to the pointer band in steps of 0.1 nat and the coverages in COVERAGES, the pair that gives
    the most answers as text or passage (mean of same- and cross-language questions) while the
    coding prompts among `rows` get text or a passage no more often than CODING_BAR (or than the
    text band alone, where that is already above it)."""
    import math

    from vaultmem.agent import delivery
    from vaultmem.search import Delivery

    cal = getattr(fusion, field)
    judged = []  # per row: its kind, and per kept hit (band, score, coverage, located, relevant)
    for r in rows:
        coding = not r.answerable and r.group.startswith("coding")
        if not (r.answerable or coding):
            continue
        weights = delivery.term_weights(r.stats.rarity if r.stats else None)
        kept = []
        for v in _calibrate.deliver(r, fusion, k=K):
            if not v.kept:
                continue
            cut = delivery.passage(v.hit, weights, delivery.PASSAGE_ROOM)
            located = cut.located or v.hit.lexical_imputed
            kept.append((v.delivery, v.score, cut.coverage, located, v.hit.path in r.relevant))
        group = "coding" if coding else ("same" if r.group == "same" else "cross")
        judged.append((group, kept))

    def rates(band: float, cov: float) -> tuple[float, float]:
        given = {"coding": [0, 0], "same": [0, 0], "cross": [0, 0]}
        for group, kept in judged:
            textual = [
                rel
                for d, score, c, located, rel in kept
                if d is Delivery.TEXT
                or (score >= band and located)
                or (d is Delivery.POINTER and located and c >= cov)
            ]
            hit = any(textual) if group != "coding" else bool(textual)
            given[group][0] += hit
            given[group][1] += 1
        share = {g: a / b if b else 0.0 for g, (a, b) in given.items()}
        return share["coding"], (share["same"] + share["cross"]) / 2

    limit = max(CODING_BAR, rates(math.inf, math.inf)[0])
    best = (rates(math.inf, math.inf)[1], cal.hit_text, math.inf)
    steps = int((cal.hit_text - cal.hit_pointer) / 0.1)
    for cov in COVERAGES:
        for i in range(steps + 1):
            band = cal.hit_text - 0.1 * i
            noise, answers = rates(band, cov)
            if noise <= limit and answers > best[0]:
                best = (answers, band, cov)
    return round(best[1], 2), best[2]


def cached_fits(field: str, rows_by: dict[str, list[Any]], make: Any) -> dict[str, Any]:
    """Held-out fits (slow: minutes) kept in the bench folder for the same rows."""
    import hashlib
    import inspect
    import pickle

    from _corpora import bench_dir

    from vaultmem.search import relevance as gate_module

    # The gate's signals (their code and their values) are part of what a fit depends on: a
    # change to them is a new fit.
    sig = hashlib.sha256(
        repr(
            sorted(
                (
                    n,
                    len(rs),
                    sum(len(r.hits) for r in rs),
                    round(sum(float(r.signals.sum()) for r in rs), 4),
                )
                for n, rs in rows_by.items()
            )
        ).encode()
        + inspect.getsource(gate_module).encode()
        + inspect.getsource(_calibrate).encode()
    ).hexdigest()[:16]
    path = bench_dir() / f"delivery-fits-{field}-{sig}.pkl"
    if path.is_file():
        return pickle.loads(path.read_bytes())
    fits = make()
    path.write_bytes(pickle.dumps(fits))
    return fits


def plan_timing(rows_by: dict[str, list[Any]], fusion: Any) -> None:
    """What rendering costs a prompt, before and after (median and p95 ms over every prompt
    that keeps a note, shipped calibration): the delivery plan tokenises the kept chunks' lines
    to pick passages, where the old renderer only cut text."""
    from vaultmem.search.retrieval import delivered

    times: dict[str, list[float]] = {"before": [], "after": []}
    for rows in rows_by.values():
        for r in rows:
            kept = delivered(_calibrate.deliver(r, fusion, k=K))
            if not kept:
                continue
            t0 = time.perf_counter()
            old_block(kept, r.prompt)
            t1 = time.perf_counter()
            new_block(kept, r, coverage=fusion.calibration.passage_coverage)
            t2 = time.perf_counter()
            times["before"].append((t1 - t0) * 1000)
            times["after"].append((t2 - t1) * 1000)
    for which, ts in times.items():
        ts.sort()
        print(
            f"rendering {which}: median {ts[len(ts) // 2]:.2f} ms, p95 "
            f"{ts[int(len(ts) * 0.95)]:.2f} ms over {len(ts)} prompts"
        )


def live_check(
    corpus: Any, rows: list[Any], settings: Any, root: Any, base: Any, every: int
) -> tuple[int, int]:
    """Every `every`-th prompt through the real `build_context` (cold, shipped settings): its
    items must be the offline plan's, path and delivery."""
    from vaultmem.agent.context import ColdResources, build_context
    from vaultmem.search.retrieval import delivered

    checked = same = 0
    for i, r in enumerate(rows):
        if i % every or r.stats is None:
            continue
        live = build_context(
            dataclasses.replace(settings, memory_file=None),
            r.prompt,
            vault_root=root,
            include_memory=False,
            resources=ColdResources(),
        ).as_json()["items"]
        verdicts = _calibrate.deliver(r, base, k=K)
        cal = verdicts[0].calibration if verdicts else None
        cov = cal.passage_coverage if cal is not None else float("inf")
        offline = new_block(delivered(verdicts), r, coverage=cov).items
        checked += 1
        same += [(x["path"], x["delivery"]) for x in live] == [
            (x.path, x.form.value) for x in offline
        ]
    return checked, same


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--corpora", default="", help="report only these (comma-separated)")
    ap.add_argument("--live", type=int, default=0, metavar="N", help="check every N-th prompt live")
    ap.add_argument("--no-warm", action="store_true", help="the cold path only")
    ap.add_argument(
        "--write",
        action="store_true",
        help="record the passage bands chosen on all six in bench/fits/ (search/profiles.py "
        "copies them)",
    )
    relevance.add_collection_options(ap)
    args = ap.parse_args()
    bench_env("vaultmem-delivery-", args.provider)
    from vaultmem.embed import get_embedder
    from vaultmem.search import SecondOpinion, fusion_for, prepare_generic

    corpora = [*_devset.collection(), _meetings.meetings()]
    wanted = [c.name for c in corpora if not args.corpora or c.name in args.corpora.split(",")]
    cold: dict[str, list[Any]] = {}
    warm: dict[float, dict[str, list[Any]]] = defaultdict(dict)
    embedder = base = opinion = lines = None
    for corpus in corpora:
        t0 = time.perf_counter()
        root, settings = bench_vault(f"dev-{corpus.name}", corpus.files)
        if embedder is None:
            embedder = relevance.CachedEmbedder(get_embedder(settings))
            prepare_generic(embedder)
            base = fusion_for(embedder.model_id)
        cold[corpus.name] = _calibrate.rows_of(
            corpus.name, _devset.load_or_dump(corpus, embedder, settings, root)
        )
        if not args.no_warm:
            opinion = opinion or SecondOpinion.load()
            dumped = _devset.load_or_dump_warm(corpus, embedder, settings, root, opinion, base)
            if args.by_line != "off":
                lines = lines or _line_opinion.LineVectors(opinion)
                dumped = {
                    w: _line_opinion.by_line(s, lines, args.by_line) for w, s in dumped.items()
                }
            for w, rows in _second.with_generic(dumped, opinion).items():
                warm[w][corpus.name] = _calibrate.rows_of(corpus.name, _second.judged(rows))
        embedder.save()
        if args.live and corpus.name in wanted:
            c, s = live_check(corpus, cold[corpus.name], settings, root, base, args.live)
            print(f"{corpus.name}: {c} prompts live through build_context, {s} as offline")
        print(
            f"{corpus.name}: {len(corpus.files)} notes; {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    assert base is not None
    six = [c for c in cold if c != "meetings"]

    def held_out(
        rows_by: dict[str, list[Any]], field: str, shipped: Any, record: bool = True
    ) -> dict[str, Any]:
        """Per wanted corpus, the profile with `field` fitted without it (meetings: the fit on
        all six, which `shipped` should be)
        and its passage band chosen without it (`choose_passage`); with --write and `record`,
        the band chosen on all six goes to the fitted file."""
        fits = cached_fits(
            field,
            rows_by,
            lambda: {
                **{
                    name: _calibrate.fit([r for n in six if n != name for r in rows_by[n]])
                    for name in six
                },
                # meetings is in none of the six: the fit on all six, as it ships
                "meetings": _calibrate.fit([r for n in six for r in rows_by[n]]),
            },
        )
        if not _calibrate.close(fits["meetings"], shipped):
            print(f"  NOTE: the shipped {field} is not the fit on all six (relevance.py --fit)")
        out = {}
        for name in wanted:
            fusion = dataclasses.replace(base, **{field: fits[name]})
            others = [r for n in six if n != name for r in rows_by[n]]
            band, cov = choose_passage(others, fusion, field)
            out[name] = (with_passage(fusion, field, band), cov)
            print(f"  {field} without {name}: passage band from {band:.2f} nats, coverage {cov}")
        shipped = choose_passage([r for n in six for r in rows_by[n]], base, field)
        print(
            f"  {field}, chosen on all six (ships): hit_passage={shipped[0]:.2f}, "
            f"PASSAGE_COVERAGE={shipped[1]}"
        )
        if args.write and record:
            chosen = dataclasses.replace(
                getattr(base, field), hit_passage=shipped[0], passage_coverage=shipped[1]
            )
            _calibrate.write_fitted(provider_of(base), field, chosen, passage=True)
        return out

    paths = {"cold (one-shot hook)": (cold, held_out(cold, "calibration", base.calibration))}
    if warm:
        w = base.agnostic_weight
        paths[f"warm (second opinion's list at weight {w:g}, and its signals)"] = (
            warm[w],
            held_out(warm[w], "second_calibration", base.second_calibration),
        )
        fit0 = _calibrate.fit([r for n in six for r in warm[0.0][n]])
        paths["warm, its signals only (list weight 0, calibration refitted at 0)"] = (
            warm[0.0],
            held_out(warm[0.0], "second_calibration", fit0, record=False),
        )
    plan_timing(cold, base)
    for title, (rows_by, fusions) in paths.items():
        print(f"\n{title}: held-out passage bands above")
        per = {
            name: {
                which: measure(rows_by[name], *fusions[name], renderer=which)
                for which in ("before", "after")
            }
            for name in wanted
        }
        report(title, per)
        print(
            "\nA 20-prompt session of related prompts (characters without → with the ledger; answers given):"
        )
        for name in wanted:
            a, b, n1, n2 = session_chars(rows_by[name], *fusions[name])
            print(f"- {name}: {a} → {b} characters ({pct(a - b, a)} % fewer); answers {n1} → {n2}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
