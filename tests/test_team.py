"""Many machines, many people, one PostgreSQL: a real server on 127.0.0.1 over TCP, PgBouncer in
transaction mode in front of it serving verified TLS (tests/support/team_server.py), several simulated
machines (each its own home, registry and installation id, running the real CLI and git hooks in
subprocesses), roles checked with raw SQL, writer leases, and workers killed mid-batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from conftest import GIT_ENV, git
from psycopg.rows import dict_row
from support.embedding_servers import FailingEmbeddingServer, Reply, fake_vector
from support.indexing import snapshot_of
from support.team_server import TeamServer, make_certificates

from vaultmem.index import markdown
from vaultmem.store import db, vault_lease


def sha256_hex(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


REPO_SRC = Path(__file__).resolve().parents[1] / "src"


def wait_for(check: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    """Poll `check` until it returns something truthy (an event, never a time limit on speed:
    the timeout only keeps a broken run from hanging)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Machine:
    """One simulated machine: its own home, registry and installation id, a database role."""

    def __init__(self, tmp: Path, name: str, url: str) -> None:
        self.name = name
        self.dir = tmp / name
        self.dir.mkdir()
        self.url = url
        self.env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.dir / "home"),
            "XDG_CONFIG_HOME": str(self.dir / "config"),
            "XDG_DATA_HOME": str(self.dir / "data"),
            "VAULTMEM_DATABASE_URL": url,
            "VAULTMEM_EMBEDDING_PROVIDER": "hash",
            "VAULTMEM_WARM_IDLE": "0",
            "VAULTMEM_HOOK_TIMEOUT": "60",
            "PYTHONPATH": str(REPO_SRC),
            **GIT_ENV,
        }
        (self.dir / "home").mkdir()

    def run(
        self, *args: str, cwd: Path | None = None, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "vaultmem", *args],
            cwd=cwd or self.dir,
            env=self.env,
            capture_output=True,
            text=True,
            input=input.decode() if input is not None else None,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{self.name}: vaultmem {' '.join(args)} failed "
                f"({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def git(self, repo: Path, *args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=repo, env=self.env, capture_output=True, check=True
        )
        return out.stdout.decode()

    def installation(self) -> str:
        """The id this machine's registry records for its host."""
        import socket
        import tomllib

        registry = tomllib.loads((self.dir / "config" / "vaultmem" / "config.toml").read_text())
        return str(registry["installations"][socket.gethostname()])

    def hook(self, prompt: str, cwd: Path | None = None) -> str:
        payload = json.dumps(
            {
                "hook_event_name": "UserPromptSubmit",
                "prompt": prompt,
                "cwd": str(cwd or self.dir),
                "session_id": uuid.uuid4().hex,
            }
        )
        return self.run("claude-hook", input=payload.encode()).stdout


def admin_conn(team: TeamServer, name: str) -> psycopg.Connection[Any]:
    """The owner role, through the pooler: sees every row, as the single-user default does."""
    return db.connect_url(team.url(name, "vaultmem_admin"))


def vault_rows(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT v.id, v.root, v.name, v.shared, v.installation::text AS installation,"
        " v.owner::regrole::text AS owner, s.watermark FROM vaults v"
        " JOIN index_state s ON s.vault_id = v.id ORDER BY v.id"
    ).fetchall()
    conn.commit()
    return [dict(r) for r in rows]


def fresh_build(machine: Machine, repo: Path, commit: str, tmp: Path) -> Path:
    """A clone of `repo` at `commit`, indexed from scratch by `machine` (a vault of its own)."""
    clone = tmp / f"fresh-{commit[:8]}-{uuid.uuid4().hex[:4]}"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True, env=machine.env)
    subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True, env=machine.env)
    machine.run("init", "--vault", str(clone), "--no-hooks", "--name", clone.name)
    machine.run("ingest", "--vault", str(clone), "--wait")  # the vectors too
    return clone


def bare_remote(tmp: Path, notes: dict[str, str]) -> tuple[Path, Path]:
    """A bare remote holding `notes` in one commit, and the clone that pushed it."""
    remote, seed = tmp / "remote.git", tmp / "seed"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(remote))
    git(tmp, "clone", "-q", str(remote), str(seed))
    for path, text in notes.items():
        (seed / path).parent.mkdir(parents=True, exist_ok=True)
        (seed / path).write_text(text)
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "seed")
    git(seed, "push", "-q", "origin", "main")
    return remote, seed


