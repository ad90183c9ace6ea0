"""The `vaultmem` command line: parse arguments, call the library, print results.

No logic lives here beyond choosing what to print. Library errors (VaultmemError subclasses) are
turned into one line on stderr and the error's exit code, in one place: VaultmemGroup.invoke.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import __version__
from ..config import Settings, load_settings
from ..dburl import redact_url
from ..errors import VaultmemError
from ..terminal import clean, json_safe

if TYPE_CHECKING:
    from ..index.verify import VaultStatus


def _echo(message: str = "", err: bool = False) -> None:
    """click.echo for people: what notes and file names hold never reaches the terminal as
    control characters or escape sequences."""
    click.echo(clean(message), err=err)


def _error(message: str) -> None:
    """One error line on stderr: clean, and with any database password hidden."""
    click.echo(clean(redact_url(message)), err=True)


def _path(path: str) -> str:
    """A path for a human-readable line: one line whatever the name holds."""
    return clean(path, newlines=False)


def _audit_path(path: str) -> str:
    """A quarantined path for people: a token written into the name is masked (`--json` keeps
    the real path, for scripts to act on)."""
    from ..index.sensitive import mask_path_tokens

    return _path(mask_path_tokens(path))


class VaultmemGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        import psycopg

        try:
            return super().invoke(ctx)
        except VaultmemError as exc:
            if not exc.reported:
                _error(f"Error: {exc}")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            _error("Interrupted: run the same command again to finish; no work is lost.")
            ctx.exit(130)
        except psycopg.OperationalError as exc:
            # The database went away mid-command (restart, crash, network). Every write is
            # transactional, so the next run repairs whatever this one did not finish.
            first = (str(exc).strip().splitlines() or ["connection lost"])[0]
            _error(
                f"Error: the database connection failed ({first}); check the database "
                "(`vaultmem db status`) and run the command again: nothing is half-written"
            )
            ctx.exit(4)
        except OSError as exc:
            # Permissions, a full disk, a vanished directory: the system's own words name the
            # cause; the command is safe to repeat once it is fixed.
            what = exc.strerror or exc.__class__.__name__
            where = f": {exc.filename}" if exc.filename else ""
            _error(
                f"Error: {what}{where}; fix that and run the command again: nothing is half-written"
            )
            ctx.exit(1)


def _writer_start(settings: Settings) -> bool:
    """Commands that write start a bundled server that is merely down (after a reboot), never
    one the user stopped with `vaultmem db stop` (the git hooks follow the same rule)."""
    from ..store import server

    return not server.stopped_on_purpose(settings.home)


def _print_json(data: Any) -> None:
    # JSON escapes C0 controls itself; json_safe escapes C1 and bidi controls too.
    click.echo(json_safe(json.dumps(data, indent=2, ensure_ascii=False, default=str)))


def _settings(vault: Path | None = None) -> Settings:
    return load_settings(vault)


def _vault_root(vault: str | None) -> Path:
    """The git work tree to act on (ingest, verify, audit...): --vault NAME or PATH, else
    VAULTMEM_VAULT, else the current directory, like git."""
    from .. import vaults
    from ..index.gitdiff import repo_root

    chosen = vault or os.environ.get("VAULTMEM_VAULT")
    if chosen:
        entry = vaults.load().get(chosen)
        return repo_root(entry.path if entry is not None else Path(chosen).expanduser())
    return repo_root(Path.cwd())


def _reading_vault(vault: str | None) -> Any:
    """The registered vault a command that hands notes out (query, context) reads, or None."""
    from .. import vaults

    return vaults.resolve(vaults.load(), vault, cwd=Path.cwd())


vault_option = click.option(
    "--vault",
    "vault",
    type=str,
    help="The vault: a registered name or a path. Default: VAULTMEM_VAULT, else the current "
    "directory (for query and context: the registered vault holding it, else the default vault).",
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
    from ..store import server

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
        _echo("Using an external database (VAULTMEM_DATABASE_URL); the bundled one is idle.")
    state = f"running (pid {st.pid})" if st.running else "stopped"
    _echo(f"bundled server: {state}")
    _echo(f"data directory: {st.pgdata}{'' if st.initialised else ' (not initialised yet)'}")
    sys.exit(0 if st.running or settings.database_url else 1)


@db_group.command(name="start")
def db_start() -> None:
    """Start the bundled server (initialising it on first use). It keeps running until stopped."""
    from ..store import server

    settings = _settings()
    server.start(settings.home)
    _echo(f"bundled server running: {server.running_url(settings.home)}")


@db_group.command(name="stop")
def db_stop() -> None:
    """Stop the bundled server, whichever process started it."""
    from ..store import server

    settings = _settings()
    if server.stop(settings.home):
        _echo("bundled server stopped")
    elif server.status(settings.home).running:
        raise VaultmemError(
            f"the bundled server did not stop; see {server.pgdata_dir(settings.home)}/log"
        )
    else:
        _echo("bundled server was not running")


@db_group.command(name="url")
def db_url() -> None:
    """Print the database URL vaultmem uses (passwords masked). Starts the bundled server."""
    from ..dburl import redact_url
    from ..store import db

    settings = _settings()
    _echo(redact_url(db.database_url(settings, start=True)))


# --- indexing ----------------------------------------------------------------------------------


class _ProgressBar:
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

    def __enter__(self) -> _ProgressBar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, phase: str, done: int, total: int) -> None:
        label = {"index": "indexing notes", "embed": "embedding chunks"}.get(phase, phase)
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(label, total=total)
        self.progress.update(self.tasks[phase], completed=done, total=total)


def _print_result(result: Any, as_json: bool) -> None:
    if as_json:
        _print_json(result.to_dict())
        return
    span = ""
    if result.to_commit:
        span = f" to {result.to_commit[:12]}"
    _echo(f"{result.mode}{span}: {result.summary()}")
    for path, reason in sorted(result.skip_reasons.items()):
        _echo(f"  skipped {path!r}: {reason}")


@cli.command()
@vault_option
@click.option(
    "--changes-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Apply a saved `git diff-tree -r -z -M` output instead of diffing to HEAD.",
)
@click.option("--no-embed", is_flag=True, help="Index text only; leave vectors in the backlog.")
@click.option("--from-hook", is_flag=True, hidden=True)
@click.option("--config", "config_file", type=click.Path(path_type=Path), hidden=True)
@click.option(
    "--wait", is_flag=True, help="Wait for a running ingest instead of handing over to it."
)
@json_option
def ingest(
    vault: str | None,
    changes_file: Path | None,
    no_embed: bool,
    from_hook: bool,
    config_file: Path | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Catch the index up with HEAD: what the git hooks run after each commit.

    Diffs the last indexed commit against HEAD, applies adds, edits, deletes and renames, then
    embeds new chunks. If another ingest is running, it is told to do another pass and this
    command returns at once.
    """
    from ..index import ingest as ingest_mod

    if from_hook:
        _hook_ingest(vault, config_file)
        return
    root = _vault_root(vault)
    settings = load_settings(root)
    result: ingest_mod.IngestResult | None
    with _ProgressBar(not as_json) as bar:
        if changes_file is not None:
            result = ingest_mod.apply_changes_file(settings, root, changes_file, embed=not no_embed)
        else:
            result = ingest_mod.catch_up(
                settings, root, embed=not no_embed, wait=wait, progress=bar
            )
    if result is None:
        msg = "another ingest is running for this vault; it will include the latest commits"
        if as_json:
            _print_json({"handed_over": True, "message": msg})
        else:
            _echo(msg)
        return
    _print_result(result, as_json)


