"""A team server that a member cannot poison and a frozen laptop cannot stall (issue #44), on
the real team server (tests/support/team_server.py: PostgreSQL over TCP with SCRAM, PgBouncer with
verified TLS): the shared vector cache under a hostile member, writer sessions bound to their
lease, one sentence for each role or connection mistake, a schema newer than the code, and
the definer functions' privileges.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from conftest import git
from psycopg.rows import dict_row
from support.team_server import TeamServer
from test_team import Machine, admin_conn, wait_for

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


def _plant(
    team: TeamServer,
    db_name: str,
    tmp: Path,
    path: str,
    text: str,
    vector: str,
    role: str = "bob",
) -> str:
    """Bob, with raw SQL, holds a chunk of `text` in a vault of his own and caches `vector`
    for it under the hash embedder's model before anyone else embeds that text. Returns the
    chunk's content hash."""
    note = markdown.parse_note(path, text)
    chunk = note.chunks[0]
    model = HashEmbedder().model_id
    with db.connect_url(team.url(db_name, role)) as bob:
        vault = db.register_vault(bob, tmp / f"{role}-side-vault")
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


# --- a frozen writer --------------------------------------------------------------------------

FROZEN_WRITER = """
import os, signal, sys
from pathlib import Path
from typing import Any
from vaultmem.store import db
from vaultmem.store.vault_lease import VaultLease
conn = db.connect_url(sys.argv[1], purpose="vaultmem-ingest")
vault = db.find_vault(conn, Path(sys.argv[2]), installation=sys.argv[3])
lease = VaultLease(conn, vault, float(sys.argv[4]))
lease.acquire()
with lease.writing():
    conn.execute("UPDATE index_state SET updated_at = now() WHERE vault_id = %s", (vault.id,))
    print("frozen", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)  # a laptop suspended mid-transaction
    conn.execute("SELECT 1")
"""


