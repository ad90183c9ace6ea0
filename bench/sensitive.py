"""Sensitive-content detection through the real pipeline: per-category recall and false
positives for the development and held-out parts of tests/sensitive_corpus.py and for the late
corpus (tests/sensitive_corpus_late.py, written after the rules), plus leak checks.

Usage: python bench/sensitive.py [--prompts N]
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set;
indexes with the hash embedder (detection does not depend on the model).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from _setup import bench_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=None, help="secrets tried as prompts")
    args = parser.parse_args()
    work, external = bench_env("vm-sensitive-", "hash")
    from sensitive_corpus import corpus
    from sensitive_corpus_late import late_corpus
    from sensitive_eval import build_vault, evaluate, table

    from vaultmem import server

    try:
        samples = corpus() + late_corpus()
        root = work / "vault"
        build_vault(root, samples)
        report = evaluate(root, samples, prompts=args.prompts)
        print(table(report))
        for split, score in report.by_split.items():
            for sid in score.missed:
                print(f"missed   {split}: {sid}")
            for sid in score.false_positives:
                print(f"flagged  {split}: {sid}")
        print(f"leaks of caught secrets: {len(report.leaks)}")
        for where, sid in report.leaks[:20]:
            print(f"  {sid} in {where}")
    finally:
        if not external:
            server.stop(work / "home")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