def _hook_ingest(vault: str | None, config_file: Path | None) -> None:
    """Run from a git hook: log one line, never fail (the commit already happened)."""
    from ..index.hook_run import run_from_git_hook

    run_from_git_hook(vault, config_file)
    sys.exit(0)


@cli.command()
@vault_option
@click.option("--no-embed", is_flag=True, help="Rebuild text only; leave vectors in the backlog.")
@json_option
def rebuild(vault: str | None, no_embed: bool, as_json: bool) -> None:
    """Re-derive the whole index from HEAD and delete everything stale.

    Resumable: after an interruption, running it again skips the notes already done. Vectors
    already computed for the same text and model are reused, so only a model change re-embeds.
    """
    from ..index import ingest as ingest_mod

    root = _vault_root(vault)
    settings = load_settings(root)
    with _ProgressBar(not as_json) as bar:
        result = ingest_mod.rebuild(settings, root, embed=not no_embed, progress=bar)
    _print_result(result, as_json)


@cli.command()
@json_option
def gc(as_json: bool) -> None:
    """Delete derived rows nothing refers to: cached vectors of text no note holds any more,
    search words no chunk holds. Covers every vault of the database; `rebuild` prunes the
    vectors too."""
    from .. import store
    from ..store import db

    settings = _settings()
    with db.connect(settings, start=_writer_start(settings)) as conn:
        db.require_schema(conn)
        with conn.transaction():
            removed = store.collect_garbage(conn)
    if as_json:
        _print_json(removed)
    else:
        _echo(
            f"removed {removed['embedding_cache']} unused cached vectors and "
            f"{removed['lexicon']} unused search words"
        )


@cli.command()
@vault_option
@click.option("--deep", is_flag=True, help="Also re-parse every note and compare its chunks.")
@json_option
def verify(vault: str | None, deep: bool, as_json: bool) -> None:
    """Compare the index with the notes at HEAD; exit 8 if they differ (drift).

    Reports notes missing from the index, ghosts (indexed but gone from HEAD), notes indexed at
    an older version, every skipped file with its reason, and the embedding backlog.
    """
    from ..errors import DriftDetected
    from ..index.verify import verify as run_verify

    root = _vault_root(vault)
    report = run_verify(load_settings(root), root, deep=deep)
    if as_json:
        _print_json(report.to_dict())
    else:
        behind = report.commits_behind
        _echo(
            f"HEAD {str(report.head)[:12]}, indexed to {str(report.watermark)[:12]}"
            + (f" ({behind} commits behind)" if behind > 0 else "")
            + f"; {report.notes} notes, {report.quarantined} quarantined, "
            f"{len(report.skipped)} skipped, {report.backlog} chunks awaiting embeddings"
        )
        for s in report.skipped:
            _echo(f"  skipped {s['path']!r}: {s['reason']}")
        for w in report.warnings:
            _echo(f"  indexed with a warning {w['path']!r}: {'; '.join(w['warnings'])}")
        for label, items in (
            ("missing", report.missing),
            ("ghost", report.ghosts),
            ("outdated", report.outdated),
            ("misfiled", report.wrong_kind),
            ("chunks differ", report.chunk_mismatch),
        ):
            for p in items:
                _echo(f"  {label}: {p!r}")
        if report.rechunk_due:
            _echo(f"  chunks: {_RECHUNK_HINT}")
        _echo(
            "drift: run `vaultmem ingest` (or `vaultmem rebuild`) to repair"
            if report.drift
            else "no drift"
        )
    if report.drift:
        raise DriftDetected("the index differs from the notes committed at HEAD")


def _claude_options(f: Any) -> Any:
    """--claude with its scope (--project / --user) and --project-dir."""
    f = click.option(
        "--no-mcp",
        is_flag=True,
        help="With --claude: leave the MCP server (`vaultmem mcp`) out; only the hook.",
    )(f)
    f = click.option(
        "--project-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="With --claude --project: the project root. Default: the git work tree around "
        "the current directory, else the current directory.",
    )(f)
    f = click.option(
        "--user", "scope", flag_value="user", help="With --claude: ~/.claude/settings.json."
    )(f)
    f = click.option(
        "--shared",
        "scope",
        flag_value="shared",
        help="With --claude: the project's .claude/settings.json, the file teams commit (the "
        "command is then `vaultmem claude-hook` from PATH, no path of this machine).",
    )(f)
    f = click.option(
        "--project",
        "scope",
        flag_value="project",
        help="With --claude: the project's .claude/settings.local.json, git-ignored (the default).",
    )(f)
    return click.option(
        "--claude",
        is_flag=True,
        help="The Claude Code per-prompt hook (UserPromptSubmit in settings.json), "
        "not the git hooks.",
    )(f)


def _claude_scope(
    claude: bool, scope: str | None, project_dir: Path | None, no_mcp: bool = False
) -> tuple[str, Path]:
    """The settings scope and project directory for --claude; a usage error without it."""
    if not claude:
        if scope is not None or project_dir is not None or no_mcp:
            raise click.UsageError(
                "--project, --shared, --user, --project-dir and --no-mcp go with --claude"
            )
        return "", Path()
    from ..errors import NotAGitRepo
    from ..index.gitdiff import repo_root

    if project_dir is None:
        try:
            project_dir = repo_root(Path.cwd())
        except NotAGitRepo:
            project_dir = Path.cwd()
    return scope or "project", project_dir


@cli.group(name="hooks")
def hooks_group() -> None:
    """Install, remove or inspect the hooks: the git hooks that index each commit, and
    (with --claude) the Claude Code hook that adds relevant notes to every prompt."""


