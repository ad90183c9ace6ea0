"""The agent's services: `warm` (the warm query service), `mcp` (the MCP server) and `log`
(what the agents were given).
"""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import VaultmemError
from .base import cli, display_path, echo, json_option, naming_mcp_tools, print_json


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
        print_json(found)
    elif not found.get("enabled"):
        echo("warm service: off (VAULTMEM_WARM_IDLE=0): every prompt runs cold")
    elif found["running"]:
        echo(
            f"warm service: running, pid {found['pid']}, {found['served']} requests served, "
            f"idle {found['idle_seconds']} s of {found['idle_limit']} s, second opinion "
            f"{found.get('second_opinion', 'off')}  {found['socket']}"
        )
    else:
        echo("warm service: not running (the next prompt starts it, or `vaultmem warm start`)")


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
    echo(f"warm service running, pid {found['pid']}")


@warm_group.command(name="stop")
def warm_stop() -> None:
    """Stop the warm service for this environment."""
    from ..agent import warm

    echo("warm service stopped" if warm.stop() else "no warm service was running")


@warm_group.command(name="serve")
def warm_serve() -> None:
    """Run the warm service in the foreground (what the hook starts in the background)."""
    from ..agent import warm

    echo(f"warm service ended: {warm.serve()}", err=True)


@cli.command(name="mcp")
@click.option(
    "--vault",
    "vault",
    type=str,
    help="A registered vault (name or path). Default: VAULTMEM_VAULT, else the registered "
    "vault holding the current directory, else the default vault.",
)
@naming_mcp_tools
def mcp_cmd(vault: str | None) -> None:
    """Run the MCP server on stdio (for Claude Code): tools {mcp_tools} over your registered
    vault. `vaultmem hooks install --claude` registers it."""
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
        print_json([e.to_dict() for e in entries])
        return
    if not entries:
        echo("no injections recorded", err=True)
        return
    for e in entries:
        # One record, one line: every field is shown escaped (a file name holding a newline
        # or an escape sequence prints as `\n` / `\x1b`, never as a line of its own).
        prompt = f" {display_path(repr(e.prompt))}" if e.prompt is not None else ""
        forms = {p: " (pointer)" for p in e.pointers} | {p: " (passage)" for p in e.passages}
        paths = ", ".join(display_path(p) + forms.get(p, "") for p in e.paths)
        if e.second_opinion:
            paths += "  (second opinion)"
        if e.left_out:
            paths += "  left out: " + "; ".join(display_path(x) for x in e.left_out)
        click.echo(
            f"{display_path(e.time)}  {display_path(e.source):<16} {display_path(e.vault or '-')}  "
            f"prompt {display_path(e.prompt_sha256 or '-')}{prompt}  {e.chars} chars  {paths}"
        )


@cli.command()
@click.argument("title")
@click.option("--file", "source", help="Read the note's text from this file (`-`: standard input).")
@click.option("--tag", "tags", multiple=True, help="A tag for the note (repeatable).")
@click.option("--folder", help="Folder in the vault (default: VAULTMEM_AGENT_FOLDER or agent/).")
@click.option("--append", is_flag=True, help="Add a dated entry to the note of this title.")
@click.option("--expect-blob", help="The blob id last read, to update an existing note.")
@click.option(
    "--vault",
    help="A registered vault (default: as for `vaultmem context`: VAULTMEM_VAULT, the "
    "registered vault holding the current directory, else the default vault).",
)
@json_option
def remember(
    title: str,
    source: str | None,
    tags: tuple[str, ...],
    folder: str | None,
    append: bool,
    expect_blob: str | None,
    vault: str | None,
    as_json: bool,
) -> None:
    """Write a scanned note as the agent and commit it, never touching the user's work.

    Only into a registered vault, never the repository you happen to be in: a code project is
    not memory. Refused, with nothing written, where the note would replace a file git does not
    show (untracked, ignored, skip-worktree), where its folder is a file, while a commit is in
    progress (index.lock), or where the file has uncommitted edits."""
    import os
    import sys

    from ..agent.write import Provenance
    from ..agent.write import remember as do_remember
    from ..index.hook_run import run_from_git_hook

    root = _writing_root(vault)
    if source is None or source == "-":
        text = sys.stdin.read()
    else:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    written = do_remember(
        root,
        title,
        text,
        tags=list(tags),
        folder=folder,
        append=append,
        expect_blob=expect_blob,
        provenance=Provenance(os.environ.get("CLAUDE_SESSION_ID"), os.getcwd()),
    )
    # commit-tree + update-ref run no hooks: start the same catch-up the post-commit hook does.
    run_from_git_hook(str(root), None)
    _log_write(root, written.path, len(text))
    if as_json:
        print_json({"path": written.path, "blob": written.blob, "commit": written.commit})
    else:
        echo(f"remembered {display_path(written.path)} ({written.commit[:12]})")


def _log_write(root: Path, path: str, chars: int) -> None:
    """Every agent write is in `vaultmem log`: the path and size, never the text."""
    from ..agent import injections
    from ..config import load_settings, user_home

    settings = load_settings(root)
    injections.record(
        user_home(),
        enabled=settings.log_injections,
        keep_prompt=False,
        source="cli-remember",
        vault=str(root),
        prompt="",
        paths=[path],
        chars=max(1, chars),
    )


