"""Test helpers for the indexing pipeline: snapshots of the index and 'equals a fresh build'."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import psycopg

from vaultmem.config import load_settings
from vaultmem.index import ingest
from vaultmem.store import db


def snapshot(conn: psycopg.Connection, root: Path) -> dict[str, Any]:
    """Everything the index holds for a vault, without ids or timestamps."""
    v = db.find_vault(conn, root)
    assert v is not None, f"vault {root} not registered"
    return snapshot_of(conn, v.id)


def snapshot_of(conn: psycopg.Connection, vault_id: int) -> dict[str, Any]:
    """Everything the index holds for the vault with this id (another installation's, a
    shared one), without ids or timestamps."""
    q = lambda sql: [tuple(r.values()) for r in conn.execute(sql, (vault_id,)).fetchall()]  # noqa: E731
    snap = {
        "notes": q(
            "SELECT path, blob_sha, title, tags FROM memory_notes WHERE vault_id = %s ORDER BY path"
        ),
        "chunks": q(
            "SELECT path, chunk_index, heading, content, content_hash, lexemes::text,"
            " embedding::text, model_id FROM memory_primary WHERE vault_id = %s"
            " ORDER BY path, chunk_index"
        ),
        "audit": q(
            "SELECT path, blob_sha, risk, rule_ids, line_numbers FROM memory_secure_audit"
            " WHERE vault_id = %s ORDER BY path"
        ),
        "skipped": q(
            "SELECT path, blob_sha, reason FROM memory_skipped WHERE vault_id = %s ORDER BY path"
        ),
    }
    conn.commit()
    return snap


def fresh_build_snapshot(
    conn: psycopg.Connection, root: Path, tmp: Path, **kw: Any
) -> dict[str, Any]:
    """Clone HEAD of `root` elsewhere, index it from scratch, and snapshot that."""
    clone = tmp / f"fresh-{len(list(tmp.glob('fresh-*')))}"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    settings = load_settings(clone)
    ingest.catch_up(settings, clone, **kw)
    return snapshot(conn, clone)


def index(root: Path, **kw: Any) -> ingest.IngestResult:
    result = ingest.catch_up(load_settings(root), root, wait=True, **kw)
    assert result is not None
    return result
