"""Schema upgrades as plain functions, applied in order before schema.sql.

Version 1 is the reference design vaultmem grew from: `memory_primary` keyed by a path `id` with
one 1,536-dimension vector per file, and `memory_secure_audit(id, source, risk, updated_at)`.
A database in that shape (or any later version) is upgraded in place without losing rows: tables
whose layout changed are kept under a `legacy_` name, never dropped. The index itself is derived
state and is rebuilt from git by the next ingest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg


def schema_path() -> Path:
    """schema.sql: the repository's copy in a source checkout, else the packaged copy."""
    here = Path(__file__).resolve().parent
    repo_copy = here.parents[2] / "schema.sql"
    if repo_copy.is_file():
        return repo_copy
    return here / "schema.sql"


def schema_sql() -> str:
    return schema_path().read_text(encoding="utf-8")


def _columns(conn: psycopg.Connection[Any], table: str) -> set[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s",
        (table,),
    ).fetchall()
    return {r["column_name"] if isinstance(r, dict) else r[0] for r in rows}


def m002_vaults_and_chunks(conn: psycopg.Connection[Any]) -> None:
    """Move reference-design tables aside so the multi-vault, per-chunk layout can be created."""
    for table in ("memory_primary", "memory_secure_audit"):
        cols = _columns(conn, table)
        if cols and "vault_id" not in cols:
            conn.execute(f"ALTER TABLE {table} RENAME TO legacy_{table}")
            # Index names are global; free them for schema.sql.
            for row in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (f"legacy_{table}",)
            ).fetchall():
                name = row["indexname"] if isinstance(row, dict) else row[0]
                if not name.startswith("legacy_"):
                    conn.execute(f'ALTER INDEX "{name}" RENAME TO "legacy_{name}"')


def m003_bm25_statistics(conn: psycopg.Connection[Any]) -> None:
    """BM25 needs chunk lengths and per-vault statistics: create them (schema.sql, idempotent,
    adds the n_tokens column and the triggers) and count the chunks already indexed."""
    if "vault_id" not in _columns(conn, "memory_primary"):
        return  # empty database, or a legacy one moved aside by m002: nothing to count yet
    conn.execute(schema_sql())
    rebuild_lexical_stats(conn)


def m004_chunker_signature(conn: psycopg.Connection[Any]) -> None:
    """index_state.chunker records how a vault was chunked (schema.sql adds the column). It
    starts NULL, "unknown", so the next run re-chunks every note with the current chunker;
    vectors of unchanged chunks come back from the embedding cache."""


def m005_skip_codes(conn: psycopg.Connection[Any]) -> None:
    """memory_skipped.code holds triage's SkipCode (schema.sql adds the column). Rows from
    before have none until their file next changes or `vaultmem rebuild` runs."""


def m006_no_empty_lexemes(conn: psycopg.Connection[Any]) -> None:
    """memory_lexicon no longer keeps lexemes at df = 0 (schema.sql's triggers now delete them):
    remove those an older version left, some of which may be words of deleted secrets."""
    if _columns(conn, "memory_lexicon"):
        conn.execute("DELETE FROM memory_lexicon WHERE df <= 0")


def m008_machines_and_roles(conn: psycopg.Connection[Any]) -> None:
    """Many machines, many people (schema.sql's version-8 section, idempotent): a vault row
    belongs to an installation and its path or is a named shared vault, `UNIQUE (root)` goes,
    writer leases, embedding workers, roles and row-level security. Rows from before belong to
    the role that runs the upgrade and to no installation yet: the first installation that opens
    a path claims its row (`db.register_vault`)."""


def m009_trusted_cache(conn: psycopg.Connection[Any]) -> None:
    """The shared vector cache records each entry's writer and is read only across a trust
    domain (schema.sql's `embedding_cache` section). An entry from before has no known writer:
    any member holding a text could have put any vector there, so every one is deleted (a
    chunk keeps the vector on its row; a text that needs one again is embedded once per trust
    domain)."""
    if _columns(conn, "embedding_cache") and "written_by" not in _columns(conn, "embedding_cache"):
        conn.execute("DELETE FROM embedding_cache")


def rebuild_lexical_stats(conn: psycopg.Connection[Any]) -> None:
    """Recount memory_lexical_stats and memory_lexicon from memory_primary (all vaults)."""
    conn.execute("DELETE FROM memory_lexicon")
    conn.execute("DELETE FROM memory_lexical_stats")
    conn.execute(
        "INSERT INTO memory_lexical_stats (vault_id, chunks, tokens)"
        " SELECT vault_id, count(*), sum(n_tokens) FROM memory_primary GROUP BY 1"
    )
    conn.execute(
        "INSERT INTO memory_lexicon (vault_id, lexeme, df)"
        " SELECT p.vault_id, u.lexeme, count(*) FROM memory_primary p"
        " CROSS JOIN LATERAL unnest(tsvector_to_array(p.lexemes)) AS u(lexeme) GROUP BY 1, 2"
    )


Migration = Callable[[psycopg.Connection[Any]], None]

# (version, step): step upgrades a database at version-1 to version. Version 1 (the reference
# design) has no step: it is what an unversioned database with those tables is.
MIGRATIONS: list[tuple[int, Migration]] = [
    (1, lambda conn: None),
    (2, m002_vaults_and_chunks),
    (3, m003_bm25_statistics),
    (4, m004_chunker_signature),
    (5, m005_skip_codes),
    (6, m006_no_empty_lexemes),
    (8, m008_machines_and_roles),
    (9, m009_trusted_cache),
]

CURRENT_VERSION = MIGRATIONS[-1][0]
