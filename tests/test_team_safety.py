"""A team server that a member cannot poison and a frozen laptop cannot stall (issue #44), on
the real team server (tests/team_server.py: PostgreSQL over TCP with SCRAM, PgBouncer with
verified TLS): the shared vector cache under a hostile member, writer sessions bound to their
lease, one sentence for each role or connection mistake, a schema newer than the code, and
the definer functions' privileges.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest
from conftest import git
from psycopg.rows import dict_row
from team_server import TeamServer
from test_team import Machine, admin_conn

from vaultmem.embed.hashing import HashEmbedder
from vaultmem.index import markdown
from vaultmem.store import db

HARMLESS = "# Lunch\n\nThe team lunch is on Thursday at the noodle place.\n"
OTHER_TOPIC = "Rotate the production database credentials and the TLS private keys."


def _vault(tmp: Path, name: str, notes: dict[str, str]) -> Path:
    repo = tmp / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for path, text in notes.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "notes")
    return repo


def _plant(team: TeamServer, db_name: str, tmp: Path, path: str, text: str, vector: str) -> str:
    """Bob, with raw SQL, holds a chunk of `text` in a vault of his own and caches `vector`
    for it under the hash embedder's model before anyone else embeds that text. Returns the
    chunk's content hash."""
    note = markdown.parse_note(path, text)
    chunk = note.chunks[0]
    model = HashEmbedder().model_id
    with db.connect_url(team.url(db_name, "bob")) as bob:
        vault = db.register_vault(bob, tmp / "bob-vault")
        bob.execute(
            "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title)"
            " VALUES (%s, %s, 'b', 'c', 't')",
            (vault.id, path),
        )
        bob.execute(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
            " content_hash, lexemes) VALUES (%s, %s, 0, %s, %s, %s, to_tsvector('simple', %s))",
            (vault.id, path, chunk.heading, chunk.text, chunk.content_hash, chunk.text),
        )
        bob.execute(
            "INSERT INTO embedding_cache (model_id, content_hash, embedding)"
            " VALUES (%s, %s, %s::vector)",
            (model, chunk.content_hash, vector),
        )
        bob.commit()
    return chunk.content_hash


def _alice_vectors(team: TeamServer, db_name: str, content_hash: str) -> list[np.ndarray]:
    with psycopg.connect(team.url(db_name, "alice"), row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT embedding::text AS e FROM memory_primary WHERE content_hash = %s",
            (content_hash,),
        ).fetchall()
    return [np.array(eval(r["e"]), dtype=np.float32) for r in rows if r["e"] is not None]


def _honest(text: str, path: str) -> np.ndarray:
    chunk = markdown.parse_note(path, text).chunks[0]
    return HashEmbedder().embed_documents([markdown.embedding_input(chunk.heading, chunk.text)])[0]


@pytest.fixture
def schema(team: TeamServer, team_db: str) -> Iterator[str]:
    with admin_conn(team, team_db) as conn:
        db.apply_schema(conn)
    yield team_db


def test_a_cached_vector_of_the_wrong_dimension_does_not_stop_alices_ingest(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    h = _plant(team, schema, tmp_path, "lunch.md", HARMLESS, "[1,2,3]")
    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    repo = _vault(tmp_path, "alice-notes", {"lunch.md": HARMLESS})
    alice.run("init", "--vault", str(repo), "--no-hooks")
    alice.run("ingest", "--vault", str(repo), "--wait")
    proc = alice.run("rebuild", "--vault", str(repo))
    assert "Traceback" not in proc.stderr
    got = _alice_vectors(team, schema, h)
    assert len(got) == 1 and np.allclose(got[0], _honest(HARMLESS, "lunch.md"), atol=1e-6)
    verify = alice.run("verify", "--vault", str(repo), check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The database's owner purges every entry, bob's included; alice's chunk keeps its vector.
    owner = Machine(tmp_path, "owner", team.url(schema, "vaultmem_admin"))
    assert "removed 2 cached vectors" in owner.run("gc", "--cache").stdout
    with admin_conn(team, schema) as conn:
        left = conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()
    assert left is not None and left["n"] == 0
    assert len(_alice_vectors(team, schema, h)) == 1


def test_another_topics_vector_cached_for_harmless_text_leaves_alices_results_alone(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    other = HashEmbedder().embed_documents([OTHER_TOPIC])[0]
    literal = "[" + ",".join(f"{x:.7f}" for x in other) + "]"
    h = _plant(team, schema, tmp_path, "lunch.md", HARMLESS, literal)
    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    notes = {
        "lunch.md": HARMLESS,
        "ops/secrets.md": "# Secrets\n\nCredentials live in the vault; keys rotate yearly.\n",
    }
    repo = _vault(tmp_path, "alice-notes", notes)
    alice.run("init", "--vault", str(repo), "--no-hooks")
    alice.run("ingest", "--vault", str(repo), "--wait")
    alice.run("rebuild", "--vault", str(repo))
    got = _alice_vectors(team, schema, h)
    assert len(got) == 1 and np.allclose(got[0], _honest(HARMLESS, "lunch.md"), atol=1e-6)
    assert not np.allclose(got[0], other, atol=1e-3)
    # Bob's vector is still his own: his entry stays, only his trust domain uses it.
    with psycopg.connect(team.url(schema, "bob"), row_factory=dict_row) as bob:
        n = bob.execute(
            "SELECT count(*) AS n FROM embedding_cache WHERE content_hash = %s", (h,)
        ).fetchone()
    assert n is not None and n["n"] >= 1