@hooks_group.command(name="install")
@vault_option
@_claude_options
@click.option(
    "--force",
    is_flag=True,
    help="Write the git hooks even into a core.hooksPath folder inside the work tree.",
)
def hooks_install(
    vault: str | None,
    claude: bool,
    scope: str | None,
    project_dir: Path | None,
    force: bool,
    no_mcp: bool,
) -> None:
    """Add vaultmem to post-commit, post-merge, post-rewrite, post-checkout and
    reference-transaction (which sees `git reset` and other moves of HEAD).

    A hook you already have is kept unchanged and still runs, first, with the same arguments
    and input (vaultmem chains it; `uninstall` puts it back). Honours core.hooksPath, but
    refuses to write this machine's paths into a hooks folder inside the work tree unless
    --force. Records this Python's absolute path so hooks work from GUI git clients, then
    catches up, in the background, whatever was committed while the hooks were off. Safe to
    run again.

    The vault is registered (if it is not yet) with the index this environment names, and the
    hooks record your vaultmem config file, so a commit from any environment (a GUI client,
    an IDE, `env -i`) updates that same index.

    With --claude: register `vaultmem claude-hook` as a UserPromptSubmit hook in the project's
    .claude/settings.local.json (--project, the default: per user, git-ignored),
    .claude/settings.json (--shared, committed by teams) or ~/.claude/settings.json (--user),
    merged without touching other hooks or settings. For one session only, use
    bin/agent-with-memory. The MCP server `vaultmem mcp` (tools search, get, recent,
    status) is registered too, in your ~/.claude.json as `claude mcp add` does (--user:
    user scope; --project and --shared: local scope, this project only), never in the
    committed .mcp.json; --no-mcp leaves it out. --vault NAME makes it serve that vault.
    """
    from .. import vaults
    from ..index import git_hooks

    scope, project_dir = _claude_scope(claude, scope, project_dir, no_mcp)
    if claude:
        from ..agent.claude_settings import install_claude_hook

        path = install_claude_hook(scope, project_dir)
        _echo(f"Claude Code UserPromptSubmit hook registered in {path}")
        if not no_mcp:
            from ..agent.claude_mcp import claude_mcp_add_command, install_mcp_server

            mcp_scope, where = install_mcp_server(scope, project_dir, vault=vault)
            _echo(
                f"Claude Code MCP server `vaultmem` registered ({mcp_scope} scope) in {where}; "
                f"the same as: {claude_mcp_add_command(scope, vault)}"
            )
        return
    root = _vault_root(vault)
    entry, _ = _register(root)
    _echo(f"vault registered: {entry.name} = {entry.path}")
    for path in git_hooks.install(root, config=vaults.config_path(), force=force):
        chained = path.with_name(path.name + git_hooks.USER_SUFFIX).exists()
        _echo(f"installed {path}" + (" (your own hook runs first)" if chained else ""))
    from ..index.freshness import start_catch_up

    if start_catch_up(root, vaults.config_path()):
        _echo("catching up in the background (`vaultmem status` shows progress)")


@hooks_group.command(name="uninstall")
@vault_option
@_claude_options
def hooks_uninstall(
    vault: str | None, claude: bool, scope: str | None, project_dir: Path | None, no_mcp: bool
) -> None:
    """Remove vaultmem's block from the hooks, keeping anything else in them.

    With --claude: remove the UserPromptSubmit hook from the scope's settings.json instead,
    and the MCP server from the matching scope of ~/.claude.json (a local-scope server stays
    while the project's other settings file still registers the hook; --no-mcp keeps it).
    """
    from ..index import git_hooks

    scope, project_dir = _claude_scope(claude, scope, project_dir, no_mcp)
    if claude:
        from ..agent.claude_settings import claude_hook_status, uninstall_claude_hook

        path, removed_hook = uninstall_claude_hook(scope, project_dir)
        _echo(
            f"Claude Code hook removed from {path}"
            if removed_hook
            else f"no vaultmem Claude Code hook in {path}"
        )
        sibling = {"project": "shared", "shared": "project"}.get(scope)
        if not no_mcp and not (sibling and claude_hook_status(sibling, project_dir).installed):
            from ..agent.claude_mcp import uninstall_mcp_server

            mcp_scope, dropped = uninstall_mcp_server(scope, project_dir)
            _echo(
                f"Claude Code MCP server removed ({mcp_scope} scope)"
                if dropped
                else f"no vaultmem MCP server registered ({mcp_scope} scope)"
            )
        return
    root = _vault_root(vault)
    removed = git_hooks.uninstall(root)
    _echo("\n".join(f"removed from {p}" for p in removed) or "no vaultmem hooks installed")


@hooks_group.command(name="status")
@vault_option
@click.option(
    "--claude", "claude_only", is_flag=True, help="Only the Claude Code hook (works anywhere)."
)
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The project whose .claude/settings.json to check. Default: as for install.",
)
@json_option
def hooks_status(
    vault: str | None, claude_only: bool, project_dir: Path | None, as_json: bool
) -> None:
    """Show which hooks are installed and whether their interpreter still exists.

    Lists the git hooks of the vault, then the Claude Code hook in the project's and in your
    user settings.json. Exit 1 when a git hook is missing (the Claude Code hook is optional).
    """
    from ..agent.claude_mcp import mcp_server_status
    from ..agent.claude_settings import claude_hook_status
    from ..index import git_hooks

    _, project_dir = _claude_scope(True, None, project_dir)
    claude = [
        claude_hook_status("project", project_dir),
        claude_hook_status("shared", project_dir),
        claude_hook_status("user"),
    ]
    servers = [mcp_server_status("local", project_dir), mcp_server_status("user")]
    items = [] if claude_only else git_hooks.status(_vault_root(vault))
    if as_json:
        _print_json(
            [{**h.__dict__, "path": str(h.path)} for h in items]
            + [{"name": "claude-code", **c.__dict__, "path": str(c.path)} for c in claude]
            + [{"name": "claude-mcp", **m.__dict__, "path": str(m.path)} for m in servers]
        )
    else:
        for h in items:
            state = "installed" if h.installed else "not installed"
            if h.problem:
                state = f"NOT RUN: {h.problem}: run `vaultmem hooks install` to chain it"
            if h.installed and not h.interpreter_ok:
                state += " (its Python is gone: run `vaultmem hooks install` again)"
            if h.installed and h.other_content:
                state += " (after your own hook)"
            _echo(f"{h.name}: {state}  {h.path}")
        for c in claude:
            if c.problem:
                state = f"unreadable: {c.problem}"
            elif not c.installed:
                state = "not installed"
            elif c.executable_ok:
                state = f"installed ({c.command})"
            else:
                state = (
                    f"installed but its program is gone ({c.command}): run "
                    f"`vaultmem hooks install --claude --{c.scope}` again"
                )
            _echo(f"claude-code ({c.scope}): {state}  {c.path}")
        for m in servers:
            if m.problem:
                state = f"unreadable: {m.problem}"
            elif not m.installed:
                state = "not registered"
            elif m.executable_ok:
                state = f"registered ({m.command})"
            else:
                hook_scope = "user" if m.scope == "user" else "project"
                state = (
                    f"registered but its program is gone ({m.command}): run "
                    f"`vaultmem hooks install --claude --{hook_scope}` again"
                )
            _echo(f"claude-mcp ({m.scope}): {state}  {m.path}")
    if not all(h.installed for h in items):
        sys.exit(1)