NOTES = {
    "ops/deploy.md": "# Deploy\n\nRoll back with `kubectl rollout undo deployment/web`.\n",
    "ops/backup.md": "# Backups\n\nNightly pg_dump to the cold bucket, kept 30 days.\n",
    "team/oncall.md": "# On-call\n\nThe pager rotates weekly; hand over on Mondays.\n",
}


def test_tls_is_verified_against_the_ca_and_the_host_name(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    url = team.url(team_db, "alice")
    with db.connect_url(url) as conn:
        assert conn.pgconn.ssl_in_use
        assert db.server_info(conn)["tls"] is True
    other_ca, _, _ = make_certificates(tmp_path, name="another CA")
    with pytest.raises(Exception, match="TLS to .* failed"):
        db.connect_url(url.replace(str(team.ca), str(other_ca)))
    wrong_name = (
        f"host=wrong.example hostaddr=127.0.0.1 port={team.bouncer_port} dbname={team_db}"
        f" user=alice password=team-pw sslmode=verify-full sslrootcert={team.ca}"
    )
    with pytest.raises(psycopg.OperationalError, match="does not match|certificate"):
        psycopg.connect(wrong_name)


def test_a_non_superuser_sets_up_when_pgvector_exists_and_gets_one_line_when_not(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    vault = tmp_path / "notes"
    vault.mkdir()
    git(vault, "init", "-q", "-b", "main")
    (vault / "a.md").write_text("# A\n\nalpha beta\n")
    git(vault, "add", "-A")
    git(vault, "commit", "-q", "-m", "a")
    admin = Machine(tmp_path, "admin", team.url(team_db, "vaultmem_admin"))
    out = admin.run("init", "--vault", str(vault), "--no-hooks").stdout
    assert "schema applied" in out
    assert "over TLS" in admin.run("status").stdout
    bare = team.new_database(extension=False)
    try:
        other = Machine(tmp_path, "other", team.url(bare, "vaultmem_admin"))
        proc = other.run("init", "--vault", str(vault), "--no-hooks", check=False)
        assert proc.returncode == 5
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, proc.stderr
        assert "CREATE EXTENSION vector" in lines[0] and "vaultmem_admin" in lines[0]
        assert "team-pw" not in proc.stderr + proc.stdout
    finally:
        team.drop_database(bare)


def test_pgvector_older_than_needed_is_one_clear_error(
    team: TeamServer, team_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultmem.errors import SchemaError

    monkeypatch.setattr(db, "MIN_PGVECTOR", (99, 0, 0))
    with db.connect_url(team.url(team_db, "vaultmem_admin")) as conn:
        with pytest.raises(SchemaError, match=r"pgvector 0\.8\.\d+ is too old.*99\.0\.0"):
            db.apply_schema(conn)


def test_one_path_on_two_installations_is_two_vaults(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    with admin_conn(team, team_db) as conn:
        db.apply_schema(conn)
        one = db.register_vault(conn, tmp_path, installation=str(uuid.uuid4()))
        two = db.register_vault(conn, tmp_path, installation=str(uuid.uuid4()))
        again = db.register_vault(conn, tmp_path, installation=_inst(conn, one))
        assert one.id != two.id and again.id == one.id
        # A row from before installations is claimed by the first installation that opens it.
        conn.execute("INSERT INTO vaults (root, name) VALUES ('/legacy', 'legacy')")
        conn.commit()
        claimed = db.register_vault(conn, Path("/legacy"), installation=str(uuid.uuid4()))
        other = db.register_vault(conn, Path("/legacy"), installation=str(uuid.uuid4()))
        legacy = [r for r in vault_rows(conn) if r["root"] == "/legacy"]
        assert len(legacy) == 2 and claimed.id != other.id
        assert all(r["installation"] for r in legacy)


def _inst(conn: psycopg.Connection[Any], vault: db.Vault) -> str:
    row = conn.execute(
        "SELECT installation::text AS i FROM vaults WHERE id = %s", (vault.id,)
    ).fetchone()
    conn.commit()
    return str(row["i"])


def test_two_machines_and_a_shared_vault_through_the_pooler(
    team: TeamServer, team_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, _ = bare_remote(tmp_path, NOTES)  # the team's remote, with a first commit

    # The owner sets the schema up once (as on a managed server); the machines are members.
    with admin_conn(team, team_db) as conn:
        db.apply_schema(conn)
    server = Machine(tmp_path, "server", team.url(team_db, "carol"))
    a = Machine(tmp_path, "laptop-a", team.url(team_db, "alice"))
    b = Machine(tmp_path, "laptop-b", team.url(team_db, "bob"))

    # The server indexes the bare remote as the shared vault `team`, on every push.
    server.run("init", "--vault", str(remote), "--shared", "team")
    # Each machine clones it and indexes its own clone (its own row, its own installation).
    clones = {}
    for m in (a, b):
        clone = m.dir / "notes"
        m.git(m.dir, "clone", "-q", str(remote), str(clone))
        m.git(clone, "config", "commit.gpgsign", "false")
        m.run("init", "--vault", str(clone))
        clones[m.name] = clone
    ca, cb = clones["laptop-a"], clones["laptop-b"]

    # Bob registers the shared vault before anyone granted it: nothing to read yet.
    b.run("vaults", "add", "--shared", "team")
    b.run("vaults", "default", "team")  # what bob's agent reads from any directory
    assert b.hook("how do I roll back the deployment?") == ""
    server.run("grant", "team", "bob")
    server.run("grant", "team", "alice")
    assert "kubectl rollout undo" in b.hook("how do I roll back the deployment?")

    # Both commit and push (bob after pulling alice's push); every hook fires.
    (ca / "ops" / "deploy.md").write_text(NOTES["ops/deploy.md"] + "\nCanary first: 5 %.\n")
    a.git(ca, "commit", "-q", "-am", "canary")
    a.git(ca, "push", "-q", "origin", "HEAD:main")
    # A private note of alice's, committed but never pushed: bob must never see it.
    (ca / "journal").mkdir()
    (ca / "journal" / "alice.md").write_text("# Reading list\n\nzebracorn field guide, chapter 3\n")
    a.git(ca, "add", "-A")
    a.git(ca, "commit", "-q", "-m", "private note (not pushed)")
    (cb / "team" / "oncall.md").write_text("# On-call\n\nHand over on Tuesdays now.\n")
    b.git(cb, "commit", "-q", "-am", "tuesdays")
    b.git(cb, "pull", "-q", "--rebase", "origin", "main")
    b.git(cb, "push", "-q", "origin", "HEAD:main")

    heads = {
        "laptop-a": a.git(ca, "rev-parse", "HEAD").strip(),
        "laptop-b": b.git(cb, "rev-parse", "HEAD").strip(),
        "team": git(remote, "rev-parse", "main").strip(),
    }
    with admin_conn(team, team_db) as conn:

        def rows() -> dict[str, dict[str, Any]]:
            out = {}
            for r in vault_rows(conn):
                key = (
                    "team"
                    if r["shared"]
                    else next((n for n, c in clones.items() if r["root"] == str(c.resolve())), None)
                )
                if key:
                    out[key] = r
            return out

        def caught_up() -> bool:
            got = rows()
            return all(got.get(k, {}).get("watermark") == h for k, h in heads.items())

        wait_for(caught_up, "both machines' hooks and the remote's hook to index")
        found = rows()
        assert found["laptop-a"]["installation"] == a.installation()
        assert found["laptop-b"]["installation"] == b.installation()
        assert a.installation() != b.installation()
        assert found["team"]["owner"] == "carol" and found["team"]["installation"] is None
        # Vectors are filled by the hooks' drains; wait until every chunk has one.
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) AS n FROM memory_primary WHERE embedding IS NULL"
                ).fetchone()["n"]
                == 0
                or conn.commit()
            ),
            "the backlog to drain",
        )
        conn.commit()
        # Each index equals a fresh build of what it follows.
        for key, machine, repo in (
            ("laptop-a", a, ca),
            ("laptop-b", b, cb),
            ("team", server, remote),
        ):
            fresh = fresh_build(machine, repo, heads[key], machine.dir)
            fresh_id = next(r["id"] for r in vault_rows(conn) if r["root"] == str(fresh.resolve()))
            assert snapshot_of(conn, found[key]["id"]) == snapshot_of(conn, fresh_id), key
        all_vaults = vault_rows(conn)
        # Each text was embedded once per model and trust domain (a member's entries serve
        # only the vaults the member may write: tests/test_team_safety.py).
        dupes = conn.execute(
            "SELECT count(*) - count(DISTINCT (model_id, content_hash, written_by)) AS d"
            " FROM embedding_cache"
        ).fetchone()["d"]
        assert dupes == 0

    # Row-level security, as bob with raw SQL: none of alice's private vault's rows anywhere.
    alice_private = found["laptop-a"]["id"]
    with psycopg.connect(team.url(team_db, "bob"), row_factory=dict_row) as bob:
        bob_sees = _every_table(bob)
    for table, rows_seen in bob_sees.items():
        for row in rows_seen:
            assert row.get("vault_id") != alice_private, table
            assert row.get("id") != alice_private or table != "vaults", table
            assert "zebracorn" not in json.dumps(row, default=str), table
    assert "team" in {r["name"] for r in bob_sees["vaults"]}
    assert {r["id"] for r in bob_sees["vaults"]} == {
        r["id"] for r in all_vaults if r["owner"] == "bob" or r["name"] == "team"
    }
    with psycopg.connect(team.url(team_db, "alice"), row_factory=dict_row) as alice:
        alice_hashes = {
            r["content_hash"]
            for r in alice.execute(
                "SELECT content_hash FROM memory_primary WHERE path = 'journal/alice.md'"
            )
        }
    assert alice_hashes and not alice_hashes & {
        r["content_hash"] for r in bob_sees["embedding_cache"]
    }
    # Bob cannot write into alice's vault, nor grant himself anything.
    with psycopg.connect(team.url(team_db, "bob")) as bob:
        cur = bob.execute(
            "UPDATE memory_notes SET title = 'x' WHERE vault_id = %s", (alice_private,)
        )
        assert cur.rowcount == 0
        bob.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute(
                "INSERT INTO vault_readers (vault_id, reader) SELECT %s, oid FROM pg_roles"
                " WHERE rolname = 'bob'",
                (alice_private,),
            )
    # What `vaults list --access` shows bob.
    listing = json.loads(b.run("vaults", "list", "--access", "--json").stdout)["access"]
    team_row = next(v for v in listing["vaults"] if v["name"] == "team")
    assert team_row["owner"] == "carol" and not team_row["mine"]
    # Alice's hook reads the shared vault once she registers it; MCP-less `context` too.
    a.run("vaults", "add", "--shared", "team")
    assert (
        "Tuesdays"
        in a.run("context", "--vault", "team", "who is on call and when do we hand over?").stdout
    )
    # MCP on alice's machine: `get` serves a shared note from the index, as committed.
    from vaultmem.agent.mcp_tools import Refused, VaultTools
    from vaultmem.agent.warm import WarmResources

    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "VAULTMEM_DATABASE_URL", "HOME"):
        monkeypatch.setenv(name, a.env[name])
    monkeypatch.delenv("VAULTMEM_INSTALLATION_ID")
    resources = WarmResources()
    try:
        tools = VaultTools("team", a.dir, resources)
        note = tools.get("ops/deploy.md")
        assert "kubectl rollout undo" in note and "Canary first" in note
        assert 'path="ops/deploy.md"' in note
        assert "team/oncall.md" in tools.recent(5)
        assert 'commits_behind="0"' in tools.status()
        with pytest.raises(Refused, match="not a note"):
            tools.get("journal/alice.md")  # alice's own private note is not in the shared vault
    finally:
        resources.close()
    # The second opinion's vectors (the warm service's and the ingester's fill, under
    # row-level security): a member fills those of her own vault, not the shared vault's (its
    # owner's ingester does); another member never reads the vector of her private note.
    from vaultmem.search import SecondOpinion
    from vaultmem.store import agnostic_vectors, vector_cache

    opinion = SecondOpinion.load()
    assert opinion is not None
    with db.connect_url(a.env["VAULTMEM_DATABASE_URL"]) as conn:
        shared = db.find_shared_vault(conn, "team")
        own = db.find_vault(conn, ca)
        assert shared is not None and own is not None
        assert agnostic_vectors.missing_agnostic(conn, shared.id, opinion.model_id) == []
        assert opinion.fill(conn, shared.id, go_on=lambda: True) == 0
        assert opinion.fill(conn, own.id, go_on=lambda: True) > 0
        assert agnostic_vectors.missing_agnostic(conn, own.id, opinion.model_id) == []
        private = conn.execute(
            "SELECT content_hash FROM memory_primary"
            " WHERE path = 'journal/alice.md' AND agnostic IS NOT NULL"
        ).fetchone()
        assert private is not None
    with db.connect_url(team.url(team_db, "carol")) as conn:  # the owner's ingester's fill
        assert opinion.fill(conn, shared.id, go_on=lambda: True) > 0
        left = conn.execute(
            "SELECT count(*) AS n FROM memory_primary WHERE vault_id = %s AND agnostic IS NULL",
            (shared.id,),
        ).fetchone()
        assert left["n"] == 0
    with db.connect_url(b.env["VAULTMEM_DATABASE_URL"]) as conn:
        assert (
            vector_cache.cached_embeddings(conn, opinion.model_id, [private["content_hash"]]) == {}
        )
        seen = conn.execute(
            "SELECT count(*) AS n FROM memory_primary WHERE content_hash = %s",
            (private["content_hash"],),
        ).fetchone()
        assert seen["n"] == 0
    # A revoke takes effect at the next query.
    server.run("revoke", "team", "bob")
    assert b.hook("how do I roll back the deployment?") == ""


