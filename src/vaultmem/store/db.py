"""Database access: connect (bundled or external), apply schema.sql and migrations, register vaults.

The schema lives in one file, `schema.sql` at the repository root (packaged alongside this module),
and is idempotent. Upgrades from older layouts are plain functions in `migrations.py`, applied in
order under an advisory lock so concurrent `init`s cannot race.

Design decision: applying the schema must be safe while other vaults of the same database
ingest. A database already at this version, with this very schema.sql (its fingerprint is
recorded on the `vaultmem_schema` table), is left alone: no DDL, no lock. Only an upgrade runs
DDL, and it first waits for the writers in flight (`schema_lock.hold_schema_for_upgrade`; every
write takes the same key shared), then takes each table lock with a short `lock_timeout`, so
a reader holding a table makes it retry rather than deadlock.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row

from ..config import Settings
from ..dburl import redact_url
from ..errors import ConfigError, DatabaseUnavailable, SchemaError
from . import migrations, schema_lock, server
from .migrations import schema_sql

SCHEMA_VERSION = migrations.CURRENT_VERSION
# An upgrade waits this long for one table lock (below PostgreSQL's 1 s deadlock_timeout, so it
# gives up before a reader it waits for would be cancelled), then retries, for UPGRADE_PATIENCE.
UPGRADE_LOCK_TIMEOUT_MS = 250
UPGRADE_PATIENCE_SECONDS = 120.0

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


def connect(
    settings: Settings, *, start: bool = False, timeout: int = 5, purpose: str = "vaultmem"
) -> Conn:
    """Open a connection with pgvector types registered. Does not change the schema. A stopped
    bundled server is started only if `start` (init, db start, writers: see the CLI)."""
    url = database_url(settings, start=start)
    return connect_url(url, timeout=timeout, purpose=purpose)


def connect_url(url: str, *, timeout: int = 5, purpose: str = "vaultmem") -> Conn:
    """A connection that works through a pooler in transaction mode (PgBouncer, Supabase's,
    Neon's): psycopg never prepares statements on the server (`prepare_threshold=None`: a
    prepared statement lives on one server connection, which the pooler hands to another
    client after each transaction), and nothing here sets session state. `purpose` is the
    `application_name` the server and the pooler show (vaultmem-hook, vaultmem-worker...)."""
    try:
        conn = psycopg.connect(
            url,
            connect_timeout=timeout,
            row_factory=dict_row,
            prepare_threshold=None,
            application_name=purpose,
        )
    except psycopg.ProgrammingError as exc:
        # libpq could not parse the URL; its message quotes the offending part, which may be
        # the password itself ("unexpected spaces found in ..."): say why in our words only.
        raise ConfigError(
            f"the database URL {redact_url(url)} cannot be used: {unparsable_because(exc)}; "
            "fix VAULTMEM_DATABASE_URL (or the vault's registration: `vaultmem vaults list`)"
        ) from None
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(connection_failure(url, exc, timeout)) from exc
    if _has_vector(conn):
        _register_vector(conn)
    return conn


def connection_failure(url: str, exc: Exception, timeout: float) -> str:
    """One sentence for a connection that failed, told apart by what libpq (or the pooler)
    said, with the next step: authentication, TLS, no TLS, refused, no answer, no such
    database, the pooler. Never quotes the password."""
    where = redact_url(url)
    text = str(exc).lower()
    if any(
        k in text
        for k in ("password authentication failed", "no password supplied", "sasl", "scram")
    ) or ("role" in text and "does not exist" in text):
        return (
            f"authentication failed at {where}: the server refused this role's password; fix "
            "the user or password (VAULTMEM_DATABASE_URL, PGPASSWORD or ~/.pgpass) or ask the "
            "database's administrator to reset it"
        )
    if "does not support ssl" in text or "ssl is not enabled" in text or "ssl off" in text:
        return (
            f"the server at {where} does not offer TLS: put a pooler that terminates TLS in "
            'front of it (docs/team.md, "Team setup from an empty server"), or on a trusted '
            "network set sslmode=disable"
        )
    if any(k in text for k in ("certificate", "ssl", "tls", "root cert")):
        return (
            f"TLS to {where} failed ({_first_line(exc)}): check sslrootcert (the CA that signed "
            "the server's certificate), the host name the certificate names, and sslmode"
        )
    if "connection refused" in text:
        return (
            f"nothing is listening at {where}: start the database or its pooler (`vaultmem db "
            "start` for the bundled one), or fix the host and port in VAULTMEM_DATABASE_URL"
        )
    if "timeout expired" in text or "timed out" in text:
        return (
            f"the database at {where} did not answer within {timeout:.0f} s: check the host, "
            "the network and any firewall between here and it"
        )
    if "database" in text and "does not exist" in text:
        return (
            f"no such database at {where}: create it (`CREATE DATABASE ...` as an "
            "administrator) or fix the database name in VAULTMEM_DATABASE_URL"
        )
    if any(k in text for k in ("pgbouncer", "no more connections", "server login", "pooler")):
        return (
            f"the pooler at {where} could not serve this connection ({_first_line(exc)}): check "
            "the pooler's log and that its database server is running"
        )
    return (
        f"cannot reach the database at {where}: check that it is running "
        "(`vaultmem db start` for the bundled one) or fix VAULTMEM_DATABASE_URL"
    )


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    line = lines[-1] if lines else type(exc).__name__
    return line.removeprefix("FATAL:").strip()[:160]


def unparsable_because(exc: Exception) -> str:
    """Why libpq rejected a connection string, without quoting any of it."""
    text = str(exc)
    if "unexpected spaces" in text:
        return "it holds a space (write each space in the password as %20)"
    if 'missing "="' in text:
        return "a key=value item has no `=` (put a value that holds spaces in single quotes)"
    if "percent-encoded" in text:
        return "a `%` does not start a %XX escape (write % itself as %25)"
    if "query parameter" in text:
        return "it has a `?name=` parameter libpq does not know"
    if "IPv6" in text or '"]"' in text:
        return "a `[` of an IPv6 address has no `]`"
    return "libpq cannot parse it"


def _has_vector(conn: Conn) -> bool:
    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    conn.commit()
    return row is not None


def _register_vector(conn: Conn) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)


def check_role(conn: Conn, *, setting_up: bool = False) -> None:
    """Raise RoleError (one sentence, the GRANT that fixes it) when this role cannot use
    vaultmem's tables here: the schema exists and the role may not read it (not a member of
    vaultmem_member: a member, or a would-be second owner), or `setting_up` there is no schema
    yet and the role may not create one. Catalog reads only: before anything is registered."""
    from ..errors import RoleError

    row = conn.execute(
        """
        SELECT current_user AS role, current_database() AS db, current_schema() AS schema,
               c.oid IS NOT NULL AS has_schema,
               c.relowner::regrole::text AS owner,
               CASE WHEN c.oid IS NOT NULL
                    THEN has_table_privilege(c.oid, 'SELECT') END AS can_read,
               has_schema_privilege(current_schema(), 'CREATE') AS can_create
          FROM (SELECT 1) AS one
          LEFT JOIN pg_class c ON c.oid = to_regclass('vaultmem_schema')
        """
    ).fetchone()
    conn.commit()
    assert row is not None
    if row["has_schema"] and not row["can_read"]:
        raise RoleError(
            f"role {row['role']} is not a member of vaultmem_member, so it may not use "
            f"vaultmem's tables in database {row['db']} (they belong to {row['owner']}): ask "
            f"their owner to run `GRANT vaultmem_member TO {row['role']};`, then run this again"
        )
    if setting_up and not row["has_schema"] and not row["can_create"]:
        raise RoleError(
            f"role {row['role']} may not create vaultmem's tables in schema {row['schema']} of "
            f"database {row['db']}: run `vaultmem init` once as the database's owner, or ask "
            f"for `GRANT CREATE ON SCHEMA {row['schema']} TO {row['role']};`"
        )


def newer_schema(version: int) -> str:
    """The sentence for a database whose schema this vaultmem is too old to read or write."""
    return (
        f"the database schema is version {version}, newer than this vaultmem understands "
        f"({SCHEMA_VERSION}): upgrade vaultmem on this machine (another machine already did); "
        "until then it neither reads nor writes this database"
    )


def check_readable(conn: Conn) -> None:
    """Before a read (query, context, the hook, the warm service's new connection): this role
    may use vaultmem's tables (else RoleError) and their schema is not newer than this code's
    (else SchemaError: results read through a layout this code does not know would be wrong
    silently). One catalog read and one row."""
    try:
        version = schema_version(conn)
    except psycopg.errors.InsufficientPrivilege:
        conn.rollback()
        check_role(conn)
        raise
    conn.commit()
    if version > SCHEMA_VERSION:
        raise SchemaError(newer_schema(version))


def schema_version(conn: Conn) -> int:
    """Highest applied version; 0 for an empty database."""
    exists = conn.execute("SELECT to_regclass('vaultmem_schema') IS NOT NULL AS e").fetchone()
    if not exists or not exists["e"]:
        return 0
    row = conn.execute("SELECT max(version) AS v FROM vaultmem_schema").fetchone()
    return int(row["v"] or 0) if row else 0


# The oldest pgvector vaultmem runs on: HNSW iterative scans (search/candidates.py) are 0.8's.
MIN_PGVECTOR = (0, 8, 0)


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_pgvector(conn: Conn) -> str:
    """pgvector's version in this database, creating the extension if the role may. Raises
    SchemaError with the next step when it is missing and cannot be created (a role that is not
    a superuser on a managed server: its administrator creates it once) or too old."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    if row is None:
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.errors.InsufficientPrivilege:
            who = conn.execute("SELECT current_user AS u, current_database() AS d").fetchone()
            conn.rollback()
            assert who is not None
            raise SchemaError(
                f"pgvector is not installed in database {who['d']} and role {who['u']} may not "
                f"install it: ask an administrator to run `CREATE EXTENSION vector;` in "
                f"{who['d']} once (managed servers: as the admin user), then run this again"
            ) from None
        except (psycopg.errors.UndefinedFile, psycopg.errors.FeatureNotSupported):
            conn.rollback()
            raise SchemaError(
                "pgvector is not installed on this PostgreSQL server: use the bundled server, "
                "the pgvector/pgvector Docker image, or a managed server that offers it"
            ) from None
        row = conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        ).fetchone()
    conn.commit()
    version = str(row["extversion"]) if row else "0"
    if _version_tuple(version) < MIN_PGVECTOR:
        wanted = ".".join(map(str, MIN_PGVECTOR))
        raise SchemaError(
            f"pgvector {version} is too old: vaultmem needs {wanted} or newer; run "
            "`ALTER EXTENSION vector UPDATE;` as the extension's owner (on a managed server, "
            "upgrade the server's pgvector first)"
        )
    return version