# --- audit: review what was quarantined as sensitive ----------------------------------------


@cli.group(name="audit")
def audit_group() -> None:
    """Review the files kept out of search as sensitive: list, show, allow, revoke.

    A file with any hit (a secret, a password line, `private: true`, a secret file name) is
    never indexed nor sent to an embedding provider. vaultmem records why (rule ids, line
    numbers), never the secret itself; `show` re-reads the file and prints each match masked.
    """


def _audit_target(vault: str | None, path: str | None = None) -> tuple[Path, Settings, str]:
    from ..index import audit

    root = _vault_root(vault)
    rel = audit.vault_path(root, path) if path is not None else ""
    return root, load_settings(root), rel


@audit_group.command(name="list")
@vault_option
@json_option
def audit_list(vault: str | None, as_json: bool) -> None:
    """List the quarantined files with their risk, rules and line numbers, and the allowed ones.

    --json prints {"quarantined": [...], "allowed": [...]}.
    """
    from ..index import audit
    from ..store import db

    root, settings, _ = _audit_target(vault)
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, root)
        quarantined = audit.list_quarantined(conn, v.id)
        allowed = audit.list_allowed(conn, v.id)
    if as_json:
        _print_json(
            {
                "quarantined": [q.to_dict() for q in quarantined],
                "allowed": [a.to_dict() for a in allowed],
            }
        )
        return
    if not quarantined:
        _echo(f"nothing quarantined in vault {v.name}")
    else:
        _echo(f"{len(quarantined)} quarantined in vault {v.name}:")
    for q in quarantined:
        lines = ", ".join(str(n) for n in q.line_numbers if n) or "-"
        extra = " (an earlier version was allowed, edited since)" * q.allowed_earlier_version
        _echo(f"  {_audit_path(q.path)}  [{q.risk}] {', '.join(q.rule_ids)}; lines {lines}{extra}")
    if allowed:
        _echo(f"{len(allowed)} allowed after review:")
        for a in allowed:
            when = f"{a.allowed_at:%Y-%m-%d %H:%M}"
            _echo(f"  {_audit_path(a.path)}  ({a.state}; allowed {when})")
    if quarantined:
        _echo("why: `vaultmem audit show PATH`; a false positive: `vaultmem audit allow PATH`")


@audit_group.command(name="show")
@click.argument("path")
@vault_option
@json_option
def audit_show(path: str, vault: str | None, as_json: bool) -> None:
    """Show why PATH is quarantined: each rule, category and line, with the match masked.

    PATH is relative to the vault root (as `audit list` prints it) or to the current directory.
    The file is re-scanned from HEAD to make the masked previews; no secret is ever printed.
    """
    from ..index import audit
    from ..store import db

    root, settings, rel = _audit_target(vault, path)
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, root)
        detail = audit.show(conn, settings, v, rel)
    if as_json:
        _print_json(detail.to_dict())
        return
    allowed = ""
    if detail.allowed_blob_sha:
        allowed = f"; an earlier version was allowed {detail.allowed_at:%Y-%m-%d %H:%M}"
    _echo(
        f"{_audit_path(detail.path)}: {detail.risk}, quarantined since "
        f"{detail.first_seen_at:%Y-%m-%d %H:%M} (blob {detail.blob_sha[:12]}){allowed}"
    )
    for f in detail.findings:
        where = f"line {f.line}" if f.line else "file"
        _echo(f"  {where:<10} {f.rule_id} ({f.category})  {f.masked}".rstrip())
    if detail.notice:
        _echo(f"note: {detail.notice}")
    _echo(f"if this is a false positive: vaultmem audit allow {_audit_path(detail.path)}")


@audit_group.command(name="allow")
@click.argument("path", required=False)
@click.option(
    "--rule",
    metavar="RULE",
    help="Allow every quarantined file (under the glob PATH, default all) whose findings all "
    "come from RULE: a reviewed false-positive rule, in bulk.",
)
@click.option("--yes", is_flag=True, help="Do not ask before allowing a real-looking credential.")
@vault_option
@json_option
def audit_allow(
    path: str | None, rule: str | None, yes: bool, vault: str | None, as_json: bool
) -> None:
    """Mark quarantined PATH a reviewed false positive and index it now.

    The decision is bound to the file's current version at HEAD: any later edit is scanned
    again (and quarantined if it still hits). It survives `vaultmem rebuild`; undo it with
    `vaultmem audit revoke PATH`. A file whose findings include a credential beyond doubt (a
    private key, a vendor token) is allowed only after you confirm (or with --yes).
    """
    from ..errors import ConfirmationRequired
    from ..index import audit
    from ..store import db
    from ..terminal import clean

    if path is None and rule is None:
        raise click.UsageError("give a PATH, or --rule RULE (with an optional PATH glob)")
    root, settings, rel = _audit_target(vault, None if rule else path)

    def run(confirmed: bool) -> Any:
        with db.connect(settings, start=_writer_start(settings)) as conn:
            v = audit.require_vault(conn, root)
            if rule:
                return audit.allow_rule(
                    conn, v, rule, path or "*", root, settings=settings, yes=confirmed
                )
            return audit.allow(conn, v, rel, root, settings=settings, yes=confirmed)

    try:
        outcome = run(yes)
    except ConfirmationRequired as exc:
        click.confirm(f"{clean(str(exc))}. Index it anyway?", abort=True, err=True)
        outcome = run(True)
    if isinstance(outcome, audit.BulkAllow):
        if as_json:
            _print_json(outcome.to_dict())
            return
        _echo(f"allowed {len(outcome.allowed)} files quarantined only by {clean(rule or '')}")
        for d in outcome.allowed:
            _echo(f"  {_audit_path(d.path)} at blob {str(d.blob_sha)[:12]}: {d.state}")
        for p, other in sorted(outcome.not_allowed.items()):
            _echo(f"  not allowed {_audit_path(p)}: also {', '.join(other)}")
        return
    if as_json:
        _print_json(outcome.to_dict())
        return
    _echo(
        f"allowed {_audit_path(outcome.path)} at blob {str(outcome.blob_sha)[:12]}: {outcome.state}"
    )