def _every_table(conn: psycopg.Connection[Any]) -> dict[str, list[dict[str, Any]]]:
    tables = [
        r["tablename"]
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
        )
    ]
    out = {}
    for t in tables:
        out[t] = [dict(r) for r in conn.execute(f'SELECT * FROM "{t}"').fetchall()]
    conn.commit()
    assert {"vaults", "memory_primary", "memory_notes", "embedding_cache"} <= set(out)
    return out


def test_a_crashed_writers_lease_expires_and_leases_fence_writes(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    with admin_conn(team, team_db) as conn, admin_conn(team, team_db) as other:
        db.apply_schema(conn)
        vault = db.register_vault(conn, tmp_path)
        dead = vault_lease.Holder("crashed:1:x", "crashed", 1)
        assert vault_lease.try_acquire(conn, vault.id, dead, 1.0) is not None
        me = vault_lease.holder()
        assert vault_lease.try_acquire(other, vault.id, me, 30) is None  # held
        state = wait_for(
            lambda: vault_lease.try_acquire(other, vault.id, me, 30), "the lease to expire"
        )
        assert state.holder == me.token
        # The crashed holder wakes up: its next write finds the lease gone, writes nothing.
        with pytest.raises(vault_lease.LeaseLost):
            with conn.transaction():
                vault_lease.renew(conn, vault.id, dead, 30)
                conn.execute(
                    "UPDATE index_state SET watermark = 'bad' WHERE vault_id = %s", (vault.id,)
                )
        assert (
            conn.execute(
                "SELECT watermark FROM index_state WHERE vault_id = %s", (vault.id,)
            ).fetchone()["watermark"]
            is None
        )
        conn.commit()


def test_an_ingest_waits_for_another_machines_lease(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    remote, seed = bare_remote(tmp_path, {"a.md": "# A\n\nalpha\n"})
    with admin_conn(team, team_db) as conn:
        db.apply_schema(conn)
    server = Machine(tmp_path, "server", team.url(team_db, "carol"))
    server.env["VAULTMEM_WRITER_LEASE"] = "30"
    server.run("init", "--vault", str(remote), "--shared", "team", "--no-hooks")
    with psycopg.connect(team.url(team_db, "carol"), row_factory=dict_row) as carol:
        vid = carol.execute("SELECT id FROM vaults WHERE shared AND name = 'team'").fetchone()["id"]
        # Another machine's ingester took the lease and died (it expires in 3 s).
        carol.execute(
            "UPDATE writer_leases SET holder = 'other:9:dead', hostname = 'other',"
            " expires_at = now() + interval '3 seconds' WHERE vault_id = %s",
            (vid,),
        )
        if (
            carol.execute("SELECT 1 FROM writer_leases WHERE vault_id = %s", (vid,)).fetchone()
            is None
        ):
            carol.execute(
                "INSERT INTO writer_leases (vault_id, holder, hostname, expires_at)"
                " VALUES (%s, 'other:9:dead', 'other', now() + interval '3 seconds')",
                (vid,),
            )
        expires = carol.execute(
            "SELECT expires_at FROM writer_leases WHERE vault_id = %s", (vid,)
        ).fetchone()["expires_at"]
        carol.commit()
        (seed / "b.md").write_text("# B\n\nbeta\n")
        git(seed, "add", "-A")
        git(seed, "commit", "-q", "-m", "b")
        git(seed, "push", "-q", "origin", "main")
        server.run("ingest", "--vault", str(remote), "--wait")
        row = carol.execute(
            "SELECT s.watermark, s.watermark_at, (SELECT max(indexed_at) FROM"
            " memory_notes n WHERE n.vault_id = s.vault_id) AS last FROM"
            " index_state s WHERE s.vault_id = %s",
            (vid,),
        ).fetchone()
        assert row["watermark"] == git(remote, "rev-parse", "main").strip()
        assert row["last"] >= expires and row["watermark_at"] >= expires  # not one write before
        assert (
            carol.execute(
                "SELECT count(*) AS n FROM writer_leases WHERE vault_id = %s", (vid,)
            ).fetchone()["n"]
            == 0
        )  # released


# --- workers -------------------------------------------------------------------------------


def _backlog(conn: psycopg.Connection[Any], vault_id: int, chunks: int, model: str) -> list[str]:
    """`chunks` distinct chunks (10 per note) with no vector, for a vault whose model is
    `model`; returns each chunk's embedding input."""
    notes = chunks // 10
    conn.execute(
        "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title)"
        " SELECT %s, 'n' || i || '.md', md5(i::text), 'c', 'note ' || i"
        " FROM generate_series(1, %s) i",
        (vault_id, notes),
    )
    rows = [
        (f"n{i}.md", j, f"H{i}", f"chunk {i}-{j} text about item {i * 10 + j}")
        for i in range(1, notes + 1)
        for j in range(10)
    ]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
            " content_hash, lexemes) VALUES (%s, %s, %s, %s, %s, %s, to_tsvector('simple', %s))",
            [
                (vault_id, p, j, h, t, sha256_hex(markdown.embedding_input(h, t)), t)
                for p, j, h, t in rows
            ],
        )
    conn.execute("UPDATE index_state SET model_id = %s WHERE vault_id = %s", (model, vault_id))
    conn.commit()
    return [markdown.embedding_input(h, t) for _, _, h, t in rows]


def _worker(
    team: TeamServer, db_name: str, base_url: str, tmp: Path, *extra: str
) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "XDG_CONFIG_HOME": str(tmp / "config"),
        "XDG_DATA_HOME": str(tmp / "data"),
        "VAULTMEM_DATABASE_URL": team.url(db_name, "alice"),
        "VAULTMEM_EMBEDDING_PROVIDER": "openai",
        "VAULTMEM_EMBEDDING_BASE_URL": base_url,
        "OPENAI_API_KEY": "test-key",
        "VAULTMEM_EMBEDDING_MAX_RETRIES": "0",
        "PYTHONPATH": str(REPO_SRC),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "vaultmem", "worker", "--until-empty", "--json", *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_three_workers_embed_every_chunk_once_and_lose_none_when_one_is_killed(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    model, dim = "openai:team-test-model", 8
    with db.connect_url(team.url(team_db, "alice")) as conn:
        with admin_conn(team, team_db) as owner:
            db.apply_schema(owner)
        vault = db.register_vault(conn, tmp_path)
        inputs = _backlog(conn, vault.id, 10_000, model)
    # Worker 1's server hangs on its third request: the test SIGKILLs worker 1 mid-batch.
    servers = [
        FailingEmbeddingServer([Reply(), Reply(), Reply(delay=120)], dimension=dim),
        FailingEmbeddingServer(dimension=dim),
        FailingEmbeddingServer(dimension=dim),
    ]
    procs: list[subprocess.Popen[str]] = []
    try:
        for s in servers:
            s.__enter__()
        for i, s in enumerate(servers):
            (tmp_path / f"w{i}").mkdir()
            procs.append(_worker(team, team_db, s.base_url, tmp_path / f"w{i}", "--batch", "64"))
        wait_for(lambda: len(servers[0].requests) >= 3, "worker 1 to be mid-batch")
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        outputs = []
        for p in procs[1:]:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
            outputs.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for s in servers:
            s.__exit__(None, None, None)

    calls: dict[str, int] = {}
    for s in servers:
        for r in s.requests:
            for text in r.body["input"]:
                calls[text] = calls.get(text, 0) + 1
    in_flight = set(servers[0].requests[2].body["input"])  # the batch the kill interrupted
    assert len(in_flight) == 64
    assert set(calls) == set(inputs)  # every chunk was sent
    assert all(calls[t] == (2 if t in in_flight else 1) for t in inputs)
    # ...and every chunk has exactly the vector of its text (none lost, none mixed up).
    with admin_conn(team, team_db) as conn:
        rows = conn.execute(
            "SELECT heading, content, embedding, model_id FROM memory_primary WHERE vault_id = %s",
            (vault.id,),
        ).fetchall()
    assert len(rows) == 10_000
    assert all(r["model_id"] == model for r in rows)
    for r in rows[::97]:
        want = fake_vector(markdown.embedding_input(r["heading"], r["content"]), dim)
        got = r["embedding"]
        got = got.to_numpy() if hasattr(got, "to_numpy") else np.asarray(got, dtype=np.float32)
        assert np.allclose(got, want, atol=1e-6)
    # `vaultmem status` shows the workers and their rates.
    env = {
        **os.environ,
        "VAULTMEM_DATABASE_URL": team.url(team_db, "alice"),
        "PYTHONPATH": str(REPO_SRC),
    }
    status = subprocess.run(
        [sys.executable, "-m", "vaultmem", "status"], env=env, capture_output=True, text=True
    )
    assert status.returncode == 0, status.stderr
    worker_lines = [ln for ln in status.stdout.splitlines() if ln.startswith("worker ")]
    assert len(worker_lines) == 3 and sum("stopped" in ln for ln in worker_lines) == 2
    assert all("texts/s" in ln for ln in worker_lines if "stopped" in ln)
    # The survivors made every call but worker 1's two committed batches.
    assert sum(o["embedded"] for o in outputs) == 10_000 - 2 * 64
    print(f"\nworkers: {[o['filled'] for o in outputs]} chunks each after the kill")


def test_a_stale_source_never_takes_the_shared_index_back(
    team: TeamServer, team_db: str, tmp_path: Path
) -> None:
    remote, seed = bare_remote(tmp_path, {"a.md": "# A\n\nalpha\n"})
    with admin_conn(team, team_db) as conn:
        db.apply_schema(conn)
    ci = Machine(tmp_path, "ci-runner", team.url(team_db, "carol"))
    stale = ci.dir / "clone"
    ci.git(ci.dir, "clone", "-q", str(remote), str(stale))
    # The server follows the remote; the CI runner's clone follows its remote-tracking branch.
    server = Machine(tmp_path, "server", team.url(team_db, "carol"))
    server.run("init", "--vault", str(remote), "--shared", "team", "--no-hooks")
    (seed / "b.md").write_text("# B\n\nbeta\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "b")
    git(seed, "push", "-q", "origin", "main")
    server.run("ingest", "--vault", str(remote), "--wait")
    tip = git(remote, "rev-parse", "main").strip()
    ci.run(
        "init",
        "--vault",
        str(stale),
        "--shared",
        "team",
        "--ref",
        "refs/remotes/origin/main",
        "--no-hooks",
    )
    with admin_conn(team, team_db) as conn:
        shared = [r for r in vault_rows(conn) if r["shared"]]
        assert len(shared) == 1 and shared[0]["watermark"] == tip  # not the clone's older tip
        ci.git(stale, "fetch", "-q")
        ci.run("ingest", "--vault", str(stale), "--wait")
        assert [r["watermark"] for r in vault_rows(conn) if r["shared"]] == [tip]
        notes = conn.execute(
            "SELECT path FROM memory_notes WHERE vault_id = %s ORDER BY 1", (shared[0]["id"],)
        ).fetchall()
    assert [r["path"] for r in notes] == ["a.md", "b.md"]
