"""What every command shares: the `vaultmem` group, its one translation of library errors into
one line and an exit code (VaultmemGroup.invoke), printing for people and for scripts, the common
options, and which vault a command acts on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .. import __version__
from ..config import Settings, load_settings
from ..dburl import redact_url
from ..errors import VaultmemError
from ..index.statedir import duration as duration
from ..terminal import clean, json_safe


def echo(message: str = "", err: bool = False) -> None:
    """click.echo for people: what notes and file names hold never reaches the terminal as
    control characters or escape sequences."""
    click.echo(clean(message), err=err)


def error(message: str) -> None:
    """One error line on stderr: clean, and with any database password hidden."""
    click.echo(clean(redact_url(message)), err=True)


def display_path(path: str) -> str:
    """A path (or any field of a one-record-per-line listing) for a human-readable line: one
    line whatever it holds, every control character shown escaped."""
    return clean(path, newlines=False)


class VaultmemGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        import psycopg

        try:
            return super().invoke(ctx)
        except VaultmemError as exc:
            if not exc.reported:
                error(f"Error: {exc}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            error("Interrupted: run the same command again to finish; no work is lost.")
            ctx.exit(130)
        except psycopg.OperationalError as exc:
            # The database went away mid-command (restart, crash, network). Every write is
            # transactional, so the next run repairs whatever this one did not finish.
            first = (str(exc).strip().splitlines() or ["connection lost"])[0]
            error(
                f"Error: the database connection failed ({first}); check the database "
                "(`vaultmem db status`) and run the command again: nothing is half-written"
            )
            ctx.exit(4)
        except OSError as exc:
            # Permissions, a full disk, a vanished directory: the system's own words name the
            # cause; the command is safe to repeat once it is fixed.
            what = exc.strerror or exc.__class__.__name__
            where = f": {exc.filename}" if exc.filename else ""
            error(
                f"Error: {what}{where}; fix that and run the command again: nothing is half-written"
            )
            ctx.exit(1)


def writer_start(settings: Settings) -> bool:
    """Commands that write start a bundled server that is merely down (after a reboot), never
    one the user stopped with `vaultmem db stop` (the git hooks follow the same rule)."""
    from ..store import server

    return not server.stopped_on_purpose(settings.home)


def print_json(data: Any) -> None:
    # JSON escapes C0 controls itself; json_safe escapes C1 and bidi controls too.
    click.echo(json_safe(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def settings_for(vault: Path | None = None) -> Settings:
    return load_settings(vault)


def vault_root(vault: str | None) -> Path:
    """The git work tree to act on (ingest, verify, audit...): --vault NAME or PATH, else
    VAULTMEM_VAULT, else the current directory, like git."""
    from .. import vaults
    from ..index.gitdiff import repo_root

    chosen = vaults.requested(vault)
    if chosen:
        entry = vaults.load().get(chosen)
        if entry is not None and entry.path is None:
            from ..errors import ConfigError

            raise ConfigError(
                f"{entry.name} is a shared vault read from the server: it has no folder on this "
                "machine to index or check (its source's machine does that)"
            )
        if entry is not None and entry.path is not None:
            return repo_root(entry.path)
        return repo_root(Path(chosen).expanduser())
    return repo_root(Path.cwd())


def registered_root(vault: str | None) -> Path:
    """The work tree a command that writes the index acts on (`vault_root`), which must be a
    registered vault: a repository nobody registered is never indexed (it would show up in
    `status` with no way to remove it)."""
    from .. import vaults
    from ..errors import ConfigError

    root = vault_root(vault)
    config = vaults.load()
    entry = config.containing(root)
    if entry is None or entry.path is None or Path(entry.path).resolve() != root.resolve():
        raise ConfigError(
            f"{root} is not a registered vault, so it is not indexed: run `vaultmem init` in "
            "it to register and index it"
        )
    return root


def reading_vault(vault: str | None) -> Any:
    """The registered vault a command that hands notes out (query, context) reads, or None."""
    from .. import vaults

    return vaults.resolve(vaults.load(), vault, cwd=Path.cwd())


# Two kinds of command take --vault, and choose differently without it (vault_root and
# reading_vault): one that acts on a vault's git work tree, like git, and one that hands notes
# out, which reads only a registered vault. Each says its own default.
VAULT_HELP = (
    "The vault: a registered name or a path. Default: VAULTMEM_VAULT, else the git work tree "
    "holding the current directory."
)
vault_option = click.option("--vault", "vault", type=str, help=VAULT_HELP)
reading_vault_option = click.option(
    "--vault",
    "vault",
    type=str,
    help="The registered vault to read: a name or a path. Default: VAULTMEM_VAULT, else the "
    "registered vault holding the current directory, else the default vault.",
)


_Command = TypeVar("_Command", bound=Callable[..., Any])


def naming_mcp_tools(command: _Command) -> _Command:
    """Fill `{mcp_tools}` in a command's docstring (its --help) with the tools `vaultmem mcp`
    serves, from the one list that defines them (`agent.claude_mcp.TOOLS`), so the help never
    names fewer or others. Goes under the click decorator, which reads the docstring."""
    from ..agent.claude_mcp import tool_names

    command.__doc__ = (command.__doc__ or "").replace("{mcp_tools}", tool_names())
    return command


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(cls=VaultmemGroup)
@click.version_option(__version__, prog_name="vaultmem")
def cli() -> None:
    """vaultmem: long-term memory for coding agents, built from your git-versioned notes.

    Typical use: `vaultmem init` in your vault (starts the bundled database, applies the
    schema, indexes your notes and installs git hooks), then commit as usual and launch
    claude through `bin/agent-with-memory`.
    """


def say_if_waiting(root: Path) -> None:
    """Before a command that waits for the vault's writer lock: say so when another process
    holds it, rather than sit on an empty progress line (stderr; the wait itself is short, a
    background drainer steps aside after its current batch)."""
    from ..index.statedir import read_progress, state_files
    from ..index.writer_lock import lock_is_held

    try:
        files = state_files(root)
        if not lock_is_held(files.lock):
            return
        live = read_progress(root)
    except (OSError, VaultmemError):
        return
    what = (
        f"the background embedding (pid {live.get('pid')}, {live.get('done')} of "
        f"{live.get('total')} chunks) steps aside after its current batch"
        if live
        else "another ingest of this vault is running (a background one steps aside after its "
        "current batch, one in a terminal finishes its pass first)"
    )
    error(f"waiting for the writer lock: {what} (Ctrl-C leaves everything as it is)")


class ProgressBar:
    """A rich progress bar with an ETA on stderr; silent when stderr is not a terminal."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)
        self.enabled = enabled and console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
            disable=not self.enabled,
        )
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> ProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, phase: str, done: int, total: int) -> None:
        label = {
            "index": "indexing notes",
            "embed": "embedding chunks",
            "second opinion": "second opinion's vectors",
        }.get(phase, phase)
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(label, total=total)
        self.progress.update(self.tasks[phase], completed=done, total=total)


def print_result(result: Any, as_json: bool) -> None:
    if as_json:
        print_json(result.to_dict())
        return
    span = ""
    if result.to_commit:
        span = f" to {result.to_commit[:12]}"
    echo(f"{result.mode}{span}: {result.summary()}")
    for path, reason in sorted(result.skip_reasons.items()):
        echo(f"  skipped {path!r}: {reason}")