def _writing_root(vault: str | None) -> Path:
    """The registered vault an agent write goes to (as a reader resolves it), never an
    unregistered repository."""
    from ..errors import ConfigError
    from ..index.gitdiff import repo_root
    from ..vaults import NO_VAULT_HINT
    from .base import reading_vault

    entry = reading_vault(vault)
    if entry is None:
        raise ConfigError(NO_VAULT_HINT)
    if entry.path is None:
        raise ConfigError(f"{entry.name} is a shared vault: the agent writes on its source")
    return repo_root(entry.path)


def _review_root(vault: str | None) -> Path:
    """The vault `inbox` reviews: the registered vault (VAULTMEM_VAULT, the one holding the
    current directory, the default), else the repository around the current directory."""
    from ..errors import ConfigError
    from .base import reading_vault, vault_root

    entry = reading_vault(vault)
    if entry is not None and entry.path is None:
        raise ConfigError(
            f"{entry.name} is a shared vault: its agent notes are reviewed on its source"
        )
    return entry.path if entry is not None else vault_root(vault)


@cli.group(name="inbox", invoke_without_command=True)
@click.option("--vault", help="The vault (default: as for `vaultmem context`).")
@json_option
@click.pass_context
def inbox_group(ctx: click.Context, vault: str | None, as_json: bool) -> None:
    """List the notes the agent wrote since you last looked (`vaultmem inbox done`): path,
    title, session, commit and date, newest first, read from the vault's git history (commits
    by the agent's author or with the `Vaultmem-Agent:` trailer). Keep a note as it is, edit
    it, or discard it with `git revert COMMIT` or `git rm PATH`; a note you removed leaves the
    inbox. What you have seen is kept in your vaultmem home, never in the repository."""
    ctx.ensure_object(dict)
    ctx.obj["vault"] = vault
    if ctx.invoked_subcommand is not None:
        return
    from ..agent.inbox import inbox
    from ..config import user_home

    items = inbox(_review_root(vault), user_home())
    if as_json:
        print_json([i.to_dict() for i in items])
        return
    if not items:
        echo("inbox empty: the agent wrote nothing since you last looked", err=True)
        return
    for i in items:
        session = f"  session {display_path(i.session)}" if i.session else ""
        more = f" ({i.writes} writes)" if i.writes > 1 else ""
        click.echo(
            f"{i.commit[:12]}  {display_path(i.date[:16])}  {display_path(i.path)}  "
            f"{display_path(repr(i.title))}{more}{session}"
        )
    echo(f"{len(items)} note(s): review them, then `vaultmem inbox done`", err=True)


@inbox_group.command(name="done")
@click.option("--through", help="Mark up to this commit (default: HEAD).")
@click.option("--vault", help="The vault (default: as for `vaultmem context`).")
@click.pass_context
def inbox_done(ctx: click.Context, through: str | None, vault: str | None) -> None:
    """Mark the agent's notes up to HEAD (or --through COMMIT, one `inbox` listed) as seen."""
    from ..agent.inbox import done
    from ..config import user_home

    seen, marked = done(_review_root(vault or ctx.obj.get("vault")), user_home(), through)
    echo(f"inbox marked seen through {seen.head[:12]} ({marked} note(s))")


@cli.command(name="distill")
@click.option(
    "--limit", type=click.IntRange(1, None), default=None, help="Distill at most N sessions."
)
@click.option("--vault", help="Write into this registered vault (default: as for the hook).")
@json_option
def distill_cmd(limit: int | None, vault: str | None, as_json: bool) -> None:
    """Turn the sessions queued by `hooks install --claude --capture` into notes: decisions,
    fixes, gotchas and to-dos, each committed through `remember` (scanned first: a sensitive
    one is refused and reported by category only). Uses your own `claude -p`
    (VAULTMEM_CLAUDE_BIN, else `claude` on PATH) with the prompt kept in vaultmem, on an
    excerpt of each transcript (your and the assistant's text, bounded); the transcript itself
    never enters the vault. A session leaves the queue only once its notes are committed; when
    claude fails, nothing leaves it and the exit code is 11. Run it yourself, on a schedule,
    or at the start of a session; review what it wrote with `vaultmem inbox`."""
    from ..agent.distill import run
    from ..config import load_settings, user_home

    settings = load_settings()
    results, remaining = run(
        user_home(),
        limit=limit,
        vault=vault,
        claude_bin=settings.claude_bin,
        timeout=settings.distill_timeout,
    )
    if as_json:
        print_json({"sessions": [r.to_dict() for r in results], "remaining": remaining})
        return
    if not results:
        echo("no sessions queued", err=True)
        return
    for r in results:
        what = f"skipped ({r.skipped})" if r.skipped else f"{len(r.written)} note(s)"
        if r.refused:
            what += f", {len(r.refused)} refused ({', '.join(r.refused)})"
        echo(f"session {display_path(r.session_id[:12])}: {what}")
        for w in r.written:
            echo(f"  {w['kind']:<8} {display_path(w['path'])}  {w['commit'][:12]}")
    echo(f"{remaining} session(s) still queued; review the notes with `vaultmem inbox`", err=True)
