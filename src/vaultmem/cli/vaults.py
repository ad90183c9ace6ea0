"""`vaultmem init` and `vaultmem vaults`: the registry of vaults, the only sources of memory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ..config import load_settings
from ..errors import VaultmemError
from ..index.registration import register
from .base import (
    ProgressBar,
    cli,
    duration,
    echo,
    json_option,
    print_json,
    print_result,
    say_if_waiting,
    settings_for,
    vault_option,
    vault_root,
    writer_start,
)

T = TypeVar("T")


@cli.command()
@vault_option
@click.option("--name", help="The vault's name in the registry. Default: its folder's name.")
@click.option("--no-hooks", is_flag=True, help="Do not install the git hooks.")
@click.option("--no-index", is_flag=True, help="Do not index the notes now.")
@click.option(
    "--shared",
    "shared",
    metavar="NAME",
    help="Make this repository (a clone, or a bare remote) the source of the shared vault NAME "
    "on the server in VAULTMEM_DATABASE_URL, indexed once for every role granted it.",
)
@click.option(
    "--ref",
    metavar="REF",
    help="With --shared: the branch the shared vault follows (default: HEAD), e.g. "
    "refs/remotes/origin/main in a clone that pulls.",
)
def init(
    vault: str | None,
    name: str | None,
    no_hooks: bool,
    no_index: bool,
    shared: str | None,
    ref: str | None,
) -> None:
    """Set up a vault: registration, database, schema, git hooks, first index.

    Registers the vault in your user config (the first one becomes the default vault that
    the agent wrapper and the Claude Code hook read from any directory), starts the bundled
    database if no VAULTMEM_DATABASE_URL is set, applies schema.sql, installs the git hooks and
    indexes the notes at HEAD (text first, then vectors, with a progress bar). Safe to run
    again: it changes nothing that is already in place.

    With --shared NAME the repository is the source of a team's shared vault: it is indexed
    (as its branch moves, from this machine's hooks) once for everyone granted it
    (`vaultmem grant NAME ROLE`); members register it with `vaultmem vaults add --shared NAME`.
    """
    from .. import vaults
    from ..errors import ConfigError
    from ..store import db

    if ref is not None and shared is None:
        raise ConfigError("--ref names the branch a shared vault follows: add --shared NAME")
    root = vault_root(vault)
    # The database first: a role set up wrong (not a member, no CREATE, no pgvector) gets its
    # one sentence before anything is registered on this machine.
    planned = load_settings(root)
    if shared is not None and not planned.database_url:
        register(root, name, shared=shared, ref=ref)  # raises: a shared vault needs a server
    with db.connect(planned, start=True) as conn:
        applied = db.apply_schema(conn)  # a current schema: two catalog reads, no lock
        entry, settings = register(root, name, shared=shared, ref=ref)
        if settings.shared is not None:
            v = db.register_shared_vault(conn, settings.shared, root)
        else:
            v = db.register_vault(conn, root, installation=settings.installation)
        info = db.server_info(conn)
    if applied:
        echo(f"schema applied (version {db.SCHEMA_VERSION})")
    else:
        echo(f"schema up to date (version {db.SCHEMA_VERSION})")
    default = vaults.load().default_vault()
    is_default = (
        " (the default vault)" if default is not None and default.name == entry.name else ""
    )
    kind = f" (source of shared vault {v.name})" if v.shared else ""
    echo(f"vault registered: {entry.name} = {v.root}{kind}{is_default} in {vaults.config_path()}")
    echo(f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}")
    if not no_hooks:
        from ..errors import ConfigError
        from ..index import git_hooks

        try:
            git_hooks.install(root, config=vaults.config_path())
            echo(f"git hooks installed in {git_hooks.hooks_dir(root)}")
        except ConfigError as exc:
            echo(f"git hooks NOT installed: {exc}", err=True)
    if not no_index:
        from ..index import ingest as ingest_mod

        # Text first, in the foreground: the vault is searchable by full text when init ends.
        say_if_waiting(root)
        with ProgressBar(True) as bar:
            result = ingest_mod.catch_up(settings, root, progress=bar, wait=True, embed=False)
        if result is not None:
            print_result(result, False)
        _start_vectors(root, result.backlog if result is not None else 1)


def _start_vectors(root: Path, backlog: int) -> None:
    """Leave the embedding backlog to one background drainer that survives the terminal
    closing, and say so in one line, with an ETA from the rate that drainer measures (its
    priority, its model load and this machine's load included: a rate measured here, in the
    foreground, promised "about 4 s" for what took 34 s)."""
    from .. import vaults
    from ..index.freshness import start_catch_up
    from ..index.statedir import wait_for_rate

    if backlog == 0:
        echo("vectors: every chunk has its vector")
        return
    started = start_catch_up(root, vaults.config_path())
    where = "in the background" if started else "by the ingester already running"
    echo(f"vectors: measuring the embedding rate of {backlog} chunks {where}...", err=True)
    live = wait_for_rate(root, RATE_WAIT_SECONDS)
    if live is None:
        echo(
            f"vectors: every chunk embedded {where}; full-text and vector search work now"
            if _backlog_is_empty(root)
            else f"vectors: {backlog} chunks to embed {where}; full-text search works "
            "meanwhile; `vaultmem status` shows the rate and the time left"
        )
        return
    left = min(backlog, max(0, int(live["total"]) - int(live["done"])))
    rate = float(live["rate"])
    # Counted from the backlog the text pass just printed, so the two lines agree: by the
    # time the drainer has measured its rate it has embedded some of it already.
    echo(
        f"vectors: {backlog - left} of the {backlog} chunks embedded {where} so far, the other "
        f"{left} in about {duration(left / rate)} at {rate:.1f} chunks/s (measured there); "
        "full-text search works meanwhile; `vaultmem status` shows progress"
    )


# How long `init` waits for the background drainer's first measured rate before it leaves
# the ETA to `vaultmem status`.
RATE_WAIT_SECONDS = 20.0


def _backlog_is_empty(root: Path) -> bool:
    from .. import store
    from ..store import db

    settings = load_settings(root)
    try:
        with db.connect(settings) as conn:
            found = db.find_vault(conn, root)
            if found is None:
                return False
            from ..embed import get_embedder

            return store.backlog_size(conn, found.id, get_embedder(settings).model_id) == 0
    except Exception:  # noqa: BLE001 - only chooses between two honest sentences
        return False


@cli.group(name="vaults")
def vaults_group() -> None:
    """The registered vaults: the only places the agent's memory comes from.

    They live in your user config (`vaultmem vaults list` shows where). `vaultmem init`
    registers a vault; the first one is the default, which the agent wrapper and the Claude
    Code hook read from any directory (inside another registered vault, that one is read).
    """


@vaults_group.command(name="list")
@click.option(
    "--access/--no-access",
    default=None,
    help="Ask the server who may read what: each vault this role sees, its owner and the roles "
    "granted it. Default: when VAULTMEM_DATABASE_URL names a server.",
)
@json_option
def vaults_list(access: bool | None, as_json: bool) -> None:
    """List the registered vaults, the default one, and the index each one uses; with a
    server (VAULTMEM_DATABASE_URL), also who may read what there: this role's own vaults, the
    shared vaults granted to it, and for each vault the roles that may read it.
    """
    from .. import vaults
    from ..errors import VaultmemError

    config = vaults.load()
    readable = None
    if access or (access is None and load_settings().database_url):
        try:
            readable = _access_rows()
        except VaultmemError as exc:
            if access:
                raise
            echo(f"(who may read what is not shown: {exc})", err=True)
    default = config.default_vault()
    rows = [
        {**v.to_dict(), "default": default is not None and v.name == default.name}
        for v in config.vaults
    ]
    if as_json:
        out: dict[str, Any] = {"config": str(config.path), "vaults": rows}
        if readable is not None:
            out["access"] = readable
        print_json(out)
        return
    if not rows:
        echo(f"no vault registered ({config.path}): `vaultmem init --vault PATH`")
    for r in rows:
        where = r["database_url"] or (f"bundled database in {r['home']}" if r["home"] else "")
        mark = "* " if r["default"] else "  "
        if r["shared"] and r["path"] is None:
            place = f"shared vault {r['shared']} (read from the server)"
        elif r["shared"]:
            ref = f", following {r['ref']}" if r["ref"] else ""
            place = f"{r['path']} (source of shared vault {r['shared']}{ref})"
        else:
            place = str(r["path"])
        echo(f"{mark}{r['name']}  {place}" + (f"  ({where})" if where else ""))
    if rows:
        echo(f"(* = default; registry: {config.path})")
    if readable is not None:
        echo(f"on the server, role {readable['role']} may read:")
        here = vaults.installation_id(user=config, create=False)
        for a in readable["vaults"]:
            kind = "shared" if a["shared"] else "private"
            whose = "yours" if a["mine"] else f"owner {a['owner']}"
            readers = ", ".join(a["readers"]) or "nobody else"
            echo(f"  {a['name']} ({kind}, {whose}{_machine(a, here)}): also readable by {readers}")


def _machine(a: dict[str, Any], here: str | None) -> str:
    """Which machine a private vault is on (its installation: one vaultmem home on one host),
    and its folder there: two machines with the same path each have a vault of that name."""
    if a["shared"] or a["installation"] is None:
        return ""
    where = "this machine" if a["installation"] == here else f"installation {a['installation'][:8]}"
    return f", {where}, {a['root']}"


def _access_rows() -> dict[str, Any]:
    """Who may read what, as the server's row-level security lets this role see it."""
    from ..store import access, db

    settings = load_settings()
    with db.connect(settings) as conn:
        db.require_schema(conn)
        role = access.current_role(conn)
        seen = access.access_list(conn)
    return {"role": role, "vaults": [a.to_dict() for a in seen]}


@vaults_group.command(name="add")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--name", help="The vault's name. Default: its folder's name (or the shared name).")
@click.option(
    "--shared",
    "shared",
    metavar="NAME",
    help="Register the shared vault NAME from the server in VAULTMEM_DATABASE_URL, for reading "
    "only (no clone needed here): the hook, the wrapper and MCP then read it.",
)
def vaults_add(path: Path | None, name: str | None, shared: str | None) -> None:
    """Register the git work tree at PATH without indexing it (`vaultmem init` does both), or
    with --shared NAME a team's shared vault to read from the server."""
    from ..errors import ConfigError
    from ..index.gitdiff import repo_root

    if shared is not None:
        if path is not None:
            raise ConfigError(
                "--shared NAME reads a shared vault from the server, with no folder here; to "
                "make PATH the source of a shared vault run `vaultmem init --vault PATH "
                "--shared NAME`"
            )
        from ..index.registration import register_reader
        from ..store import db

        planned = load_settings(None)
        if planned.database_url:  # the server first: nothing is registered for a wrong role
            with db.connect(planned) as conn:
                db.require_schema(conn)
        entry, settings = register_reader(shared, name)
        echo(
            f"registered {entry.name} = shared vault {shared} on {entry.to_dict()['database_url']}"
        )
        with db.connect(settings) as conn:
            db.require_schema(conn)
            found = db.find_shared_vault(conn, shared)
        if found is None:
            echo(
                f"note: no shared vault {shared} is readable by this role yet (it does not "
                f"exist, or its owner has not run `vaultmem grant {shared} ROLE`); it is read "
                "as soon as it is",
                err=True,
            )
        return
    if path is None:
        raise ConfigError("give the vault's PATH, or --shared NAME for a shared vault")
    entry, _ = register(repo_root(path), name)
    echo(f"registered {entry.name} = {entry.path}")


@vaults_group.command(name="remove")
@click.argument("name")
@click.option("--purge", is_flag=True, help="Also delete its rows from the database.")
@json_option
def vaults_remove(name: str, purge: bool, as_json: bool) -> None:
    """Unregister vault NAME: no agent reads it and its git hooks stop indexing it.

    With --purge, NAME may also be the PATH of a repository that is not registered but has an
    index (older versions indexed without registering): that index is deleted, if it is yours.
    """
    from .. import vaults

    entry = vaults.load().get(name)
    if entry is None and purge:
        _remove_unregistered(Path(name).expanduser(), as_json)
        return
    gone = False
    if entry is not None and purge:
        # The index is deleted first and the vault unregistered only once that committed: a
        # purge that fails (a database down, a rebuild holding its rows) leaves the vault
        # registered, so `remove --purge` can simply be run again.
        gone = _with_retries(name, lambda conn: _purge(conn, entry), load_settings(entry=entry))
    removed = vaults.unregister(name)
    if as_json:
        print_json(
            {
                "name": removed.name,
                "path": str(removed.path) if removed.path else None,
                "shared": removed.shared,
                "registered": False,
                "index_deleted": gone,
            }
        )
        return
    echo(f"unregistered {removed.name} ({removed.path or 'shared vault ' + str(removed.shared)})")
    if purge and entry is not None:
        echo(
            "its index was deleted from the database"
            if gone
            else "its index stays on the server: only its owner may delete it"
        )
    else:
        echo(
            "its index stays in the database (`--purge` deletes it); "
            "`vaultmem hooks uninstall --vault PATH` removes its git hooks"
        )


def _remove_unregistered(path: Path, as_json: bool) -> None:
    """Delete the index of a repository no registry entry names (`vaultmem status` lists it),
    if this role owns it; ConfigError when there is none of this role's."""
    from ..errors import ConfigError, NotAGitRepo
    from ..index.gitdiff import repo_root
    from ..store import db

    try:
        root = repo_root(path)
    except NotAGitRepo:
        root = path.resolve()  # the repository may be gone; its index is still named by path
    settings = settings_for()
    notes = _with_retries(
        str(root), lambda conn: db.delete_unregistered_vault(conn, root), settings, registered=False
    )
    if notes is None:
        raise ConfigError(
            f"{path} is neither a registered vault nor a repository with an index of yours in "
            "this database: `vaultmem vaults list` names the vaults, `vaultmem status` every index"
        )
    if as_json:
        print_json(
            {
                "name": None,
                "path": str(root),
                "registered": False,
                "index_deleted": True,
                "notes": notes,
            }
        )
        return
    echo(f"deleted the index of {root}, which is not a registered vault ({notes} notes)")


# A purge that meets a writer's locks (a deadlock, a lock wait given up) is tried this often.
PURGE_TRIES = 3


def _purge(conn: Any, entry: Any) -> bool:
    """Delete a registered vault's index (its shared vault's, when the role owns it), in the
    caller's transaction; True when it is gone."""
    from ..store import db

    if entry.shared is not None:
        return bool(db.delete_shared_vault(conn, entry.shared))
    db.delete_vault(conn, entry.path)
    return True


def _with_retries(
    name: str, delete: Callable[[Any], T], settings: Any, *, registered: bool = True
) -> T:
    """Run `delete` in a write transaction and commit it. A deadlock with a writer (a rebuild
    holding the vault's rows) is retried; a failure raises, nothing changed."""
    import time

    import psycopg

    from ..store import db

    for attempt in range(PURGE_TRIES):
        try:
            with db.connect(settings, start=writer_start(settings)) as conn:
                result = delete(conn)
                conn.commit()
                return result
        except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
            if attempt == PURGE_TRIES - 1:
                still = " and it is still registered" if registered else ""
                raise VaultmemError(
                    f"{name}'s index is busy (a writer holds its rows): nothing was deleted"
                    f"{still}; run `vaultmem vaults remove --purge` again once the writer is done"
                ) from None
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


@vaults_group.command(name="default")
@click.argument("name")
def vaults_default(name: str) -> None:
    """Make NAME the default vault (read from directories outside every registered vault)."""
    from .. import vaults

    entry = vaults.set_default(name)
    echo(f"default vault: {entry.name} ({entry.path or 'shared vault ' + str(entry.shared)})")