@audit_group.command(name="revoke")
@click.argument("path")
@vault_option
def audit_revoke(path: str, vault: str | None) -> None:
    """Withdraw `audit allow` for PATH: it is scanned again now and quarantined if it hits."""
    from ..index import audit
    from ..store import db

    root, settings, rel = _audit_target(vault, path)
    with db.connect(settings, start=_writer_start(settings)) as conn:
        v = audit.require_vault(conn, root)
        decision = audit.revoke(conn, v, rel, root, settings=settings)
    _echo(f"revoked the review of {_audit_path(decision.path)}: {decision.state}")


# --- init and status -------------------------------------------------------------------------


def _register(root: Path, name: str | None = None) -> tuple[Any, Settings]:
    """Record `root` in the user's registry (see `registration.register`)."""
    from ..index.registration import register

    return register(root, name)


@cli.command()
@vault_option
@click.option("--name", help="The vault's name in the registry. Default: its folder's name.")
@click.option("--no-hooks", is_flag=True, help="Do not install the git hooks.")
@click.option("--no-index", is_flag=True, help="Do not index the notes now.")
def init(vault: str | None, name: str | None, no_hooks: bool, no_index: bool) -> None:
    """Set up a vault: registration, database, schema, git hooks, first index.

    Registers the vault in your user config (the first one becomes the default vault that
    the agent wrapper and the Claude Code hook read from any directory), starts the bundled
    database if no VAULTMEM_DATABASE_URL is set, applies schema.sql, installs the git hooks and
    indexes the notes at HEAD (text first, then vectors, with a progress bar). Safe to run
    again: it changes nothing that is already in place.
    """
    from .. import vaults
    from ..store import db

    root = _vault_root(vault)
    entry, settings = _register(root, name)
    with db.connect(settings, start=True) as conn:
        applied = db.apply_schema(conn)
        v = db.register_vault(conn, root)
        info = db.server_info(conn)
    if applied:
        _echo(f"schema applied (version {db.SCHEMA_VERSION})")
    else:
        _echo(f"schema up to date (version {db.SCHEMA_VERSION})")
    default = vaults.load().default_vault()
    is_default = (
        " (the default vault)" if default is not None and default.name == entry.name else ""
    )
    _echo(f"vault registered: {entry.name} = {v.root}{is_default} in {vaults.config_path()}")
    _echo(f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}")
    if not no_hooks:
        from ..errors import ConfigError
        from ..index import git_hooks

        try:
            git_hooks.install(root, config=vaults.config_path())
            _echo(f"git hooks installed in {git_hooks.hooks_dir(root)}")
        except ConfigError as exc:
            _echo(f"git hooks NOT installed: {exc}", err=True)
    if not no_index:
        from ..index import ingest as ingest_mod

        # Text first, in the foreground: the vault is searchable by full text when init ends.
        with _ProgressBar(True) as bar:
            result = ingest_mod.catch_up(settings, root, progress=bar, wait=True, embed=False)
        if result is not None:
            _print_result(result, False)
        _start_vectors(settings, root)