def schema_fingerprint() -> str:
    """What this vaultmem's schema is: its version and a digest of schema.sql (a schema.sql
    that changed without a new migration still counts as a change)."""
    digest = hashlib.sha256(schema_sql().encode("utf-8")).hexdigest()[:16]
    return f"vaultmem schema {SCHEMA_VERSION} sha256:{digest}"


def _recorded_fingerprint(conn: Conn) -> str | None:
    row = conn.execute(
        "SELECT obj_description(to_regclass('vaultmem_schema'), 'pg_class') AS d"
    ).fetchone()
    return row["d"] if row else None


def _owns_schema(conn: Conn) -> bool:
    """Whether this role owns vaultmem's tables (or is a member of the owner role)."""
    row = conn.execute(
        "SELECT pg_has_role(current_user, relowner, 'USAGE') AS o FROM pg_class"
        " WHERE oid = to_regclass('vaultmem_schema')"
    ).fetchone()
    return bool(row and row["o"])


def schema_is_current(conn: Conn) -> bool:
    """True when the database holds exactly this vaultmem's schema (version and schema.sql).
    Reads two catalog rows; takes no lock a writer would wait for."""
    current = schema_version(conn) == SCHEMA_VERSION and (
        _recorded_fingerprint(conn) == schema_fingerprint()
    )
    conn.commit()
    return current


