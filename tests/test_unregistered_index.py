"""A repository nobody registered is never indexed, and an index older versions left in one can
be dropped (issue 43): commands that write state refuse it with one sentence naming
`vaultmem init`; `vaults remove --purge PATH` deletes such an index if the role owns it, and
never another role's. Through the CLI, against the real PostgreSQL."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from conftest import Vault
from support.sample_notes import NOTES, add_note

from vaultmem import vaults
from vaultmem.cli import cli
from vaultmem.store import db


@pytest.fixture
def code(tmp_path: Path) -> Vault:
    """A code project: a git repository with a NOTES.md, never registered."""
    (tmp_path / "code").mkdir()
    v = Vault(tmp_path / "code")
    v.write("NOTES.md", "# Notes\n\nbuild with make\n")
    v.commit()
    return v


@pytest.fixture
def registered(conn: psycopg.Connection, tmp_path: Path) -> Vault:
    """The user's registered vault, with an index of its own."""
    (tmp_path / "notes").mkdir()
    v = Vault(tmp_path / "notes")
    v.write("a.md", "# A\n")
    v.commit()
    _leave_index(conn, v.root)
    vaults.register(v.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    return v


def _leave_index(conn: psycopg.Connection, root: Path) -> int:
    """An index of `root` as older versions left it: a vault row and its notes' rows."""
    v = db.register_vault(conn, root)
    for path, note in list(NOTES.items())[:2]:
        add_note(conn, v.id, path, embedder=None, **note)
    conn.commit()
    return v.id


def _notes_of(conn: psycopg.Connection, vault_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) AS n FROM memory_notes WHERE vault_id = %s", (vault_id,)
    ).fetchone()
    conn.commit()
    return int(row["n"])


@pytest.mark.parametrize(
    "command",
    [
        ["ingest"],
        ["rebuild"],
        ["audit", "allow", "NOTES.md", "--yes"],
        ["audit", "revoke", "NOTES.md"],
    ],
)
def test_commands_that_write_state_refuse_an_unregistered_repository(
    conn: psycopg.Connection,
    code: Vault,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    monkeypatch.chdir(code.root)
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert "not a registered vault" in result.output and "vaultmem init" in result.output
    assert db.find_vault(conn, code.root) is None  # no vault row
    assert not (code.root / ".git" / "vaultmem").exists()  # no state folder


def test_an_index_left_in_an_unregistered_repository_is_listed_and_dropped(
    conn: psycopg.Connection, code: Vault, registered: Vault
) -> None:
    left = _leave_index(conn, code.root)
    mine = db.find_vault(conn, registered.root)
    assert mine is not None
    status = CliRunner().invoke(cli, ["status"])
    assert status.exit_code == 0, status.output
    assert f"`vaultmem vaults remove --purge {code.root}` deletes it" in status.output
    rows = json.loads(CliRunner().invoke(cli, ["status", "--json"]).output)["vaults"]
    assert {r["root"]: r["registered"] for r in rows} == {
        str(code.root): False,
        str(registered.root): True,
    }
    # Without --purge the registry is all `remove` acts on: nothing happens.
    result = CliRunner().invoke(cli, ["vaults", "remove", str(code.root)])
    assert result.exit_code == 2 and _notes_of(conn, left) == 2
    result = CliRunner().invoke(cli, ["vaults", "remove", "--purge", str(code.root), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "name": None,
        "path": str(code.root),
        "registered": False,
        "index_deleted": True,
        "notes": 2,
    }
    assert db.find_vault(conn, code.root) is None and _notes_of(conn, left) == 0
    assert _notes_of(conn, mine.id) == 2  # the registered vault's index is untouched
    assert vaults.load().get("notes") is not None
    # Run again (or on a path with no index): one sentence, exit 2, nothing else changes.
    again = CliRunner().invoke(cli, ["vaults", "remove", "--purge", str(code.root)])
    assert again.exit_code == 2 and len(again.output.strip().splitlines()) == 1
    assert "neither a registered vault nor a repository with an index of yours" in again.output


def test_a_gone_repositorys_index_is_dropped_by_its_path(
    conn: psycopg.Connection, code: Vault, tmp_path: Path
) -> None:
    left = _leave_index(conn, code.root)
    moved = tmp_path / "elsewhere"
    code.root.rename(moved)  # the repository is gone from where it was indexed
    result = CliRunner().invoke(cli, ["vaults", "remove", "--purge", str(code.root)])
    assert result.exit_code == 0, result.output
    assert "deleted the index of" in result.output and "(2 notes)" in result.output
    assert _notes_of(conn, left) == 0


@pytest.fixture
def other_role(pg_server_url: str, conn: psycopg.Connection) -> Iterator[str]:
    """Another member's role (roles are the server's, so it is dropped afterwards)."""
    role = f"vm_other_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
    try:
        yield role
    finally:
        conn.rollback()
        conn.execute(f'DROP OWNED BY "{role}"')
        conn.commit()
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_another_roles_index_is_never_dropped(
    conn: psycopg.Connection, code: Vault, other_role: str
) -> None:
    # The test connects as the server's superuser, which sees (and may write) every row: the
    # purge goes by the index's owner, not by what the role can see.
    theirs = _leave_index(conn, code.root)
    conn.execute(
        "UPDATE vaults SET owner = %s::regrole::oid WHERE id = %s", (f'"{other_role}"', theirs)
    )
    conn.commit()
    result = CliRunner().invoke(cli, ["vaults", "remove", "--purge", str(code.root), "--json"])
    assert result.exit_code == 2, result.output
    assert "index of yours" in result.output
    assert _notes_of(conn, theirs) == 2 and db.find_vault(conn, code.root) is not None
