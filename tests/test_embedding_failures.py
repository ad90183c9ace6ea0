"""Embedding provider failures, through a real local OpenAI-compatible server that misbehaves.

Design under test (see ingest.py): text is indexed first and the watermark tracks text; vectors
are a backlog (chunks with a NULL embedding) drained in batches of one model call and one
transaction each. So a provider failure must: end the run with one plain error line and a
non-zero exit; leave every chunk either fully embedded or still in the backlog (never a vector
from a failed call); leave the backlog unchanged by a failed batch; and the next run, with the
provider healthy again, must drain it to 0 and equal a fresh build.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
from click.testing import CliRunner
from support.embedding_servers import FailingEmbeddingServer, Reply, fake_vector
from support.indexing import fresh_build_snapshot, index, snapshot
from support.reliability import index_state, invariants, note_text, vault_id, vaultmem

from vaultmem.cli import cli
from vaultmem.index.markdown import embedding_input

MODEL = "multilingual-e5-small-q4"  # a size the embedder knows: no probe request to script
DIM = 384
BATCH = 8


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "openai")
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", MODEL)
    monkeypatch.setenv("VAULTMEM_EMBEDDING_BATCH_SIZE", str(BATCH))
    monkeypatch.setenv("VAULTMEM_EMBEDDING_TIMEOUT", "0.5")
    monkeypatch.setenv("VAULTMEM_EMBEDDING_MAX_RETRIES", "1")
    yield


def _embedded(conn, root) -> dict[str, list[float]]:
    """What was embedded (the chunk's embedding input) -> the vector stored for it."""
    rows = conn.execute(
        "SELECT heading, content, embedding, model_id FROM memory_primary"
        " WHERE vault_id = %s AND embedding IS NOT NULL",
        (vault_id(conn, root),),
    ).fetchall()
    conn.commit()
    assert all(r["model_id"] == f"openai:{MODEL}" for r in rows)
    return {embedding_input(r["heading"], r["content"]): r["embedding"] for r in rows}


def _backlog(conn, root) -> set[str]:
    rows = conn.execute(
        "SELECT path || '#' || chunk_index AS k FROM memory_primary"
        " WHERE vault_id = %s AND embedding IS NULL",
        (vault_id(conn, root),),
    ).fetchall()
    conn.commit()
    return {r["k"] for r in rows}


def _ingest(root, real_process: bool) -> tuple[int, str]:
    """(exit code, stderr) of `vaultmem ingest`: a real process, or in-process via CliRunner."""
    from vaultmem import vaults

    vaults.register(root)  # the CLI indexes registered vaults only
    if real_process:
        out = vaultmem("ingest", "--vault", str(root))
        return out.returncode, out.stderr
    result = CliRunner().invoke(cli, ["ingest", "--vault", str(root)])
    assert isinstance(result.exception, SystemExit | None), result.exception  # no traceback
    return result.exit_code, result.stderr


# (scripted failure, expected error text, run in a real process). One real process proves the
# whole CLI path (exit code, stderr); the others run in-process to keep the suite fast.
FAILURES = [
    pytest.param(Reply.error(500), "kept failing after 1 retries (HTTP 500)", True, id="5xx"),
    pytest.param(Reply(delay=5.0), "did not answer within 0.5 s", False, id="timeout"),
    pytest.param(Reply(body=b"<html>bad gateway</html>"), "malformed JSON", False, id="bad-json"),
    pytest.param(Reply(count_delta=-1), "returned 7 vectors for 8 texts", False, id="short"),
]


@pytest.mark.parametrize(("failure", "message", "real_process"), FAILURES)
def test_a_failing_provider_fails_cleanly_and_the_next_run_drains_the_backlog(
    conn, vault, tmp_path, openai_env, monkeypatch, failure, message, real_process
) -> None:
    rng = random.Random(3)
    for i in range(10):
        vault.write(f"n{i}.md", note_text(rng, f"Note {i}"))
    head = vault.commit()
    good = 2  # batches answered before the provider breaks

    with FailingEmbeddingServer([Reply()] * good, then=failure, dimension=DIM) as bad:
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", bad.base_url)
        code, err = _ingest(vault.root, real_process)
        assert code == 6, err
        assert "Traceback" not in err
        assert err.strip().count("\n") == 0, err  # one line
        assert err.startswith("Error: embedding server") and message in err, err

        # Text is indexed (searchable) and the watermark, which tracks text, is at HEAD.
        state = index_state(conn, vault.root)
        assert state["watermark"] == head
        total = len(snapshot(conn, vault.root)["chunks"])
        # Exactly the answered batches were stored, each vector the server's for that text.
        embedded = _embedded(conn, vault.root)
        assert len(embedded) == good * BATCH
        for text, vec in embedded.items():
            assert np.allclose(np.asarray(vec.to_list()), fake_vector(text, DIM), atol=1e-6)
        backlog = _backlog(conn, vault.root)
        assert len(backlog) == total - good * BATCH == state["backlog"]
        assert invariants(conn, vault.root) == []
        assert message in state["last_run"]["errors"][0]

        # Still failing, from the first call: the failed batch leaves the backlog unchanged.
        code, err = _ingest(vault.root, real_process)
        assert code == 6 and message in err, err
        assert _backlog(conn, vault.root) == backlog

    with FailingEmbeddingServer(dimension=DIM) as healthy:
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", healthy.base_url)
        result = index(vault.root)
        assert result.backlog == 0 and result.errors == []
        assert result.embedded == len(backlog)  # only what was missing, nothing twice
        assert index_state(conn, vault.root)["backlog"] == 0
        assert invariants(conn, vault.root) == []
        assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
