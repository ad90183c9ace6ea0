"""`vaultmem db`: the bundled PostgreSQL server."""

from __future__ import annotations

import sys

from ..dburl import redact_url
from ..errors import VaultmemError
from .base import cli, echo, json_option, print_json, settings_for


@cli.group(name="db")
def db_group() -> None:
    """Manage the bundled PostgreSQL server (unused when VAULTMEM_DATABASE_URL is set)."""


@db_group.command(name="status")
@json_option
def db_status(as_json: bool) -> None:
    """Show whether the bundled server is initialised and running."""
    from ..store import server

    settings = settings_for()
    st = server.status(settings.home)
    data = {
        "external": bool(settings.database_url),
        "pgdata": str(st.pgdata),
        "initialised": st.initialised,
        "running": st.running,
        "pid": st.pid,
    }
    if as_json:
        print_json(data)
        return
    if settings.database_url:
        echo("Using an external database (VAULTMEM_DATABASE_URL); the bundled one is idle.")
    state = f"running (pid {st.pid})" if st.running else "stopped"
    echo(f"bundled server: {state}")
    echo(f"data directory: {st.pgdata}{'' if st.initialised else ' (not initialised yet)'}")
    sys.exit(0 if st.running or settings.database_url else 1)


@db_group.command(name="start")
def db_start() -> None:
    """Start the bundled server (initialising it on first use). It keeps running until stopped."""
    from ..store import server

    settings = settings_for()
    server.start(settings.home)
    echo(f"bundled server running: {server.running_url(settings.home)}")


@db_group.command(name="stop")
def db_stop() -> None:
    """Stop the bundled server, whichever process started it."""
    from ..store import server

    settings = settings_for()
    if server.stop(settings.home):
        echo("bundled server stopped")
    elif server.status(settings.home).running:
        raise VaultmemError(
            f"the bundled server did not stop; see {server.pgdata_dir(settings.home)}/log"
        )
    else:
        echo("bundled server was not running")


@db_group.command(name="url")
def db_url() -> None:
    """Print the database URL vaultmem uses (passwords masked). Starts the bundled server."""
    from ..store import db

    settings = settings_for()
    echo(redact_url(db.database_url(settings, start=True)))
