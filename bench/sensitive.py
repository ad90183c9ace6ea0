"""Sensitive-content detection through the real pipeline: per-category recall and false
positives for the development and held-out parts of tests/support/sensitive_corpus_formats.py,
for the late corpus (tests/support/sensitive_corpus_dialects.py, written after the rules) and
for issue 28's corpus (tests/support/sensitive_corpus_free_form.py: dev28 tuned on, held28
not), plus leak checks. With `--tldr`, also the benign side at scale: the tldr vault
(../shared/data/tldr-history.bundle, 8,178 real pages) indexed by the real catch-up, and how
many of its pages were quarantined.

Usage: python bench/sensitive.py [--prompts N] [--tldr]
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
    parser.add_argument("--tldr", action="store_true", help="also index the tldr vault")
    args = parser.parse_args()
    work, external = bench_env("vm-sensitive-", "hash")
    from support.sensitive_corpus_dialects import dialects_corpus
    from support.sensitive_corpus_formats import formats_corpus
    from support.sensitive_corpus_free_form import free_form_corpus
    from support.sensitive_eval import build_vault, evaluate, table

    from vaultmem.store import server

    try:
        samples = formats_corpus() + dialects_corpus() + free_form_corpus()
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
        if args.tldr:
            tldr_quarantine(work)
    finally:
        if not external:
            server.stop(work / "home")
        shutil.rmtree(work, ignore_errors=True)


def tldr_quarantine(work: Path) -> None:
    """Index the tldr vault's text (no vectors) and print how many pages went to the audit
    table: every one is a false positive, since tldr pages hold no real secrets."""
    import subprocess
    import time

    from vaultmem.config import load_settings
    from vaultmem.index import ingest
    from vaultmem.store import db

    bundle = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"
    root = work / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(bundle), str(root)], check=True)
    settings = load_settings(root)
    t0 = time.perf_counter()
    ingest.catch_up(settings, root, wait=True, embed=False)
    with db.connect(settings, start=True) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        notes = conn.execute(
            "SELECT count(*) AS n FROM memory_notes WHERE vault_id = %s", (vault.id,)
        ).fetchone()["n"]
        flagged = [
            r["path"]
            for r in conn.execute(
                "SELECT path FROM memory_secure_audit WHERE vault_id = %s ORDER BY path",
                (vault.id,),
            )
        ]
    print(
        f"tldr vault: {len(flagged)} of {notes + len(flagged)} pages quarantined "
        f"(text indexed in {time.perf_counter() - t0:.0f} s)"
    )
    for path in flagged[:20]:
        print(f"  quarantined: {path}")


if __name__ == "__main__":
    main()