def apply_schema(conn: Conn) -> list[int]:
    """Bring the schema to SCHEMA_VERSION. Returns the versions applied (empty if current).

    Current already (the common case: `init` of another vault, every ingest): nothing runs
    but two reads. Otherwise the upgrade waits for the writers in flight, then applies the
    migrations and schema.sql in one transaction, retried while a table is busy."""
    check_role(conn, setting_up=True)  # a role set up wrong: one sentence, nothing changed
    check_pgvector(conn)  # catalog reads only, unless the extension is missing
    # A member's role (team mode) may not run DDL, and needs none when its version is current.
    current = schema_is_current(conn) or (
        schema_version(conn) == SCHEMA_VERSION and not _owns_schema(conn)
    )
    conn.commit()  # the upgrade below must be a transaction of its own, not a savepoint
    if current:
        _register_vector(conn)
        return []
    deadline = time.monotonic() + UPGRADE_PATIENCE_SECONDS
    pause = 0.1
    while True:
        try:
            applied = _upgrade(conn)
            break
        except psycopg.errors.LockNotAvailable:
            conn.rollback()
            if time.monotonic() > deadline:
                raise DatabaseUnavailable(
                    "the schema upgrade could not get its tables: other vaultmem processes "
                    "kept them busy; run `vaultmem init` again"
                ) from None
            time.sleep(pause)
            pause = min(2.0, pause * 2)
    _register_vector(conn)
    return applied