def _start_vectors(settings: Settings, root: Path) -> None:
    """Measure the embedding rate on a few chunks, then leave the rest of the backlog to one
    background drainer that survives the terminal closing; say so in one line, with an ETA."""
    from .. import vaults
    from ..index import ingest as ingest_mod
    from ..index.freshness import start_catch_up

    sample = ingest_mod.sample_embedding_rate(settings, root)
    if sample.backlog == 0:
        _echo("vectors: every chunk has its vector")
        return
    eta = ""
    if sample.embed_rate:
        eta = f", about {_duration(sample.backlog / sample.embed_rate)} at "
        eta += f"{sample.embed_rate:.1f} chunks/s"
    started = start_catch_up(root, vaults.config_path())
    where = "in the background" if started else "by the ingester already running"
    _echo(
        f"vectors: {sample.backlog} chunks to embed {where}{eta}; full-text search works "
        "meanwhile; `vaultmem status` shows progress"
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


# --- the registry of vaults ------------------------------------------------------------------


@cli.group(name="vaults")
def vaults_group() -> None:
    """The registered vaults: the only places the agent's memory comes from.

    They live in your user config (`vaultmem vaults list` shows where). `vaultmem init`
    registers a vault; the first one is the default, which the agent wrapper and the Claude
    Code hook read from any directory (inside another registered vault, that one is read).
    """


@vaults_group.command(name="list")
@json_option
def vaults_list(as_json: bool) -> None:
    """List the registered vaults, the default one, and the index each one uses."""
    from .. import vaults

    config = vaults.load()
    default = config.default_vault()
    rows = [
        {**v.to_dict(), "default": default is not None and v.name == default.name}
        for v in config.vaults
    ]
    if as_json:
        _print_json({"config": str(config.path), "vaults": rows})
        return
    if not rows:
        _echo(f"no vault registered ({config.path}): `vaultmem init --vault PATH`")
        return
    for r in rows:
        where = r["database_url"] or (f"bundled database in {r['home']}" if r["home"] else "")
        mark = "* " if r["default"] else "  "
        _echo(f"{mark}{r['name']}  {r['path']}" + (f"  ({where})" if where else ""))
    _echo(f"(* = default; registry: {config.path})")


@vaults_group.command(name="add")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("--name", help="The vault's name. Default: its folder's name.")
def vaults_add(path: Path, name: str | None) -> None:
    """Register the git work tree at PATH without indexing it (`vaultmem init` does both)."""
    from ..index.gitdiff import repo_root

    entry, _ = _register(repo_root(path), name)
    _echo(f"registered {entry.name} = {entry.path}")


@vaults_group.command(name="remove")
@click.argument("name")
@click.option("--purge", is_flag=True, help="Also delete its rows from the database.")
def vaults_remove(name: str, purge: bool) -> None:
    """Unregister vault NAME: no agent reads it and its git hooks stop indexing it."""
    from .. import vaults
    from ..store import db

    settings = None
    entry = vaults.load().get(name)
    if entry is not None and purge:
        settings = load_settings(entry.path)
    removed = vaults.unregister(name)
    _echo(f"unregistered {removed.name} ({removed.path})")
    if purge and settings is not None:
        with db.connect(settings, start=_writer_start(settings)) as conn:
            db.delete_vault(conn, removed.path)
            conn.commit()
        _echo("its index was deleted from the database")
    else:
        _echo(
            "its index stays in the database (`--purge` deletes it); "
            "`vaultmem hooks uninstall --vault PATH` removes its git hooks"
        )


@vaults_group.command(name="default")
@click.argument("name")
def vaults_default(name: str) -> None:
    """Make NAME the default vault (read from directories outside every registered vault)."""
    from .. import vaults

    entry = vaults.set_default(name)
    _echo(f"default vault: {entry.name} ({entry.path})")


@cli.command()
@json_option
def status(as_json: bool) -> None:
    """Show the database, the schema version and, for every vault, its counts, how far the
    index is behind HEAD, the embedding backlog, the last run's outcome and every skipped file.
    """
    from ..index.verify import vault_status
    from ..store import db

    settings = _settings()
    with db.connect(settings) as conn:
        info = db.server_info(conn)
        version = db.schema_version(conn)
        vaults = [vault_status(conn, v) for v in db.vault_stats(conn)] if version else []
    data = {
        "database": "external" if settings.database_url else "bundled",
        "reachable": True,
        **info,
        "schema_version": version,
        "vaults": [v.to_dict() for v in vaults],
    }
    if as_json:
        _print_json(data)
        return
    _echo(f"database: {data['database']}, reachable")
    _echo(f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}")
    _echo(f"schema version: {version or 'none (run `vaultmem init`)'}")
    for v in vaults:
        _echo(
            f"vault {v.name} ({v.root}): {v.notes} notes, {v.chunks} chunks, "
            f"{v.backlog} awaiting embeddings, {v.quarantined} quarantined, "
            f"{len(v.skipped_files)} skipped"
        )
        _echo_vault_health(v)


def _embedding_line(v: VaultStatus) -> str:
    """Which model the vectors come from, the backlog, and an ETA from the last run's rate."""
    model = v.model_id or "none yet"
    backlog = v.backlog
    line = f"model {model}; {backlog} chunks awaiting vectors"
    configured = v.configured_model_id
    if configured and configured != v.model_id:
        line = f"model {model}, settings now name {configured}: the next ingest re-embeds"
    live = v.embedding_progress
    if live is not None:
        done, total, rate = live.get("done", 0), live.get("total", 0), live.get("rate")
        line += f"; embedding now (pid {live.get('pid')}): {done} of {total} done"
        if rate:
            line += f", {rate:.1f} chunks/s, about {_duration(backlog / rate)} left"
        return line
    run = v.last_run or {}
    embedded, secs = run.get("embedded") or 0, run.get("embed_seconds") or 0
    if backlog:
        line += "; no drainer is running: `vaultmem ingest` (or the next commit) resumes it"
        if embedded and secs:
            rate = embedded / secs
            line += f" (about {_duration(backlog / rate)} at the last run's {rate:.1f} chunks/s)"
    return line


_RECHUNK_HINT = (
    "built by another vaultmem version or chunk size; run `vaultmem ingest` to re-chunk every"
    " note (unchanged chunks keep their vectors)"
)


def _config_path() -> Path:
    from .. import vaults

    return vaults.config_path()


def _echo_vault_health(v: VaultStatus) -> None:
    """The lines of `status` that make a silent failure visible."""
    mark, head, behind = (v.watermark or "")[:12], (v.head or "")[:12], v.commits_behind
    if v.problem:
        where = f"indexed to {mark or 'nothing yet'}; {v.problem}"
    elif not v.head:
        where = "no commits yet"
    elif behind == 0:
        where = f"indexed to {mark} = HEAD" + ("" if v.rechunk_due else " (up to date)")
    elif behind is not None and behind > 0:
        where = f"BEHIND: indexed to {mark}, HEAD is {head}, {behind} commits behind"
    elif mark:
        where = f"BEHIND: indexed to {mark}, which is not in HEAD's history (HEAD is {head})"
    else:
        where = f"BEHIND: nothing indexed yet, HEAD is {head}"
    if behind:
        where += ": run `vaultmem ingest`"
    _echo(f"  index: {where}")
    if not v.registered:
        _echo(
            "  registry: not a registered vault, so no agent reads it "
            "(`vaultmem init --vault PATH` registers it)"
        )
    if v.ignored_vault_env:
        _echo(
            f"  settings: ignored in the vault's .env: {', '.join(v.ignored_vault_env)} (a "
            "vault's .env may set indexing options only; put the rest in the environment or "
            f"{_config_path()})"
        )
    if v.rechunk_due:
        _echo(f"  chunks: {_RECHUNK_HINT}")
    run = v.last_run
    if run:
        order = ("added", "updated", "unchanged", "deleted", "renamed", "quarantined", "skipped")
        got = run.get("counts") or {}
        counts = ", ".join(f"{got[k]} {k}" for k in order if k in got)
        errors = run.get("errors") or []
        outcome = f"FAILED: {'; '.join(errors)}" if errors else "ok"
        _echo(
            f"  last run: {run.get('finished_at')} {run.get('mode')} "
            f"to {str(run.get('to_commit') or '')[:12]} in {run.get('seconds')} s, {outcome}; "
            f"{counts}; {run.get('embedded', 0)} chunks embedded, "
            f"{run.get('backlog', 0)} awaiting embeddings"
        )
    else:
        _echo("  last run: none recorded")
    _echo(f"  embeddings: {_embedding_line(v)}")
    hook = v.hook_log_last
    if hook and " error" in hook:
        _echo(f"  last hook: {hook}")
    for s in v.skipped_files:
        _echo(f"  skipped {s['path']!r}: {s['reason']}")
    for w in v.warnings:
        _echo(f"  indexed with a warning {w['path']!r}: {'; '.join(w['warnings'])}")


# --- retrieval and Claude Code: query, context, claude-hook -------------------------------


def _registered_vault(conn: Any, root: Path) -> Any:
    from ..store import db

    v = db.find_vault(conn, root)
    if v is None:
        raise VaultmemError(f"{root} is not an indexed vault yet: run `vaultmem init` in it")
    return v


@cli.command(name="query")
@click.argument("text")
@click.option(
    "--k",
    "k",
    default=5,
    show_default=True,
    type=click.IntRange(1, 100),
    help="How many notes to return.",
)
@json_option
@click.option(
    "--explain",
    is_flag=True,
    help="Show each hit's score breakdown and evidence, and what the relevance gate dropped.",
)
@click.option("--path", "path_prefix", metavar="PREFIX", help="Only notes under this path prefix.")
@click.option("--tag", help="Only notes with this tag.")
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "vector", "lexical"]),
    default="hybrid",
    show_default=True,
    help="Retrievers to use.",
)
@vault_option
def query_cmd(
    text: str,
    k: int,
    as_json: bool,
    explain: bool,
    path_prefix: str | None,
    tag: str | None,
    mode: str,
    vault: str | None,
) -> None:
    """Search the vault's notes: one hit (its best chunk) per note, best first.

    Hybrid mode fuses vector similarity and full-text search (Chinese and Japanese included).
    What it prints is what `vaultmem context` and the Claude Code hook would inject: the
    relevance gate drops notes without enough evidence (VAULTMEM_GATE moves it; --explain shows
    what it dropped and why). Content-free prompts ("ok continue", "好的繼續") return nothing.
    """
    from .. import store
    from ..embed import get_embedder
    from ..index.freshness import fresh_hits
    from ..search import query
    from ..store import db
    from ..vaults import NO_VAULT_HINT

    entry = _reading_vault(vault)
    if entry is None:
        from ..errors import ConfigError

        raise ConfigError(NO_VAULT_HINT)
    root = entry.path
    settings = load_settings(root)
    embedder = get_embedder(settings)
    with db.connect(settings) as conn:
        v = _registered_vault(conn, root)
        verdicts = query.judge(
            conn,
            v.id,
            text,
            embedder,
            k=k,
            path_prefix=path_prefix,
            tag=tag,
            mode=mode,
            min_score=settings.min_score,
            gate_level=settings.gate,
        )
        kept = [x.hit for x in verdicts if x.kept]
        hits = fresh_hits(conn, v.id, root, store.state(conn, v.id).watermark, kept)
    # A kept hit that fresh_hits removed is a note HEAD no longer holds: not shown at all.
    dropped = [
        (x.hit, x.drop)
        for x in verdicts
        if x.drop is not None and x.drop is not query.Drop.BEYOND_K
    ]
    if as_json:
        rows = [
            {
                **h.breakdown(),
                "heading": h.heading,
                "title": h.title,
                "tags": list(h.tags),
                "text": h.text,
            }
            for h in hits
        ]
        if explain:
            _print_json(
                {
                    "hits": rows,
                    "dropped": [
                        {**h.breakdown(), "heading": h.heading, "drop": drop.value}
                        for h, drop in dropped
                    ],
                }
            )
        else:
            _print_json(rows)
        return
    if not hits:
        _echo("no relevant notes", err=True)
    for i, h in enumerate(hits, 1):
        where = f"{_path(h.path)} › {_path(h.heading)}" if h.heading else _path(h.path)
        _echo(f"{i}. {where}  [{h.score:.3f}]")
        snippet = " ".join(h.text.split())
        _echo(f"   {snippet[:160]}{'…' if len(snippet) > 160 else ''}")
        if explain:
            _echo(f"   {_explain_line(h)}")
    if explain and dropped:
        need = query.fusion_for(embedder.model_id).min_evidence + settings.gate
        _echo(
            f"dropped by the relevance gate (a prompt needs one of its first "
            f"{query.GATE_WINDOW} notes at evidence >= {need:g}; VAULTMEM_GATE={settings.gate:g}):"
        )
        owed = max((h.generic_penalty for h, _ in dropped), default=0.0)
        if owed > 0:
            _echo(
                f"  this prompt reads like generic coding work (it resembles one of vaultmem's "
                f"generic requests): every note's evidence is {owed:.1f} lower"
            )
        reasons = {drop for _, drop in dropped}
        if len(reasons) == 1:  # say it once, not on every line
            _echo(f"  all: {_DROP_REASONS[dropped[0][1].value]}")
        for h, drop in dropped[:10]:
            why = "" if len(reasons) == 1 else f" {_DROP_REASONS[drop.value]}"
            _echo(f"-  {_path(h.path)}  [{h.score:.3f}]{why}")
            _echo(f"   {_explain_line(h)}")
        if len(dropped) > 10:
            _echo(f"   ... and {len(dropped) - 10} more")


