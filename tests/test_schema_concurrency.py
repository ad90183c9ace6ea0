"""Applying the schema while other vaults of the same database ingest: never a deadlock.

`vaultmem init` of one vault applies the schema; another vault's ingest may be writing at that
very moment. An up-to-date schema must take no lock that writer waits for, and an upgrade
must wait for the writer instead of deadlocking with it. The writer here is the real
ingester, held inside its write transaction by an event (after it touched memory_primary,
before index_state: the order of its drain's first transaction); the init is the real CLI in
its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from support.indexing import index
from support.reliability import wait_for

from vaultmem import store, vaults
from vaultmem.config import load_settings
from vaultmem.embed import get_embedder
from vaultmem.index import backlog, ingest
from vaultmem.store import db

GUARD = 60  # seconds: only a broken build ever waits this long


@contextmanager
def writer_paused_in_its_transaction(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[threading.Event, threading.Event, list[BaseException]]]:
    """Vault `root`'s ingester draining its backlog, stopped inside its first transaction
    right before it writes index_state; yields (inside, go, errors). Joins it on exit."""
    inside, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    real = store.set_model

    def set_model(conn: object, vault_id: int, model: str) -> None:
        inside.set()
        go.wait(GUARD)
        real(conn, vault_id, model)

    monkeypatch.setattr(store, "set_model", set_model)
    settings = load_settings(root)
    conn, vault = ingest.open_index(settings, root)

    def run() -> None:
        try:
            backlog.drain(ingest.Ingester(settings, conn, vault), ingest.IngestResult())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        assert inside.wait(GUARD), errors
        yield inside, go, errors
    finally:
        go.set()
        worker.join(GUARD)
        conn.close()
    assert not worker.is_alive()


def _backends_waiting(db_url: str, locktype: str | None = None) -> int:
    """Backends of this database other than this one waiting for a lock (of `locktype`)."""
    with psycopg.connect(db_url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND a.datname = current_database() AND a.pid <> pg_backend_pid()"
            " AND (%s::text IS NULL OR l.locktype = %s::text)",
            (locktype, locktype),
        ).fetchone()
    return int(row[0]) if row else 0


def _init(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vaultmem",
            "init",
            "--vault",
            str(root),
            "--no-index",
            "--no-hooks",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def _repo(root: Path, name: str) -> None:
    root.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=root, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    for i in range(6):
        (root / f"n{i}.md").write_text(f"# Note {i} of {name}\n\nabout restoring backups, {i}\n")
    run("add", "-A")
    run("commit", "-q", "-m", "notes")


def _two_vaults(tmp_path: Path, db_url: str) -> tuple[Path, Path]:
    """Vault A indexed (text only: its vectors wait in the backlog) and vault B not yet."""
    a, b = tmp_path / "a", tmp_path / "b"
    _repo(a, "a")
    _repo(b, "b")
    vaults.register(a, database_url=db_url)
    index(a, embed=False)
    return a, b


def _backlog(conn: psycopg.Connection, root: Path) -> int:
    vault = db.find_vault(conn, root)
    assert vault is not None
    model = get_embedder(load_settings(root)).model_id
    n = store.backlog_size(conn, vault.id, model)
    conn.commit()
    return n


def test_init_of_another_vault_during_an_ingest_takes_no_lock_and_deadlocks_nothing(
    conn, db_url, tmp_path, monkeypatch
) -> None:
    a, b = _two_vaults(tmp_path, db_url)
    with writer_paused_in_its_transaction(a, monkeypatch) as (_inside, go, errors):
        init = _init(b)
        # Either init finished already (an up-to-date schema takes no lock), or it is waiting
        # for a lock the paused writer holds: the case that used to end in DeadlockDetected.
        assert wait_for(lambda: init.poll() is not None or _backends_waiting(db_url) > 0, GUARD)
        go.set()
        out, err = init.communicate(timeout=GUARD)
    assert not errors, errors
    assert init.returncode == 0, err
    assert "schema up to date" in out
    assert "Deadlock" not in err
    assert _backlog(conn, a) == 0  # the writer went on and drained its backlog


def test_an_up_to_date_schema_is_applied_without_waiting_for_any_table(conn, db_url) -> None:
    holder = psycopg.connect(db_url)
    try:
        holder.execute("LOCK TABLE memory_skipped, memory_primary IN ACCESS EXCLUSIVE MODE")
        other = db.connect_url(db_url)
        try:
            # A guard, not a measurement: should the apply wait for the tables it fails at once.
            other.execute("SET lock_timeout = '20s'")
            other.commit()
            assert db.apply_schema(other) == []
        finally:
            other.close()
    finally:
        holder.rollback()
        holder.close()


def test_a_schema_upgrade_waits_for_a_running_ingest_then_applies(
    conn, db_url, tmp_path, monkeypatch
) -> None:
    a, b = _two_vaults(tmp_path, db_url)
    with writer_paused_in_its_transaction(a, monkeypatch) as (_inside, go, errors):
        # As if schema.sql had changed since the database was last upgraded.
        conn.execute("COMMENT ON TABLE vaultmem_schema IS 'an older schema.sql'")
        conn.commit()
        assert not db.schema_is_current(conn)
        init = _init(b)
        # The upgrade queues behind the writer on the advisory lock, before any DDL.
        assert wait_for(lambda: _backends_waiting(db_url, "advisory") > 0, GUARD), init.poll()
        assert init.poll() is None
        go.set()
        out, err = init.communicate(timeout=GUARD)
    assert not errors, errors
    assert init.returncode == 0, err
    assert db.schema_is_current(conn)
    assert _backlog(conn, a) == 0