def _upgrade(conn: Conn) -> list[int]:
    try:
        with conn.transaction():
            # Writers first: every index write holds this key shared
            # (schema_lock.write_transaction).
            schema_lock.hold_schema_for_upgrade(conn)
            current = schema_version(conn)
            if current > SCHEMA_VERSION:
                raise SchemaError(newer_schema(current))
            if current == SCHEMA_VERSION and _recorded_fingerprint(conn) == schema_fingerprint():
                return []  # another process upgraded it while this one waited
            conn.execute(f"SET LOCAL lock_timeout = {UPGRADE_LOCK_TIMEOUT_MS}")
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
            conn.execute(
                sql.SQL("COMMENT ON TABLE vaultmem_schema IS {}").format(
                    sql.Literal(schema_fingerprint())
                )
            )
    except psycopg.errors.FeatureNotSupported as exc:
        raise SchemaError(f"the database cannot install pgvector: {exc}") from exc
    except psycopg.errors.UndefinedFile as exc:
        raise SchemaError(
            "pgvector is not installed on this PostgreSQL server: use the bundled server, the "
            "pgvector/pgvector Docker image, or install pgvector"
        ) from exc
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaError(
            f"this role may not upgrade vaultmem's schema ({str(exc).splitlines()[0]}): run "
            "`vaultmem init` once as the role that owns vaultmem's tables"
        ) from exc
    return applied


def require_schema(conn: Conn) -> None:
    check_role(conn)
    version = schema_version(conn)
    if version == 0:
        raise SchemaError("the database has no vaultmem schema yet: run `vaultmem init`")
    if version != SCHEMA_VERSION:
        if version > SCHEMA_VERSION:
            raise SchemaError(newer_schema(version))
        raise SchemaError(
            f"the database schema is version {version}; run `vaultmem init` to upgrade it"
        )


@dataclass(frozen=True)
class Vault:
    """A vault's row: its id, the path it was indexed from and its name. A *shared* vault is
    found by name; its `root` is where its source was on the machine that registered it, which
    a member that reads it does not have."""

    id: int
    root: Path
    name: str
    shared: bool = False


_VAULT_COLUMNS = "id, root, name, shared"


def _vault(row: Any) -> Vault:
    return Vault(id=row["id"], root=Path(row["root"]), name=row["name"], shared=row["shared"])


def _installation(installation: str | None) -> str:
    if installation is not None:
        return installation
    from ..vaults import installation_id

    found = installation_id()
    assert found is not None
    return found


def register_vault(conn: Conn, root: Path, *, installation: str | None = None) -> Vault:
    """The row of the vault at `root` on this installation (`installation`: another one's id),
    created if there is none. A row from before installations existed (installation NULL) with
    this path is claimed instead, so an upgrade keeps its index."""
    root = root.resolve()
    inst = _installation(installation)
    with schema_lock.write_transaction(conn):
        conn.execute(
            f"""
            UPDATE vaults SET installation = %(i)s
             WHERE NOT shared AND installation IS NULL AND root = %(r)s
               AND vaultmem_may_write(owner)
               AND NOT EXISTS (SELECT 1 FROM vaults o
                                WHERE NOT o.shared AND o.installation = %(i)s AND o.root = %(r)s)
            RETURNING {_VAULT_COLUMNS}
            """,
            {"i": inst, "r": str(root)},
        )
        row = conn.execute(
            f"""
            INSERT INTO vaults (root, name, installation) VALUES (%(r)s, %(n)s, %(i)s)
            ON CONFLICT ((coalesce(installation, '00000000-0000-0000-0000-000000000000'::uuid)),
                         root) WHERE NOT shared
            DO UPDATE SET root = EXCLUDED.root
            RETURNING {_VAULT_COLUMNS}
            """,
            {"r": str(root), "n": root.name, "i": inst},
        ).fetchone()
        assert row is not None
        _ensure_index_state(conn, row["id"])
    return _vault(row)


