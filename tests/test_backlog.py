"""Embedding backlog: a commit is searchable by text at once, by vector once the backlog drains;
a model change never mixes vectors and re-embeds through the backlog."""

from __future__ import annotations

import time

from click.testing import CliRunner
from support.embedding_servers import FailingEmbeddingServer, Reply
from support.indexing import index, snapshot

from vaultmem import store
from vaultmem.cli import cli
from vaultmem.config import load_settings
from vaultmem.embed import get_embedder
from vaultmem.index import git_hooks
from vaultmem.search import search
from vaultmem.store import db


def test_a_note_committed_behind_a_large_backlog_is_found_lexically_at_once(
    conn, vault, monkeypatch
) -> None:
    for i in range(60):
        vault.write(f"bulk/{i:02}.md", f"# Bulk {i}\n\nfiller text number {i} about gardening\n")
    vault.commit()
    # A slow embedding service: every call takes a while, so the backlog lasts.
    slow = Reply(delay=0.4)
    with FailingEmbeddingServer(then=slow, dimension=16) as srv:
        monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "openai")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", srv.base_url)
        monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "slow-test-model")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BATCH_SIZE", "2")
        index(vault.root, embed=False)  # text only: 60 notes waiting for vectors
        settings = load_settings(vault.root)
        embedder = get_embedder(settings)
        vid = db.find_vault(conn, vault.root).id
        assert store.backlog_size(conn, vid, embedder.model_id) == 60
        conn.commit()

        vault.register()
        git_hooks.install(vault.root)
        vault.write(
            "new/zebra.md", "# Zebra crossing\n\nThe quokka xylophone rehearsal is on Tuesday.\n"
        )
        vault.commit()
        deadline = time.monotonic() + 15
        hits = []
        while time.monotonic() < deadline and not hits:
            hits = search(conn, vid, "quokka xylophone", embedder, mode="lexical")
            conn.commit()
            time.sleep(0.1)
        assert hits and hits[0].path == "new/zebra.md"
        # The backlog is still far from drained: the note was not waiting behind it.
        assert store.backlog_size(conn, vid, embedder.model_id) > 10
        conn.commit()
        # Once the backlog drains, vector search finds it too.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and store.backlog_size(conn, vid, embedder.model_id):
            conn.commit()
            time.sleep(0.5)
        conn.commit()
        assert store.backlog_size(conn, vid, embedder.model_id) == 0
        # The fake service maps equal texts to equal vectors: query with the chunk's own text.
        text = conn.execute(
            "SELECT content FROM memory_primary WHERE vault_id = %s AND path = 'new/zebra.md'",
            (vid,),
        ).fetchone()["content"]
        hits = search(conn, vid, text, embedder, mode="vector", gated=False)
        assert "new/zebra.md" in [h.path for h in hits]


def test_a_model_change_reembeds_without_mixing_vectors(conn, vault, monkeypatch) -> None:
    vault.write("a.md", "# A\n\napples and pears\n")
    vault.write("b.md", "# B\n\nbananas\n")
    vault.commit()
    index(vault.root)
    old = {c[7] for c in snapshot(conn, vault.root)["chunks"]}
    assert old == {"hash:v1-64"}
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "32")  # the hash provider at 32 dimensions
    out = CliRunner().invoke(cli, ["status"]).stdout
    assert "model hash:v1-64, settings now name hash:v1-32: the next ingest re-embeds" in out
    result = index(vault.root)
    assert result.embedded == 2 and result.backlog == 0
    snap = snapshot(conn, vault.root)
    assert {c[7] for c in snap["chunks"]} == {"hash:v1-32"}
    assert all(len(c[6].strip("[]").split(",")) == 32 for c in snap["chunks"])
    data = CliRunner().invoke(cli, ["status", "--json"]).stdout
    assert "hash:v1-32" in data
    out = CliRunner().invoke(cli, ["status"]).stdout
    assert "embeddings: model hash:v1-32; 0 chunks awaiting vectors" in out
    # Switching back reuses the cached vectors of the first model: nothing is embedded.
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "64")
    back = index(vault.root)
    assert back.embedded == 0 and back.reused == 2


def test_a_rebuild_says_it_waits_and_a_background_drainer_steps_aside(
    conn, vault, monkeypatch
) -> None:
    """A drainer embedding a long backlog holds the writer lock; `vaultmem rebuild` says it is
    waiting, the drainer lets it in after its current batch, and carries on after it. Events
    only: the embedding service answers when the test lets it."""
    import os
    import subprocess
    import sys
    import threading

    from support.reliability import wait_for

    from vaultmem import vaults
    from vaultmem.index import statedir

    for i in range(20):
        vault.write(f"bulk/{i:02}.md", f"# Bulk {i}\n\nfiller text number {i} about gardening\n")
    vault.commit()
    go = threading.Event()
    with FailingEmbeddingServer(then=Reply(gate=go), dimension=16) as srv:
        monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "openai")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", srv.base_url)
        monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "gated-test-model")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BATCH_SIZE", "1")
        vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
        index(vault.root, embed=False)  # 20 chunks wait for vectors, one call each
        root = str(vault.root)
        drainer = subprocess.Popen(
            [sys.executable, "-m", "vaultmem", "ingest", "--from-hook", "--vault", root],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rebuild = None
        try:
            assert wait_for(lambda: len(srv.requests) >= 1, 120)  # embedding: it holds the lock
            rebuild = subprocess.Popen(
                [sys.executable, "-m", "vaultmem", "rebuild", "--no-embed", "--vault", root],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            files = statedir.state_files(vault.root)
            assert wait_for(files.waiting.exists, 120)  # the rebuild waits, and says so
            go.set()  # the drainer's call returns; it steps aside at the end of that batch
            _, err = rebuild.communicate(timeout=600)
            rebuilt_at = time.monotonic()
            assert rebuild.returncode == 0, err
            assert "waiting for the writer lock: another ingest of this vault is running" in err
            assert drainer.wait(timeout=600) == 0
        finally:
            go.set()
            for proc in (drainer, rebuild):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
        # It went on embedding after the rebuild was done, to the end of the backlog.
        assert any(r.at > rebuilt_at for r in srv.requests)
        vid = db.find_vault(conn, vault.root).id
        model = get_embedder(load_settings(vault.root)).model_id
        assert store.backlog_size(conn, vid, model) == 0
        conn.commit()