_DROP_REASONS = {
    "no-evidence": "no note had enough evidence for this prompt",
    "below-min-score": "fused score under VAULTMEM_MIN_SCORE",
    "far-below-best": "fused score far below the best hit's",
    "beyond-k": "beyond --k",
}


def _explain_line(h: Any) -> str:
    """One hit's score breakdown: each retriever's rank and score, and the gate's evidence."""
    vec = (
        f"vector #{h.vector_rank} (cos {h.vector_score:.3f})"
        if h.vector_rank is not None
        else "vector imputed (not embedded yet)"
        if h.vector_imputed
        else "vector -"
    )
    lex = (
        f"lexical #{h.lexical_rank} (BM25 {h.lexical_score:.4f})"
        if h.lexical_rank is not None
        else "lexical imputed (other script)"
        if h.lexical_imputed
        else "lexical -"
    )

    def nats(x: float | None) -> str:
        return "-" if x is None or x == float("-inf") else f"{x:.1f}"

    generic = f", generic work -{h.generic_penalty:.1f}" if h.generic_penalty > 0 else ""
    return (
        f"{vec}; {lex}; {h.matched_terms} terms matched; evidence {nats(h.evidence)} "
        f"(words {nats(h.lexical_evidence)}, vector {nats(h.vector_evidence)}{generic}); "
        f"fused {h.fused:.5f}; commit {h.commit_sha[:7]}"
    )


@cli.command(name="context")
@click.argument("text", required=False, default="")
@click.option(
    "--max-chars",
    type=click.IntRange(0, None),
    default=None,
    help="Budget for the notes block. Default: VAULTMEM_CONTEXT_MAX_CHARS (2500).",
)
@click.option(
    "--memory/--no-memory",
    default=True,
    show_default=True,
    help="Include the standing preferences (MEMORY.md) block first.",
)
@click.option("--memory-only", is_flag=True, help="Print only the preferences block.")
@click.option(
    "--fail-open",
    is_flag=True,
    help="On any error or timeout print nothing and exit 0 (for scripts).",
)
@click.option(
    "--timeout",
    type=float,
    default=10.0,
    show_default=True,
    help="With --fail-open: give up after this many seconds.",
)
@click.option(
    "--record-as",
    type=click.Choice(["wrapper"]),
    default=None,
    hidden=True,
    help="Record what is printed in the injection log as this source (bin/agent-with-memory).",
)
@vault_option
def context_cmd(
    text: str,
    max_chars: int | None,
    memory: bool,
    memory_only: bool,
    fail_open: bool,
    timeout: float,
    record_as: str | None,
    vault: str | None,
) -> None:
    """Print the context block for TEXT: preferences, then relevant notes, fenced as data.

    This is exactly what the agent receives. Prints nothing when there is nothing relevant.
    Reads the registered vault holding the current directory, else the default vault
    (`vaultmem vaults list`); with no vault registered, only your own preferences file. Why
    something was not loaded (a quarantined MEMORY.md, no vault) goes to stderr.
    """
    from ..agent import context
    from ..agent.claude_hook import quiet_openmp
    from ..vaults import NO_VAULT_HINT

    # One query to embed: spinning OpenMP threads only cost time (see claude_hook.py).
    quiet_openmp()
    notices: list[str] = []

    def build() -> str:
        entry = _reading_vault(vault)
        if entry is None:
            notices.append(NO_VAULT_HINT)
        root = entry.path if entry is not None else None
        settings = load_settings(root)
        result = context.build_context(
            settings,
            text,
            vault_root=root,
            include_memory=memory,
            include_notes=not memory_only,
            max_chars=max_chars,
        )
        notices.extend(result.notices)
        if record_as:
            from ..agent import injections
            from ..config import user_home

            injections.record(
                user_home(),
                enabled=settings.log_injections,
                keep_prompt=settings.log_prompts,
                source=record_as,
                vault=entry.name if entry is not None else None,
                prompt=text,
                paths=result.paths,
                chars=len(result.text),
            )
        return result.text

    if not fail_open:
        out = build()
    else:
        result = context.run_bounded(build, timeout)
        out = result or ""
    for line in notices:
        _echo(f"vaultmem: {line}", err=True)
    if out:
        _echo(out)
    if fail_open:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # a timed-out worker may still hold a socket: do not wait for it