def _ensure_index_state(conn: Conn, vault_id: int) -> None:
    """The vault's index_state row, added if missing. Checked first: an INSERT ... ON CONFLICT
    would wait for a writer's open transaction that updates the row (a frozen writer's, until
    the server ends it), before this run could even ask for the lease and say it waits."""
    conn.execute(
        "INSERT INTO index_state (vault_id) SELECT %(v)s WHERE NOT EXISTS"
        " (SELECT 1 FROM index_state WHERE vault_id = %(v)s) ON CONFLICT DO NOTHING",
        {"v": vault_id},
    )


def register_shared_vault(conn: Conn, name: str, root: Path) -> Vault:
    """The shared vault `name`, indexed from the repository at `root` on this machine; created
    (owned by this role) if there is none. Raises ConfigError when a vault of that name belongs
    to another role."""
    from ..errors import ConfigError

    root = root.resolve()
    try:
        with schema_lock.write_transaction(conn):
            row = conn.execute(
                f"""
                INSERT INTO vaults (root, name, shared) VALUES (%(r)s, %(n)s, true)
                ON CONFLICT (name) WHERE shared DO UPDATE SET root = EXCLUDED.root
                RETURNING {_VAULT_COLUMNS}
                """,
                {"r": str(root), "n": name},
            ).fetchone()
            assert row is not None
            _ensure_index_state(conn, row["id"])
    except psycopg.errors.InsufficientPrivilege:
        raise ConfigError(
            f"a shared vault named {name!r} already exists and belongs to another role: choose "
            "another name, or ask its owner to ingest it"
        ) from None
    return _vault(row)


def find_vault(conn: Conn, root: Path, *, installation: str | None = None) -> Vault | None:
    """The row of the vault at `root` on this installation (or an unclaimed one from before
    installations), None when it was never indexed here."""
    try:
        resolved = root.resolve()
    except OSError:
        resolved = root
    row = conn.execute(
        f"SELECT {_VAULT_COLUMNS} FROM vaults WHERE NOT shared AND root = %s"
        " AND (installation = %s OR installation IS NULL)"
        " ORDER BY installation NULLS LAST LIMIT 1",
        (str(resolved), _installation(installation)),
    ).fetchone()
    conn.commit()
    return _vault(row) if row else None


def find_shared_vault(conn: Conn, name: str) -> Vault | None:
    """The shared vault `name`, if this role may read it (its own, or granted to it)."""
    row = conn.execute(
        f"SELECT {_VAULT_COLUMNS} FROM vaults WHERE shared AND name = %s", (name,)
    ).fetchone()
    conn.commit()
    return _vault(row) if row else None


def delete_vault(conn: Conn, root: Path, *, installation: str | None = None) -> None:
    """Delete this installation's vault at `root` and, by cascade, every row of its index (in
    the caller's transaction, after any schema upgrade in progress, like every write)."""
    schema_lock.hold_schema_for_writing(conn)
    conn.execute(
        "DELETE FROM vaults WHERE NOT shared AND root = %s"
        " AND (installation = %s OR installation IS NULL)",
        (str(root.resolve()), _installation(installation)),
    )


def delete_unregistered_vault(
    conn: Conn, root: Path, *, installation: str | None = None
) -> int | None:
    """Delete this installation's index of the repository at `root` (an index older versions
    made without registering it) when this role may write it, in the caller's transaction:
    the number of notes it held, None when the role has no such index. Another role's index is
    never touched, whatever row-level security lets this role see (a superuser sees all)."""
    schema_lock.hold_schema_for_writing(conn)
    rows = conn.execute(
        """
        SELECT v.id, (SELECT count(*) FROM memory_notes n WHERE n.vault_id = v.id) AS notes
          FROM vaults v
         WHERE NOT v.shared AND v.root = %s AND (v.installation = %s OR v.installation IS NULL)
           AND v.owner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
           FOR UPDATE OF v
        """,
        (str(root), _installation(installation)),
    ).fetchall()
    if not rows:
        return None
    conn.execute("DELETE FROM vaults WHERE id = ANY(%s)", ([r["id"] for r in rows],))
    return sum(int(r["notes"]) for r in rows)


