"""Helpers for the reliability suite: the real CLI in subprocesses, index invariants, settling.

Every scenario runs vaultmem the way users and hooks do (`python -m vaultmem ...` in its own
process, against the real database), then checks the index two ways: structurally (no duplicate,
orphan or half-written rows) and by content (equal to a fresh build of HEAD).
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import portalocker
import psycopg

from vaultmem.index import gitdiff
from vaultmem.store import db

WORDS = (
    "river mountain cloud storm tiger paper code bread cheese apple lantern harbor garden "
    "violin copper meadow falcon quartz ember willow orbit canyon glacier pepper saffron"
).split()


def vaultmem(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (the environment of this test, plus `env`)."""
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vaultmem", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def note_text(rng: random.Random, title: str, sections: int = 3, words: int = 70) -> str:
    """A note whose sections are each big enough to be their own chunk."""
    parts = [f"# {title}\n"]
    for s in range(sections):
        body = " ".join(rng.choice(WORDS) for _ in range(words))
        parts.append(f"## Section {s} of {title}\n\n{body}\n")
    return "\n".join(parts)


def vault_id(conn: psycopg.Connection, root: Path) -> int:
    v = db.find_vault(conn, root)
    assert v is not None, f"vault {root} is not registered"
    return v.id


def invariants(conn: psycopg.Connection, root: Path) -> list[str]:
    """Structural problems in the index of one vault; [] when it is sound.

    Checked even between crashes: no duplicate keys, no chunk without its note, every note's
    chunks numbered 0..n-1 (never a half-replaced set), no path in two tables at once, and every
    stored vector equal to the cached vector of its text and model."""
    vid = vault_id(conn, root)
    checks = {
        "duplicate notes": """
            SELECT count(*) - count(DISTINCT path) FROM memory_notes WHERE vault_id = %(v)s""",
        "duplicate chunks": """
            SELECT count(*) - count(DISTINCT (path, chunk_index)) FROM memory_primary
             WHERE vault_id = %(v)s""",
        "orphan chunks": """
            SELECT count(*) FROM memory_primary p LEFT JOIN memory_notes n
                ON n.vault_id = p.vault_id AND n.path = p.path
             WHERE p.vault_id = %(v)s AND n.path IS NULL""",
        "gapped chunk sets": """
            SELECT count(*) FROM (SELECT path FROM memory_primary WHERE vault_id = %(v)s
             GROUP BY path HAVING min(chunk_index) <> 0 OR max(chunk_index) + 1 <> count(*)) g""",
        "paths in two tables": """
            SELECT count(*) FROM (SELECT path FROM (
                SELECT path FROM memory_notes WHERE vault_id = %(v)s
                UNION ALL SELECT path FROM memory_skipped WHERE vault_id = %(v)s
                UNION ALL SELECT path FROM memory_secure_audit WHERE vault_id = %(v)s) t
             GROUP BY path HAVING count(*) > 1) d""",
        "vectors not from the cache": """
            SELECT count(*) FROM memory_primary p LEFT JOIN embedding_cache c
                ON c.model_id = p.model_id AND c.content_hash = p.content_hash
             WHERE p.vault_id = %(v)s AND p.embedding IS NOT NULL
               AND (c.embedding IS NULL OR c.embedding <> p.embedding)""",
    }
    problems = []
    for name, sql in checks.items():
        row = conn.execute(sql, {"v": vid}).fetchone()
        n = int(next(iter(row.values()))) if row else 0
        if n:
            problems.append(f"{name}: {n}")
    conn.commit()
    return problems


def index_state(conn: psycopg.Connection, root: Path) -> dict[str, Any]:
    """Watermark, rebuild mark, embedding backlog and last run of one vault."""
    vid = vault_id(conn, root)
    row = conn.execute(
        "SELECT watermark, rebuild_target, last_run,"
        " (SELECT count(*) FROM memory_primary p WHERE p.vault_id = s.vault_id"
        "   AND p.embedding IS NULL) AS backlog"
        " FROM index_state s WHERE vault_id = %s",
        (vid,),
    ).fetchone()
    conn.commit()
    assert row is not None
    return dict(row)


def lock_free(root: Path) -> bool:
    """True if no ingester holds the vault's writer lock right now."""
    lock = gitdiff.git_dir(root) / "vaultmem" / "ingest.lock"
    if not lock.exists():
        return True
    with open(lock, "a") as fh:
        try:
            portalocker.lock(
                fh, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            )
        except portalocker.LockException:
            return False
        portalocker.unlock(fh)
    return True


def ingesters_running(root: Path) -> int:
    """vaultmem processes working in `root` (hook-started ones included), from /proc."""
    n = 0
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            if b"vaultmem" in cmd and Path(os.readlink(proc / "cwd")) == root.resolve():
                n += 1
    return n


def settled(conn: psycopg.Connection, root: Path) -> bool:
    """Watermark == HEAD, no pass pending and no ingester running."""
    head = gitdiff.head_commit(root)
    pending = gitdiff.git_dir(root) / "vaultmem" / "pending"
    with contextlib.suppress(psycopg.Error):
        if index_state(conn, root)["watermark"] != head:
            return False
    return not pending.exists() and lock_free(root) and ingesters_running(root) == 0


def wait_settled(conn: psycopg.Connection, root: Path, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # Twice, apart: a hook fired by the last commit may not have taken the lock yet.
        if settled(conn, root):
            time.sleep(0.5)
            if settled(conn, root):
                return True
        time.sleep(0.2)
    return False


def wait_for(predicate: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def hook_log(root: Path) -> list[str]:
    log = gitdiff.git_dir(root) / "vaultmem" / "ingest.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
