"""`vaultmem status`: each vault's last run, how far the index is behind HEAD, the backlog.

A failure in a background run (hook) is silent by design; status is where it must show.
"""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner
from support.embedding_servers import free_port
from support.indexing import index

from vaultmem.cli import cli


def _status(as_json: bool = False):
    result = CliRunner().invoke(cli, ["status", "--json"] if as_json else ["status"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["vaults"] if as_json else result.stdout


def test_status_shows_an_up_to_date_index_and_the_last_run(conn, vault) -> None:
    vault.write("a.md", "# A\n\nalpha\n")
    vault.write("bin.md", b"\0binary")
    head = vault.commit()
    index(vault.root)
    out = _status()
    assert f"indexed to {head[:12]} = HEAD (up to date)" in out
    assert "incremental" in out or "reconcile" in out
    assert ", ok; 1 added, 0 updated" in out and "1 skipped" in out
    assert "skipped 'bin.md': binary content (NUL bytes)" in out
    (v,) = _status(as_json=True)
    assert (v["head"], v["watermark"], v["commits_behind"], v["backlog"]) == (head, head, 0, 0)
    assert v["last_run"]["errors"] == [] and v["last_run"]["counts"]["added"] == 1
    blob = vault.git("rev-parse", "HEAD:bin.md").strip()
    reason = "binary content (NUL bytes)"
    assert v["skipped_files"] == [
        {"path": "bin.md", "code": "binary", "reason": reason, "blob_sha": blob}
    ]


def test_a_failed_run_and_the_commits_it_missed_show_in_status(conn, vault, monkeypatch) -> None:
    vault.write("a.md", "# A\n\nalpha\n")
    indexed_to = vault.commit()
    monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "multilingual-e5-small-q4")
    monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MAX_RETRIES", "0")
    vault.register()
    failed = CliRunner().invoke(cli, ["ingest", "--vault", str(vault.root)])
    assert failed.exit_code == 6 and "cannot be reached" in failed.stderr
    vault.write("b.md", "# B\n")
    vault.commit()
    vault.write("c.md", "# C\n")
    head = vault.commit()

    out = _status()
    assert "FAILED: embedding server http://127.0.0.1:" in out and "cannot be reached" in out
    assert f"indexed to {indexed_to[:12]}, HEAD is {head[:12]}, 2 commits behind" in out
    assert "run `vaultmem ingest`" in out
    assert "1 awaiting embeddings" in out
    (v,) = _status(as_json=True)
    assert (v["watermark"], v["head"], v["commits_behind"]) == (indexed_to, head, 2)
    assert "cannot be reached" in v["last_run"]["errors"][0]
    assert v["backlog"] == 1  # a.md's one chunk: its text is indexed, its vector is not


def test_status_says_when_the_watermark_left_the_history(conn, vault) -> None:
    vault.write("a.md", "# A\n")
    vault.commit()
    index(vault.root)
    vault.write("a.md", "# A amended\n")
    vault.git("commit", "-qa", "--amend", "-m", "amended")
    assert "which is not in HEAD's history" in _status()
    assert _status(as_json=True)[0]["commits_behind"] == -1


def test_status_reports_a_vault_folder_that_is_gone(conn, vault) -> None:
    vault.write("a.md", "# A\n")
    vault.commit()
    index(vault.root)
    shutil.rmtree(vault.root)
    out = _status()
    assert f"the vault folder {vault.root} is gone" in out


def test_once_every_chunk_has_its_vector_status_says_so_while_the_run_goes_on(
    conn, vault, monkeypatch
) -> None:
    """The drainer goes on after the backlog (the generic requests, the second opinion): the
    progress it left must not say "embedding now: 8 of 40 done" beside "0 awaiting"."""
    from vaultmem.embed import Embedder
    from vaultmem.index import backlog, statedir

    for i in range(40):
        vault.write(f"n{i}.md", f"# Note {i}\n\nbody {i}\n")
    vault.commit()
    vault.register()
    seen: list[tuple[object, str]] = []
    real = backlog.prepare_generic

    def after_the_backlog(embedder: Embedder) -> None:
        seen.append((statedir.read_progress(vault.root), _status()))
        real(embedder)

    monkeypatch.setattr(backlog, "prepare_generic", after_the_backlog)
    index(vault.root)
    live, out = seen[-1]
    assert live is None
    assert "0 chunks awaiting vectors" in out and "embedding now" not in out
    assert "then these vectors" not in out


def test_status_shows_a_killed_worker_of_this_machine_as_not_running(indexed_vault) -> None:
    """A SIGKILLed worker never marks its row stopped, and its row was seen moments ago: its
    own machine can tell that its process is gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from vaultmem.store import db

    worker = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", "worker", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, never a measurement
        with db.connect_url(os.environ["VAULTMEM_DATABASE_URL"]) as conn:
            while True:  # the worker's row: it registered and waits for work
                row = conn.execute(
                    "SELECT count(*) AS n FROM embedding_workers WHERE pid = %s", (worker.pid,)
                ).fetchone()
                conn.commit()
                if row["n"] or worker.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
        assert "running" in _status()
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    out = _status()
    (line,) = [ln for ln in out.splitlines() if ln.startswith("worker ")]
    assert f"pid {worker.pid}" in line and "not running" in line, line
    result = CliRunner().invoke(cli, ["status", "--json"])
    (w,) = json.loads(result.stdout)["workers"]
    assert w["state"] == "gone"
