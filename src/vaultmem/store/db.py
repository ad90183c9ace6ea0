"""Database access: connect (bundled or external), apply schema.sql and migrations, register vaults.

The schema lives in one file, `schema.sql` at the repository root (packaged alongside this module),
and is idempotent. Upgrades from older layouts are plain functions in `migrations.py`, applied in
order under an advisory lock so concurrent `init`s cannot race.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from ..config import Settings
from ..dburl import redact_url
from ..errors import DatabaseUnavailable, SchemaError
from . import migrations, server
from .migrations import schema_sql

SCHEMA_VERSION = migrations.CURRENT_VERSION
_LOCK_KEY = 0x7661756C  # "vaul": serialises schema changes across processes

Conn = psycopg.Connection[DictRow]  # what connect() returns: rows are dicts


def database_url(settings: Settings, *, start: bool = False) -> str:
    """The URL to use: the configured one, else the bundled server (started only if `start`:
    commands that only read never start it, they say it is stopped)."""
    if settings.database_url:
        return settings.database_url
    url = server.running_url(settings.home)
    if url is None:
        if not start:
            raise DatabaseUnavailable(
                "the bundled database is not running: start it with `vaultmem db start`"
            )
        url = server.start(settings.home)
    return url


def connect(settings: Settings, *, start: bool = False, timeout: int = 5) -> Conn:
    """Open a connection with pgvector types registered. Does not change the schema. A stopped
    bundled server is started only if `start` (init, db start, writers: see the CLI)."""
    url = database_url(settings, start=start)
    return connect_url(url, timeout=timeout)


def connect_url(url: str, *, timeout: int = 5) -> Conn:
    try:
        conn = psycopg.connect(url, connect_timeout=timeout, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"cannot reach the database at {redact_url(url)}: check that it is running "
            "(`vaultmem db start` for the bundled one) or fix VAULTMEM_DATABASE_URL"
        ) from exc
    if _has_vector(conn):
        _register_vector(conn)
    return conn


def _has_vector(conn: Conn) -> bool:
    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    conn.commit()
    return row is not None


def _register_vector(conn: Conn) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)


def schema_version(conn: Conn) -> int:
    """Highest applied version; 0 for an empty database."""
    exists = conn.execute("SELECT to_regclass('vaultmem_schema') IS NOT NULL AS e").fetchone()
    if not exists or not exists["e"]:
        return 0
    row = conn.execute("SELECT max(version) AS v FROM vaultmem_schema").fetchone()
    return int(row["v"] or 0) if row else 0


def apply_schema(conn: Conn) -> list[int]:
    """Bring the schema to SCHEMA_VERSION. Returns the versions applied (empty if current)."""
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            current = schema_version(conn)
            if current > SCHEMA_VERSION:
                raise SchemaError(
                    f"the database schema is version {current}, newer than this vaultmem "
                    f"understands ({SCHEMA_VERSION}): upgrade vaultmem"
                )
            applied: list[int] = []
            for version, step in migrations.MIGRATIONS:
                if version > current:
                    step(conn)
            conn.execute(schema_sql())
            for version, _ in migrations.MIGRATIONS:
                if version > current:
                    conn.execute(
                        "INSERT INTO vaultmem_schema (version) VALUES (%s) ON CONFLICT DO NOTHING",
                        (version,),
                    )
                    applied.append(version)
    except psycopg.errors.FeatureNotSupported as exc:
        raise SchemaError(f"the database cannot install pgvector: {exc}") from exc
    except psycopg.errors.UndefinedFile as exc:
        raise SchemaError(
            "pgvector is not installed on this PostgreSQL server: use the bundled server, the "
            "pgvector/pgvector Docker image, or install pgvector"
        ) from exc
    _register_vector(conn)
    return applied


def require_schema(conn: Conn) -> None:
    version = schema_version(conn)
    if version == 0:
        raise SchemaError("the database has no vaultmem schema yet: run `vaultmem init`")
    if version != SCHEMA_VERSION:
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"the database schema is version {version}, newer than this vaultmem "
                f"understands ({SCHEMA_VERSION}): upgrade vaultmem"
            )
        raise SchemaError(
            f"the database schema is version {version}; run `vaultmem init` to upgrade it"
        )


@dataclass(frozen=True)
class Vault:
    id: int
    root: Path
    name: str


def register_vault(conn: Conn, root: Path) -> Vault:
    root = root.resolve()
    with conn.transaction():
        row = conn.execute(
            """
            INSERT INTO vaults (root, name) VALUES (%s, %s)
            ON CONFLICT (root) DO UPDATE SET root = EXCLUDED.root
            RETURNING id, root, name
            """,
            (str(root), root.name),
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO index_state (vault_id) VALUES (%s) ON CONFLICT DO NOTHING", (row["id"],)
        )
    return Vault(id=row["id"], root=Path(row["root"]), name=row["name"])


def find_vault(conn: Conn, root: Path) -> Vault | None:
    row = conn.execute(
        "SELECT id, root, name FROM vaults WHERE root = %s", (str(root.resolve()),)
    ).fetchone()
    conn.commit()
    return Vault(id=row["id"], root=Path(row["root"]), name=row["name"]) if row else None


def delete_vault(conn: Conn, root: Path) -> None:
    """Delete the vault at `root` and, by cascade, every row of its index."""
    conn.execute("DELETE FROM vaults WHERE root = %s", (str(root.resolve()),))


def server_info(conn: Conn) -> dict[str, Any]:
    pg = conn.execute("SHOW server_version").fetchone()
    vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    conn.commit()
    return {
        "postgres_version": pg["server_version"] if pg else None,
        "pgvector_version": vec["extversion"] if vec else None,
    }


def vault_stats(conn: Conn) -> list[dict[str, Any]]:
    rows = conn.execute(
        """
        SELECT v.id, v.name, v.root, s.watermark, s.model_id, s.last_run,
               (SELECT count(*) FROM memory_notes n WHERE n.vault_id = v.id) AS notes,
               (SELECT count(*) FROM memory_primary p WHERE p.vault_id = v.id) AS chunks,
               (SELECT count(*) FROM memory_primary p
                 WHERE p.vault_id = v.id
                   AND (p.embedding IS NULL OR p.model_id IS DISTINCT FROM s.model_id)) AS backlog,
               (SELECT count(*) FROM memory_secure_audit a WHERE a.vault_id = v.id) AS quarantined,
               (SELECT count(*) FROM memory_skipped k WHERE k.vault_id = v.id) AS skipped
        FROM vaults v LEFT JOIN index_state s ON s.vault_id = v.id
        ORDER BY v.id
        """
    ).fetchall()
    conn.commit()
    return [dict(r) for r in rows]


def hnsw_index_name(model_id: str) -> str:
    return "memory_primary_hnsw_" + hashlib.sha1(model_id.encode()).hexdigest()[:12]


def ensure_vector_index(conn: Conn, model_id: str, dimension: int) -> None:
    """One HNSW cosine index per model, over rows of that model only (dimension fixed by a cast)."""
    name = hnsw_index_name(model_id)
    literal = model_id.replace("'", "''")
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS {name} ON memory_primary "
        f"USING hnsw ((embedding::vector({int(dimension)})) vector_cosine_ops) "
        f"WHERE model_id = '{literal}'"
    )
