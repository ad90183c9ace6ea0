"""The `vaultmem` command line: parse arguments, call the library, print results.

No logic lives here beyond choosing what to print. Library errors (VaultmemError subclasses) are
turned into one line on stderr and the error's exit code, in one place: VaultmemGroup.invoke.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from . import __version__, db, server
from .config import Settings, load_settings
from .errors import VaultmemError


class VaultmemGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VaultmemError as exc:
            click.echo(f"Error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted: run the same command again to finish; no work is lost.", err=True)
            ctx.exit(130)


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _settings(vault: Path | None = None) -> Settings:
    return load_settings(vault)


def _vault_root(vault: str | None) -> Path:
    """The git work tree to act on: --vault, else VAULTMEM_VAULT, else the current directory."""
    from .gitdiff import repo_root

    settings = load_settings()
    if vault:
        return repo_root(Path(vault))
    if settings.vault is not None:
        return repo_root(settings.vault)
    return repo_root(Path.cwd())


vault_option = click.option(
    "--vault",
    "vault",
    type=click.Path(file_okay=False, path_type=str),
    help="The vault (a git work tree). Default: VAULTMEM_VAULT, else the current directory.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(cls=VaultmemGroup)
@click.version_option(__version__, prog_name="vaultmem")
def cli() -> None:
    """vaultmem: long-term memory for coding agents, built from your git-versioned notes.

    Typical use: `vaultmem init` in your vault (starts the bundled database, applies the
    schema, indexes your notes and installs git hooks), then commit as usual and launch
    claude through `bin/agent-with-memory`.
    """


# --- database --------------------------------------------------------------------------------


@cli.group(name="db")
def db_group() -> None:
    """Manage the bundled PostgreSQL server (unused when VAULTMEM_DATABASE_URL is set)."""


@db_group.command(name="status")
@json_option
def db_status(as_json: bool) -> None:
    """Show whether the bundled server is initialised and running."""
    settings = _settings()
    st = server.status(settings.home)
    data = {
        "external": bool(settings.database_url),
        "pgdata": str(st.pgdata),
        "initialised": st.initialised,
        "running": st.running,
        "pid": st.pid,
    }
    if as_json:
        _print_json(data)
        return
    if settings.database_url:
        click.echo("Using an external database (VAULTMEM_DATABASE_URL); the bundled one is idle.")
    click.echo(f"bundled server: {'running (pid %s)' % st.pid if st.running else 'stopped'}")
    click.echo(f"data directory: {st.pgdata}{'' if st.initialised else ' (not initialised yet)'}")
    sys.exit(0 if st.running or settings.database_url else 1)


@db_group.command(name="start")
def db_start() -> None:
    """Start the bundled server (initialising it on first use). It keeps running until stopped."""
    settings = _settings()
    server.start(settings.home)
    click.echo(f"bundled server running: {server.running_url(settings.home)}")


@db_group.command(name="stop")
def db_stop() -> None:
    """Stop the bundled server, whichever process started it."""
    settings = _settings()
    if server.stop(settings.home):
        click.echo("bundled server stopped")
    elif server.status(settings.home).running:
        raise VaultmemError(f"the bundled server did not stop; see {server.pgdata_dir(settings.home)}/log")
    else:
        click.echo("bundled server was not running")


@db_group.command(name="url")
def db_url() -> None:
    """Print the database URL vaultmem uses (passwords masked). Starts the bundled server."""
    from .config import redact_url

    settings = _settings()
    click.echo(redact_url(db.database_url(settings)))


# --- init and status -------------------------------------------------------------------------


@cli.command()
@vault_option
def init(vault: str | None) -> None:
    """Connect (starting the bundled server if needed), apply the schema and register the vault.

    Safe to run again: it changes nothing that is already in place.
    """
    root = _vault_root(vault)
    settings = load_settings(root)
    with db.connect(settings) as conn:
        applied = db.apply_schema(conn)
        v = db.register_vault(conn, root)
        info = db.server_info(conn)
    if applied:
        click.echo(f"schema applied (version {db.SCHEMA_VERSION})")
    else:
        click.echo(f"schema up to date (version {db.SCHEMA_VERSION})")
    click.echo(f"vault registered: {v.root} (id {v.id})")
    click.echo(
        f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}"
    )


@cli.command()
@json_option
def status(as_json: bool) -> None:
    """Show the database, its versions, the schema version and every vault's counts."""
    settings = _settings()
    with db.connect(settings) as conn:
        info = db.server_info(conn)
        version = db.schema_version(conn)
        vaults = db.vault_stats(conn) if version else []
    data = {
        "database": "external" if settings.database_url else "bundled",
        "reachable": True,
        **info,
        "schema_version": version,
        "vaults": vaults,
    }
    if as_json:
        _print_json(data)
        return
    click.echo(f"database: {data['database']}, reachable")
    click.echo(f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}")
    click.echo(f"schema version: {version or 'none (run `vaultmem init`)'}")
    for v in vaults:
        click.echo(
            f"vault {v['name']} ({v['root']}): {v['notes']} notes, {v['chunks']} chunks, "
            f"{v['backlog']} awaiting embeddings, {v['quarantined']} quarantined, "
            f"{v['skipped']} skipped; indexed to {(v['watermark'] or 'nothing yet')[:12]}"
        )


def main() -> None:
    cli()