@cli.command(name="claude-hook")
@click.option(
    "--timeout",
    type=float,
    default=3.0,
    show_default=True,
    help="Give up (printing nothing) after this many seconds. Default: VAULTMEM_HOOK_TIMEOUT, "
    "else 3.",
)
@click.option(
    "--memory/--no-memory",
    default=True,
    show_default=True,
    help="Include the preferences block (the wrapper already puts it in the system "
    "prompt, so it passes --no-memory).",
)
def claude_hook(timeout: float, memory: bool) -> None:
    """Claude Code UserPromptSubmit hook: reads the hook JSON on stdin, prints the context.

    Claude Code adds a UserPromptSubmit hook's stdout (exit 0) to the model's context. Fails
    open: bad input, an unreachable database or a timeout print nothing and exit 0.
    Register it with `vaultmem hooks install --claude`.
    """
    # The `vaultmem` command runs hook.run without importing this module (see __main__.py);
    # this path serves `--help` and CliRunner.
    from ..agent.claude_hook import run

    run(timeout, memory)


@cli.command(name="claude-install", hidden=True)
@click.option("--project", "scope", flag_value="project", help="The project's settings (default).")
@click.option("--user", "scope", flag_value="user", help="Your ~/.claude/settings.json.")
@click.option(
    "--project-dir", type=click.Path(file_okay=False, path_type=Path), help="The project root."
)
@click.pass_context
def claude_install(ctx: click.Context, scope: str | None, project_dir: Path | None) -> None:
    """Old name of `vaultmem hooks install --claude` (kept so existing scripts work)."""
    ctx.invoke(
        hooks_install, vault=None, claude=True, scope=scope, project_dir=project_dir, no_mcp=False
    )


# --- the warm service, the MCP server and the injection log ------------------------------------


@cli.group(name="warm")
def warm_group() -> None:
    """The warm query service that keeps the model and a connection loaded for the per-prompt
    hook (p50 of tens of milliseconds instead of a cold process). The hook starts it on demand
    and it stops after VAULTMEM_WARM_IDLE seconds without a request; one runs per environment,
    on a 0600 unix socket in the vaultmem home."""


@warm_group.command(name="status")
@json_option
def warm_status(as_json: bool) -> None:
    """Is the warm service for this environment running, and how busy is it."""
    from ..agent import warm

    found = warm.status()
    if as_json:
        _print_json(found)
    elif not found.get("enabled"):
        _echo("warm service: off (VAULTMEM_WARM_IDLE=0): every prompt runs cold")
    elif found["running"]:
        _echo(
            f"warm service: running, pid {found['pid']}, {found['served']} requests served, "
            f"idle {found['idle_seconds']} s of {found['idle_limit']} s  {found['socket']}"
        )
    else:
        _echo("warm service: not running (the next prompt starts it, or `vaultmem warm start`)")


@warm_group.command(name="start")
def warm_start() -> None:
    """Start the warm service for this environment (if it is not running) and wait for it."""
    from ..agent import warm

    found = warm.start()
    if not found.get("enabled"):
        raise VaultmemError("the warm service is off: VAULTMEM_WARM_IDLE is 0")
    if not found["running"]:
        raise VaultmemError(
            "the warm service did not start: see the .log file next to its socket in "
            f"{found.get('socket', 'the vaultmem home')!s}"
        )
    _echo(f"warm service running, pid {found['pid']}")


@warm_group.command(name="stop")
def warm_stop() -> None:
    """Stop the warm service for this environment."""
    from ..agent import warm

    _echo("warm service stopped" if warm.stop() else "no warm service was running")


@warm_group.command(name="serve")
def warm_serve() -> None:
    """Run the warm service in the foreground (what the hook starts in the background)."""
    from ..agent import warm

    _echo(f"warm service ended: {warm.serve()}", err=True)


@cli.command(name="mcp")
@click.option(
    "--vault",
    "vault",
    type=str,
    help="A registered vault (name or path). Default: the registered vault holding the "
    "current directory, else VAULTMEM_VAULT, else the default vault.",
)
def mcp_cmd(vault: str | None) -> None:
    """Run the MCP server on stdio (for Claude Code): tools search, get, recent and status
    over your registered vault. `vaultmem hooks install --claude` registers it."""
    from ..agent.mcp_server import run

    run(vault)


@cli.command(name="log")
@click.option(
    "--last",
    "last",
    type=click.IntRange(1, None),
    default=20,
    show_default=True,
    help="How many of the latest injections to show.",
)
@json_option
def log_cmd(last: int, as_json: bool) -> None:
    """Show what the agents were given: every injection of the hook, the wrapper and the MCP
    tools (time, source, vault, prompt hash, paths, characters), newest last. Kept in the
    vaultmem home, at most ~2 MiB; never the note text (VAULTMEM_LOG_PROMPTS=1 keeps prompts)."""
    from ..agent import injections
    from ..config import user_home

    entries = injections.read(user_home(), last)
    if as_json:
        _print_json([e.to_dict() for e in entries])
        return
    if not entries:
        _echo("no injections recorded", err=True)
        return
    for e in entries:
        prompt = f" {e.prompt!r}" if e.prompt is not None else ""
        _echo(
            f"{e.time}  {e.source:<16} {e.vault or '-'}  prompt {e.prompt_sha256}{prompt}  "
            f"{e.chars} chars  {', '.join(e.paths)}"
        )


def main() -> None:
    cli()