def delete_shared_vault(conn: Conn, name: str) -> bool:
    """Delete the shared vault `name` (its owner only) and every row of its index."""
    schema_lock.hold_schema_for_writing(conn)
    return conn.execute("DELETE FROM vaults WHERE shared AND name = %s", (name,)).rowcount > 0


def server_info(conn: Conn) -> dict[str, Any]:
    """Versions, the role connected as, and whether this connection is encrypted (TLS)."""
    pg = conn.execute("SHOW server_version").fetchone()
    vec = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    role = conn.execute("SELECT current_user AS u").fetchone()
    conn.commit()
    return {
        "postgres_version": pg["server_version"] if pg else None,
        "pgvector_version": vec["extversion"] if vec else None,
        "role": role["u"] if role else None,
        "tls": bool(conn.pgconn.ssl_in_use),
    }


def vault_stats(conn: Conn, *, installation: str | None = None) -> list[dict[str, Any]]:
    """Counts per vault of this installation (and unclaimed rows from before installations),
    and of every shared vault this role may read."""
    rows = conn.execute(
        """
        SELECT v.id, v.name, v.root, v.shared, s.watermark, s.model_id, s.last_run,
               (SELECT count(*) FROM memory_notes n WHERE n.vault_id = v.id) AS notes,
               (SELECT count(*) FROM memory_primary p WHERE p.vault_id = v.id) AS chunks,
               (SELECT count(*) FROM memory_primary p
                 WHERE p.vault_id = v.id
                   AND p.embedding IS NULL) AS backlog,
               (SELECT count(*) FROM memory_primary p
                 WHERE p.vault_id = v.id
                   AND (p.agnostic IS NULL OR p.agnostic_lines IS NULL))
                   AS second_opinion_missing,
               (SELECT count(*) FROM memory_secure_audit a WHERE a.vault_id = v.id) AS quarantined,
               (SELECT count(*) FROM memory_skipped k WHERE k.vault_id = v.id) AS skipped
        FROM vaults v LEFT JOIN index_state s ON s.vault_id = v.id
        WHERE v.shared OR v.installation IS NULL OR v.installation = %s
        ORDER BY v.id
        """,
        (_installation(installation),),
    ).fetchall()
    conn.commit()
    return [dict(r) for r in rows]


def hnsw_index_name(model_id: str) -> str:
    return "memory_primary_hnsw_" + hashlib.sha1(model_id.encode()).hexdigest()[:12]


def agnostic_index_name(model_id: str) -> str:
    return "memory_primary_agnostic_" + hashlib.sha1(model_id.encode()).hexdigest()[:12]


def ensure_agnostic_index(conn: Conn, model_id: str, dimension: int) -> None:
    """An HNSW cosine index over the chunks' second-opinion vectors of one model (the second
    opinion's candidate list searches it), created once through the schema's owner."""
    _ensure_index(
        conn, "vaultmem_ensure_agnostic_index", agnostic_index_name(model_id), model_id, dimension
    )


def ensure_vector_index(conn: Conn, model_id: str, dimension: int) -> None:
    """One HNSW cosine index per model, over rows of that model only (dimension fixed by a cast)."""
    _ensure_index(
        conn, "vaultmem_ensure_vector_index", hnsw_index_name(model_id), model_id, dimension
    )


def _ensure_index(conn: Conn, function: str, name: str, model_id: str, dimension: int) -> None:
    """Create the index `name` through the schema's SQL `function` unless it exists."""
    found = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS e", (name,)).fetchone()
    if found and found["e"]:
        return  # CREATE INDEX IF NOT EXISTS would still lock memory_primary against writers
    schema_lock.hold_schema_for_writing(conn)  # DDL: after an upgrade in progress, like any write
    # Through the schema's owner (SECURITY DEFINER): a member may be the first to use a model.
    conn.execute(
        sql.SQL("SELECT {}(%s, %s, %s)").format(sql.Identifier(function)),
        (name, model_id, int(dimension)),
    )