def test_a_writer_stopped_mid_transaction_is_taken_over_after_its_lease(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    alice.env["VAULTMEM_WRITER_LEASE"] = "3"
    repo = _vault(tmp_path, "alice-notes", {"a.md": "# A\n\nalpha\n"})
    alice.run("init", "--vault", str(repo), "--no-hooks")
    (repo / "b.md").write_text("# B\n\nbeta\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "b")
    frozen = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FROZEN_WRITER,
            alice.url,
            str(repo.resolve()),
            alice.installation(),
            "12",  # its lease: longer than the next writer takes to start
        ],
        env=alice.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ingest = None
    try:
        assert frozen.stdout is not None and frozen.stdout.readline().strip() == "frozen"
        ingest = subprocess.Popen(
            [sys.executable, "-m", "vaultmem", "ingest", "--vault", str(repo)],
            cwd=alice.dir,
            env=alice.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # An event, not a clock: the ingest ends (the hang guard is far beyond lease + 10 s,
        # and far below the ~650 s a frozen writer held the vault for before).
        wait_for(lambda: ingest.poll() is not None, "the next writer to take over", 120)
        out, err = ingest.communicate()
        assert ingest.returncode == 0, err
        assert "Traceback" not in err
        assert "within 0 s" not in err
        assert "waiting for another writer" in err, (out, err)
    finally:
        for proc in (frozen, ingest):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
    with psycopg.connect(team.url(schema, "alice"), row_factory=dict_row) as conn:
        notes = conn.execute("SELECT path FROM memory_notes ORDER BY 1").fetchall()
    assert [r["path"] for r in notes] == ["a.md", "b.md"]


# --- roles set up wrong, connections that fail ------------------------------------------------


@pytest.fixture
def outsider(team: TeamServer, schema: str) -> Iterator[str]:
    """A login role outside vaultmem_member, allowed to create tables in the database (a
    would-be second owner), reaching the server directly (the pooler knows only its own users)."""
    import uuid

    role = f"outsider_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(team.direct_url(), autocommit=True) as su:
        su.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'team-pw'")
    with psycopg.connect(team.direct_url(schema), autocommit=True) as su:
        su.execute(f"GRANT CREATE ON SCHEMA public TO {role}")
    try:
        yield role
    finally:
        with psycopg.connect(team.direct_url(schema), autocommit=True) as su:
            su.execute(f"DROP OWNED BY {role}")
        with psycopg.connect(team.direct_url(), autocommit=True) as su:
            su.execute(f"DROP ROLE IF EXISTS {role}")


def _one_sentence(proc: Any, code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [("status",), ("init", "--no-hooks"), ("vaults", "add", "--shared", "team")],
    ids=["status", "init", "vaults-add-shared"],
)
def test_a_role_outside_vaultmem_member_gets_one_sentence_and_nothing_registered(
    team: TeamServer, schema: str, outsider: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    repo = _vault(tmp_path, "notes", {"a.md": "# A\n\nalpha\n"})
    who = Machine(tmp_path, "outsider", team.direct_url(schema, outsider))
    args = [*command, "--vault", str(repo)] if command[0] == "init" else list(command)
    line = _one_sentence(who.run(*args, check=False), 12)
    assert f"role {outsider} is not a member of vaultmem_member" in line
    assert f"GRANT vaultmem_member TO {outsider}" in line
    assert not (who.dir / "config" / "vaultmem" / "config.toml").exists()


def test_connection_failures_each_get_their_own_sentence(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    import socket

    from support.team_server import PASSWORD, free_port, make_certificates

    from vaultmem.errors import DatabaseUnavailable

    def failure(url: str, timeout: int = 5) -> str:
        with pytest.raises(DatabaseUnavailable) as caught:
            db.connect_url(url, timeout=timeout)
        text = str(caught.value)
        assert PASSWORD not in text
        return text

    good = team.url(schema, "alice")
    assert "password" in failure(good.replace(f":{PASSWORD}@", ":wrong@")).lower()
    assert "authentication" in failure(good.replace(f":{PASSWORD}@", ":wrong@"))
    other_ca, _, _ = make_certificates(tmp_path, name="another CA")
    assert "TLS" in failure(good.replace(str(team.ca), str(other_ca)))
    no_tls = f"postgresql://alice:{PASSWORD}@127.0.0.1:{team.pg_port}/{schema}?sslmode=require"
    assert "does not offer TLS" in failure(no_tls)
    down = free_port()
    assert "nothing is listening" in failure(good.replace(str(team.bouncer_port), str(down)))
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(5)
        port = silent.getsockname()[1]
        assert "did not answer" in failure(good.replace(str(team.bouncer_port), str(port)), 2)
    sentences = {
        failure(good.replace(f":{PASSWORD}@", ":wrong@")).split(":")[0],
        failure(good.replace(str(team.ca), str(other_ca))).split(":")[0],
        failure(no_tls).split(":")[0],
        failure(good.replace(str(team.bouncer_port), str(down))).split(":")[0],
    }
    assert len(sentences) == 4


def test_reads_refuse_a_schema_newer_than_the_code(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    repo = _vault(tmp_path, "alice-notes", {"lunch.md": HARMLESS})
    alice.run("init", "--vault", str(repo), "--no-hooks")
    assert "noodle" in alice.run("query", "--vault", str(repo), "team lunch noodle").stdout
    with admin_conn(team, schema) as conn:
        conn.execute("INSERT INTO vaultmem_schema (version) VALUES (99)")
        conn.commit()
    for args in (("status",), ("query", "--vault", str(repo), "team lunch noodle")):
        line = _one_sentence(alice.run(*args, check=False), 5)
        assert "schema is version 99, newer than this vaultmem" in line, args
    assert "noodle" not in alice.hook("where is the team lunch?", cwd=repo)


# --- least privilege --------------------------------------------------------------------------


def test_definer_functions_are_not_public_and_check_their_caller(
    team: TeamServer, schema: str, tmp_path: Path, outsider: str
) -> None:
    with psycopg.connect(team.direct_url(schema), row_factory=dict_row) as su:
        public = su.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.prosecdef"
            " AND p.pronamespace = current_schema()::regnamespace"
            " AND has_function_privilege('public', p.oid, 'EXECUTE')"
        ).fetchall()
        outsiders = su.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.prosecdef"
            " AND p.pronamespace = current_schema()::regnamespace"
            " AND has_function_privilege(%s, p.oid, 'EXECUTE')",
            (outsider,),
        ).fetchall()
    assert public == [] and outsiders == []
    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    repo = _vault(tmp_path, "alice-notes", {"a.md": "# A\n\nalpha\n"})
    alice.run("init", "--vault", str(repo), "--no-hooks")
    with psycopg.connect(team.url(schema, "bob"), row_factory=dict_row) as bob:
        # No enumeration of vault owners by id.
        with pytest.raises(psycopg.errors.UndefinedFunction):
            bob.execute("SELECT vaultmem_vault_owner(1)")
        bob.rollback()
        assert bob.execute("SELECT vaultmem_owns_vault(1) AS o").fetchone()["o"] is False
        bob.rollback()
        # No index (made as the tables' owner) for a model no vault of bob's uses.
        with pytest.raises(psycopg.errors.RaiseException):
            bob.execute(
                "SELECT vaultmem_ensure_vector_index('memory_primary_hnsw_0123456789ab',"
                " 'made-up-model', 3)"
            )
        bob.rollback()
        with pytest.raises(psycopg.errors.RaiseException):
            bob.execute(
                "SELECT vaultmem_ensure_vector_index('memory_primary_hnsw_0123456789ab',"
                " 'hash:v1-64', 100000)"
            )
        bob.rollback()
        # Alice's workers (host names, pids) are hers and the owner's to see, not bob's.
        with psycopg.connect(team.url(schema, "alice")) as a:
            a.execute(
                "INSERT INTO embedding_workers (id, hostname, pid) VALUES ('w', 'alice-mbp', 1)"
            )
            a.commit()
        assert bob.execute("SELECT count(*) AS n FROM embedding_workers").fetchone()["n"] == 0
    with admin_conn(team, schema) as owner:
        assert owner.execute("SELECT count(*) AS n FROM embedding_workers").fetchone()["n"] == 1


# --- the password ------------------------------------------------------------------------------


def test_the_password_goes_to_pgpass_not_the_registry(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    from support.team_server import PASSWORD

    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    repo = _vault(tmp_path, "alice-notes", {"lunch.md": HARMLESS})
    alice.run("init", "--vault", str(repo), "--no-hooks")
    registry = (alice.dir / "config" / "vaultmem" / "config.toml").read_text()
    assert PASSWORD not in registry and "alice@127.0.0.1" in registry
    pgpass = alice.dir / "home" / ".pgpass"
    assert pgpass.stat().st_mode & 0o777 == 0o600
    assert f"127.0.0.1:{team.bouncer_port}:{schema}:alice:{PASSWORD}" in pgpass.read_text()
    # The registered vault is reached with the registry's URL and the password file alone.
    del alice.env["VAULTMEM_DATABASE_URL"]
    assert "noodle" in alice.run("query", "--vault", str(repo), "team lunch noodle").stdout


def test_an_entry_of_the_wrong_dimension_in_ones_own_trust_domain_is_reported_and_mended(
    team: TeamServer, schema: str, tmp_path: Path
) -> None:
    h = _plant(team, schema, tmp_path, "lunch.md", HARMLESS, "[1,2,3]", role="alice")
    alice = Machine(tmp_path, "alice", team.url(schema, "alice"))
    repo = _vault(tmp_path, "alice-notes", {"lunch.md": HARMLESS})
    alice.run("init", "--vault", str(repo), "--no-hooks", "--no-index")
    proc = alice.run("ingest", "--vault", str(repo), "--wait")
    assert "passed over 1 cached vectors that are not 64-dimensional" in proc.stderr
    assert "Traceback" not in proc.stderr
    got = _alice_vectors(team, schema, h)
    assert len(got) == 1 and np.allclose(got[0], _honest(HARMLESS, "lunch.md"), atol=1e-6)
    with psycopg.connect(team.url(schema, "alice"), row_factory=dict_row) as conn:
        dims = conn.execute(
            "SELECT vector_dims(embedding) AS d FROM embedding_cache WHERE content_hash = %s",
            (h,),
        ).fetchall()
    assert [r["d"] for r in dims] == [64]  # her entry was mended
