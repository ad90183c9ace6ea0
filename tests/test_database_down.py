"""Database down when commits happen: commits succeed, hooks log one line, nothing is lost.

Uses its own bundled server in a private VAULTMEM_HOME (not the session's test server), stopped
and started with the real `vaultmem db stop|start`, and real hooks installed by `vaultmem init`.
The home is made with mkdtemp outside pytest's tmp dir and opened to 0755 because the server
runs as the `embedded_postgres` OS user when the tests run as root.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.indexing import fresh_build_snapshot, snapshot
from support.reliability import hook_log, index_state, invariants, vaultmem, wait_for, wait_settled

from vaultmem.config import load_settings
from vaultmem.store import db, server


@pytest.fixture
def private_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = Path(tempfile.mkdtemp(prefix="vaultmem-dbdown-"))
    home.chmod(0o755)
    monkeypatch.setenv("VAULTMEM_HOME", str(home))
    monkeypatch.delenv("VAULTMEM_DATABASE_URL", raising=False)
    try:
        yield home
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _commit(vault, message: str) -> None:
    """A real `git commit` (hooks run). How long commits take is bench/hook_latency.py's
    business: a test asserts no wall-clock limit."""
    vault.git("add", "-A")
    out = subprocess.run(
        ["git", "commit", "-q", "-m", message], cwd=vault.root, capture_output=True
    )
    assert out.returncode == 0, out.stderr


def _connect():
    return db.connect(load_settings(), start=False)


def test_commits_while_the_database_is_down_are_caught_up(private_home, vault, tmp_path):
    assert vaultmem("db", "start").returncode == 0
    vault.write("keep.md", "# Keep\n\nstays the same\n")
    vault.write("edit.md", "# Edit\n\nfirst version\n")
    vault.write("gone.md", "# Gone\n\nwill be deleted\n")
    vault.write("old/name.md", "# Renamed\n\nwill move\n")
    vault.commit("base")
    init = vaultmem("init", "--vault", str(vault.root))
    assert init.returncode == 0, init.stderr
    conn = _connect()
    try:  # init leaves the vectors to a background drainer: let it finish (and log) first
        assert wait_settled(conn, vault.root), hook_log(vault.root)
    finally:
        conn.close()
    before = len(hook_log(vault.root))

    # Down: three commits, each hook logs exactly one line saying how to fix it.
    assert vaultmem("db", "stop").returncode == 0
    changes = [
        lambda: vault.write("edit.md", "# Edit\n\nsecond version while down\n"),
        lambda: vault.delete("gone.md"),
        lambda: vault.rename("old/name.md", "new/name.md"),
    ]
    for i, change in enumerate(changes, 1):
        change()
        _commit(vault, f"while down {i}")
        assert wait_for(lambda i=i: len(hook_log(vault.root)) >= before + i, 30), hook_log(
            vault.root
        )
    time.sleep(1)  # a late second line per commit would show up here
    lines = hook_log(vault.root)[before:]
    assert len(lines) == len(changes), lines
    for line in lines:
        assert "error: the bundled database is not running" in line
        assert "vaultmem db start" in line
        assert "Traceback" not in line
    assert not server.status(private_home).running  # no hook restarted what the user stopped

    # Up again: status shows the gap and the hook's error; the next commit catches up all.
    assert vaultmem("db", "start").returncode == 0
    status = vaultmem("status")
    assert status.returncode == 0, status.stderr
    assert "3 commits behind" in status.stdout and "last hook:" in status.stdout
    data = json.loads(vaultmem("status", "--json").stdout)
    assert data["vaults"][0]["commits_behind"] == 3
    vault.write("after.md", "# After\n\nthe database is back\n")
    _commit(vault, "back up")
    conn = _connect()
    try:
        assert wait_settled(conn, vault.root), hook_log(vault.root)
        assert " ok incremental" in hook_log(vault.root)[-1]
        assert invariants(conn, vault.root) == []
        assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
    finally:
        conn.close()

    # Down again: this time `vaultmem ingest` catches up the missed commits.
    assert vaultmem("db", "stop").returncode == 0
    vault.write("edit.md", "# Edit\n\nthird version, down again\n")
    _commit(vault, "down again 1")
    vault.write("another.md", "# Another\n\nnote\n")
    _commit(vault, "down again 2")
    # One error line per ingester started: two quick commits may share one (the second
    # finds the first still starting and leaves it the pending mark).
    assert wait_for(lambda: len(hook_log(vault.root)) >= before + len(lines) + 2, 30), hook_log(
        vault.root
    )
    assert all("not running" in line for line in hook_log(vault.root)[before + len(lines) + 1 :])
    assert vaultmem("db", "start").returncode == 0
    out = vaultmem("ingest", "--vault", str(vault.root))
    assert out.returncode == 0, out.stderr
    assert "incremental" in out.stdout
    conn = _connect()
    try:
        assert index_state(conn, vault.root)["watermark"] == vault.head()
        assert invariants(conn, vault.root) == []
        assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
    finally:
        conn.close()
