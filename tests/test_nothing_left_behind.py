"""Nothing left behind: a deleted or quarantined note's words leave memory_lexicon, and cached
vectors no chunk refers to are pruned (at quarantine, by `rebuild` and by `vaultmem gc`)."""

from __future__ import annotations

import random

import psycopg
from click.testing import CliRunner
from support.fake_secrets import fake_password
from support.indexing import index

from vaultmem.cli import cli
from vaultmem.config import load_settings
from vaultmem.index import ingest
from vaultmem.store import db, migrations

WORD = "zebediahxq"  # a word no other note holds


def lexemes(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("SELECT lexeme, df FROM memory_lexicon").fetchall()
    conn.commit()
    return {r["lexeme"]: r["df"] for r in rows}


def cache_rows(conn: psycopg.Connection) -> int:
    n = conn.execute("SELECT count(*) AS n FROM embedding_cache").fetchone()["n"]
    conn.commit()
    return int(n)


def test_a_deleted_note_leaves_no_lexeme(conn, vault) -> None:
    vault.write("keep.md", "# Keep\n\nThe backup runs nightly.\n")
    vault.write("gone.md", f"# Gone\n\nThe word {WORD} is only here.\n")
    vault.commit()
    index(vault.root)
    assert lexemes(conn)[WORD] == 1
    vault.delete("gone.md")
    vault.commit("delete")
    index(vault.root)
    words = lexemes(conn)
    assert WORD not in words
    assert min(words.values()) > 0


def test_a_secret_that_once_leaked_leaves_nothing_after_quarantine_and_rebuild(conn, vault) -> None:
    # An older detector missed it: the note was indexed and embedded. Simulate that by
    # indexing it as allowed, then revoking, then deleting it and rebuilding.
    pw = fake_password(random.Random(11))
    vault.write("keep.md", "# Keep\n\nThe backup runs nightly.\n")
    vault.write("leak.md", f"# Router\n\nrouter password: {pw} {WORD}\n")
    vault.commit()
    index(vault.root)
    assert WORD not in lexemes(conn)  # quarantined from the start
    from vaultmem.index import audit

    v = db.find_vault(conn, vault.root)
    assert v is not None
    audit.allow(conn, v, "leak.md", vault.root, settings=load_settings(vault.root), yes=True)
    assert WORD in lexemes(conn) and cache_rows(conn) == 2
    audit.revoke(conn, v, "leak.md", vault.root, settings=load_settings(vault.root))
    assert WORD not in lexemes(conn)
    assert not any(pw.lower() in w for w in lexemes(conn))
    assert cache_rows(conn) == 1  # the quarantined note's vector went with it
    vault.delete("leak.md")
    vault.commit("rm")
    ingest.rebuild(load_settings(vault.root), vault.root)
    assert WORD not in lexemes(conn) and cache_rows(conn) == 1


def test_rebuild_and_gc_prune_orphaned_vectors(conn, vault) -> None:
    vault.write("a.md", "# A\n\nFirst version of the text.\n")
    vault.commit()
    index(vault.root)
    vault.write("a.md", "# A\n\nSecond version of the text.\n")
    vault.commit("edit")
    index(vault.root)
    assert cache_rows(conn) == 2  # the first version's vector stays (a revert reuses it)
    conn.execute(
        "INSERT INTO memory_lexicon (vault_id, lexeme, df) SELECT id, 'stale', 0 FROM vaults"
    )
    conn.commit()
    result = CliRunner().invoke(cli, ["gc", "--json"])
    assert result.exit_code == 0, result.output
    assert '"embedding_cache": 1' in result.output and '"lexicon": 1' in result.output
    assert cache_rows(conn) == 1 and "stale" not in lexemes(conn)
    vault.write("a.md", "# A\n\nThird version.\n")
    vault.commit("again")
    index(vault.root)
    ingest.rebuild(load_settings(vault.root), vault.root)
    assert cache_rows(conn) == 1


def test_migration_removes_empty_lexemes_left_by_older_versions(conn, vault) -> None:
    vault.write("a.md", "# A\n\nSome words.\n")
    vault.commit()
    index(vault.root)
    conn.execute(
        "INSERT INTO memory_lexicon (vault_id, lexeme, df) SELECT id, 'old', 0 FROM vaults"
    )
    conn.execute("DELETE FROM vaultmem_schema WHERE version >= 6")  # as left by version 5
    conn.commit()
    assert 6 in db.apply_schema(conn)
    assert "old" not in lexemes(conn)
    assert migrations.CURRENT_VERSION >= 6
