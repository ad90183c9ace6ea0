"""`vaultmem ui`'s pages on a vault of 5,000 notes and 500 quarantined files: ms per page.

Builds a real git vault (5,000 short notes in 50 folders, 500 files with a password line, the
`password-assignment` rule), indexes it with the real ingest (`ingest.catch_up`, the hash
embedder: vectors are not what is measured), registers it, writes 2,000 injection-log records
and 20 agent notes, then serves the app in this process on 127.0.0.1 (as `vaultmem ui` does,
guard included) and times each page over HTTP with a keep-alive connection: p50 and p95 of
`--runs` requests after one warm-up request. The issue's bar is 200 ms per page. Printed,
never asserted.

Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is
set.

Usage: python bench/ui.py [--notes 5000] [--quarantined 500] [--runs 20]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _setup import bench_env  # noqa: E402


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def build_vault(root: Path, notes: int, quarantined: int) -> None:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for i in range(notes):
        folder = root / f"area-{i % 50:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"note-{i:05d}.md").write_text(
            f"# Note {i}\n\nThe service {i} runs on node {i % 7} behind balancer {i % 3}.\n\n"
            f"## Runbook\n\nRestart it with `systemctl restart svc-{i}` and check the logs.\n"
        )
    ops = root / "ops"
    ops.mkdir()
    for i in range(quarantined):
        (ops / f"router-{i:04d}.md").write_text(f"# Router {i}\n\npassword = Zq{i:04d}x!Tr7#pLm\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "--no-verify", "-m", "vault")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notes", type=int, default=5000)
    ap.add_argument("--quarantined", type=int, default=500)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()

    work, external = bench_env("vaultmem-bench-ui-", "hash")
    from vaultmem import vaults
    from vaultmem.agent import injections
    from vaultmem.agent.write import remember
    from vaultmem.config import load_settings, user_home
    from vaultmem.index import ingest
    from vaultmem.store import server

    try:
        if not external:
            os.environ["VAULTMEM_DATABASE_URL"] = server.start(work / "home")
        root = work / "vault"
        t = time.perf_counter()
        build_vault(root, args.notes, args.quarantined)
        vaults.register(root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
        result = ingest.catch_up(load_settings(root), root, wait=True)
        print(
            f"vault: {args.notes} notes, {args.quarantined} quarantined; built and indexed in "
            f"{time.perf_counter() - t:.0f} s ({result.summary()})"
        )
        for i in range(20):
            remember(root, f"Agent note {i}", f"what the agent learnt, number {i}", environ={})
        for i in range(2000):
            injections.append(
                user_home(),
                injections.make(
                    injections.CLAUDE_HOOK,
                    root.name,
                    f"prompt {i}",
                    [f"area-{i % 50:02d}/note-{i:05d}.md"],
                    400,
                    band="notes",
                ),
            )
        measure(args.runs)
    finally:
        if not external:
            server.stop(work / "home")
        shutil.rmtree(work, ignore_errors=True)


def measure(runs: int) -> None:
    import uvicorn

    from vaultmem.web import UI, Secret, bind, create_app

    sock = bind(0)
    secret = Secret(sock.getsockname()[1])
    srv = uvicorn.Server(
        uvicorn.Config(create_app(UI(secret)), log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    pages = [
        "/",
        "/quarantine",
        "/quarantine?rule=password-assignment&folder=ops",
        f"/quarantine/file?id={secret.ident('ops/router-0007.md')}",
        "/log",
        "/notes",
        "/notes?prefix=area-07/",
        "/note?path=area-07/note-00007.md",
        "/inbox",
        "/context?q=how+do+I+restart+service+42",
    ]
    conn = http.client.HTTPConnection("127.0.0.1", secret.port, timeout=300)
    headers = {
        "Host": f"127.0.0.1:{secret.port}",
        "Cookie": f"{secret.cookie}={secret.token}",
    }
    print(f"{'page':<52} {'p50 ms':>8} {'p95 ms':>8} {'KiB':>6}")
    try:
        for page in pages:
            times = []
            size = 0
            for i in range(runs + 1):
                t = time.perf_counter()
                conn.request("GET", page, headers=headers)
                r = conn.getresponse()
                body = r.read()
                elapsed = (time.perf_counter() - t) * 1000
                if r.status != 200:
                    raise SystemExit(f"{page}: HTTP {r.status}: {body[:200]!r}")
                if i:  # the first request warms caches (templates, the embedder)
                    times.append(elapsed)
                size = len(body)
            times.sort()
            p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
            print(f"{page:<52} {statistics.median(times):>8.1f} {p95:>8.1f} {size / 1024:>6.0f}")
    finally:
        conn.close()
        srv.should_exit = True
        thread.join(60)
        sock.close()


if __name__ == "__main__":
    main()
