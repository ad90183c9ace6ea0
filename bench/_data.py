"""Benchmark data from ../shared/data (never copied into the repository) and the metrics.

BEIR layout (corpus.jsonl, queries.jsonl, qrels/test.tsv) for SciFact and CMRC 2018; tldr's
parallel English / Chinese pages from the history bundle; nDCG@10 and Recall@5; and the seeded
tune / report split every gate or fusion figure is reported on (tune on one half, report the
other).
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
BUNDLE = DATA / "tldr-history.bundle"


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


def corpus_files(corpus: dict[str, dict]) -> dict[str, str]:
    """One note per document: docs/<id>.md in the vault, with the title as its heading."""
    files = {}
    for did, d in corpus.items():
        title = (d.get("title") or "").strip()
        files[f"docs/{did}.md"] = (f"# {title}\n\n" if title else "") + d["text"].strip() + "\n"
    return files


def beir_set(
    dataset: str, docs: int = 0, seed: int = 13
) -> tuple[dict[str, dict], dict[str, str], dict[str, dict[str, int]], list[str]]:
    """(corpus, queries, qrels, query ids) for a BEIR dataset, or the seeded `docs` subset."""
    corpus, queries, qrels = load(dataset)
    qids = sorted(q for q in qrels if q in queries)
    if docs and docs < len(corpus):
        corpus, qids = subset(corpus, qrels, qids, docs, random.Random(seed))
    return corpus, queries, qrels, qids


def split(ids: list[str], seed: int = 14) -> tuple[list[str], list[str]]:
    """(tune, report): a seeded shuffle cut in halves."""
    shuffled = sorted(ids)
    random.Random(seed).shuffle(shuffled)
    half = len(shuffled) // 2
    return sorted(shuffled[:half]), sorted(shuffled[half:])


# --- tldr: parallel English / Chinese pages -------------------------------------------------


def tldr_clone(work: Path) -> Path:
    clone = work / "tldr-pages-source"
    if not clone.is_dir():
        subprocess.run(
            ["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(clone)], check=True
        )
    return clone


def tldr_vault(repo: Path, notes: int = 0) -> Path:
    """A clone of the tldr history at `repo` as a user's vault; with `notes`, only the first
    `notes` pages (by path) are kept, in one more commit."""
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(repo)], check=True)
    if notes:
        keep = set(sorted(p for p in repo.rglob("*.md") if ".git" not in p.parts)[:notes])
        for p in repo.rglob("*.md"):
            if ".git" not in p.parts and p not in keep:
                p.unlink()
        for args in (["add", "-A"], ["commit", "-q", "-m", "subset"]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def tldr_pages(clone: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """command -> {"en": (description, page without it), "zh": (...)} for every command with
    both an English and a Chinese page (pages/{common,linux}, pages.zh/{common,linux})."""
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for platform in ("common", "linux"):
        en_dir, zh_dir = clone / "pages" / platform, clone / "pages.zh" / platform
        for zh in sorted(zh_dir.glob("*.md")):
            en = en_dir / zh.name
            if not en.is_file() or zh.stem in out:
                continue
            parts = {}
            for lang, page in (("en", en), ("zh", zh)):
                text = page.read_text(encoding="utf-8")
                desc = re.search(r"^> (.+)$", text, re.M)
                if not desc:
                    break
                body = "\n".join(ln for ln in text.splitlines() if not ln.startswith(">"))
                parts[lang] = (desc.group(1).strip(), re.sub(r"\n{3,}", "\n\n", body).strip())
            if len(parts) == 2 and len(parts["en"][0]) > 12 and len(parts["zh"][0]) > 4:
                out[zh.stem] = parts
    return out
