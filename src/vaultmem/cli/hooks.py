"""`vaultmem hooks`: the git hooks, and the Claude Code hook and MCP server in Claude Code's
settings.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..index.registration import register
from .base import (
    VAULT_HELP,
    cli,
    echo,
    json_option,
    naming_mcp_tools,
    print_json,
    vault_option,
    vault_root,
)


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
    f = click.option(
        "--capture",
        is_flag=True,
        help="With --claude: also register the SessionEnd hook that queues each ended session "
        "for `vaultmem distill` (opt-in; uninstall removes it).",
    )(f)
    return click.option(
        "--claude",
        is_flag=True,
        help="The Claude Code per-prompt hook (UserPromptSubmit in settings.json), "
        "not the git hooks.",
    )(f)


def _claude_scope(
    claude: bool,
    scope: str | None,
    project_dir: Path | None,
    no_mcp: bool = False,
    capture: bool = False,
) -> tuple[str, Path]:
    """The settings scope and project directory for --claude; a usage error without it."""
    if not claude:
        if scope is not None or project_dir is not None or no_mcp or capture:
            raise click.UsageError(
                "--project, --shared, --user, --project-dir, --no-mcp and --capture go with "
                "--claude"
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
@click.option(
    "--vault",
    "vault",
    type=str,
    help=VAULT_HELP + " With --claude: the vault the MCP server serves (default: the one it "
    "finds from the folder Claude Code runs in).",
)
@_claude_options
@click.option(
    "--force",
    is_flag=True,
    help="Write the git hooks even into a core.hooksPath folder inside the work tree.",
)
@naming_mcp_tools
def hooks_install(
    vault: str | None,
    claude: bool,
    scope: str | None,
    project_dir: Path | None,
    force: bool,
    no_mcp: bool,
    capture: bool,
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
    bin/agent-with-memory. The MCP server `vaultmem mcp` (tools {mcp_tools}) is
    registered too, in your ~/.claude.json as `claude mcp add` does (--user:
    user scope; --project and --shared: local scope, this project only), never in the
    committed .mcp.json; --no-mcp leaves it out. --vault NAME makes it serve that vault.

    With --claude --capture (opt-in): also register a SessionEnd hook that queues each ended
    session (its transcript's path in ~/.claude/projects, its id and folder) in your vaultmem
    home and returns at once; `vaultmem distill` turns the queue into notes. Sessions in the
    folders of VAULTMEM_CAPTURE_EXCLUDE are never queued.
    """
    from .. import vaults
    from ..index import git_hooks

    scope, project_dir = _claude_scope(claude, scope, project_dir, no_mcp, capture)
    if claude:
        from ..agent.claude_settings import install_capture_hook, install_claude_hook

        path = install_claude_hook(scope, project_dir)
        echo(f"Claude Code UserPromptSubmit hook registered in {path}")
        if capture:
            where = install_capture_hook(scope, project_dir)
            echo(
                f"Claude Code SessionEnd hook registered in {where}: ended sessions are queued "
                "for `vaultmem distill`"
            )
        if not no_mcp:
            from ..agent.claude_mcp import claude_mcp_add_command, install_mcp_server

            mcp_scope, where = install_mcp_server(scope, project_dir, vault=vault)
            echo(
                f"Claude Code MCP server `vaultmem` registered ({mcp_scope} scope) in {where}; "
                f"the same as: {claude_mcp_add_command(scope, vault)}"
            )
        return
    root = vault_root(vault)
    entry, _ = register(root)
    echo(f"vault registered: {entry.name} = {entry.path}")
    for path in git_hooks.install(root, config=vaults.config_path(), force=force):
        chained = path.with_name(path.name + git_hooks.USER_SUFFIX).exists()
        echo(f"installed {path}" + (" (your own hook runs first)" if chained else ""))
    from ..index.freshness import start_catch_up

    if start_catch_up(root, vaults.config_path()):
        echo("catching up in the background (`vaultmem status` shows progress)")


@hooks_group.command(name="uninstall")
@vault_option
@_claude_options
def hooks_uninstall(
    vault: str | None,
    claude: bool,
    scope: str | None,
    project_dir: Path | None,
    no_mcp: bool,
    capture: bool,
) -> None:
    """Remove vaultmem's block from the hooks, keeping anything else in them.

    With --claude: remove the UserPromptSubmit hook from the scope's settings.json instead,
    and the MCP server from the matching scope of ~/.claude.json (a local-scope server stays
    while the project's other settings file still registers the hook; --no-mcp keeps it).
    The SessionEnd capture hook goes too, whether or not --capture is given (sessions already
    queued stay queued for `vaultmem distill`).
    """
    from ..index import git_hooks

    scope, project_dir = _claude_scope(claude, scope, project_dir, no_mcp, capture)
    if claude:
        from ..agent.claude_settings import (
            claude_hook_status,
            uninstall_capture_hook,
            uninstall_claude_hook,
        )

        path, removed_hook = uninstall_claude_hook(scope, project_dir)
        echo(
            f"Claude Code hook removed from {path}"
            if removed_hook
            else f"no vaultmem Claude Code hook in {path}"
        )
        _, removed_capture = uninstall_capture_hook(scope, project_dir)
        if removed_capture:
            echo(f"Claude Code SessionEnd capture hook removed from {path}")
        sibling = {"project": "shared", "shared": "project"}.get(scope)
        if not no_mcp and not (sibling and claude_hook_status(sibling, project_dir).installed):
            from ..agent.claude_mcp import uninstall_mcp_server

            mcp_scope, dropped = uninstall_mcp_server(scope, project_dir)
            echo(
                f"Claude Code MCP server removed ({mcp_scope} scope)"
                if dropped
                else f"no vaultmem MCP server registered ({mcp_scope} scope)"
            )
        return
    root = vault_root(vault)
    removed = git_hooks.uninstall(root)
    echo("\n".join(f"removed from {p}" for p in removed) or "no vaultmem hooks installed")


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
    from ..agent.claude_settings import CAPTURE_EVENT, CAPTURE_SUBCOMMAND, claude_hook_status
    from ..index import git_hooks

    _, project_dir = _claude_scope(True, None, project_dir)
    claude = [
        claude_hook_status("project", project_dir),
        claude_hook_status("shared", project_dir),
        claude_hook_status("user"),
    ]
    servers = [mcp_server_status("local", project_dir), mcp_server_status("user")]
    captures = [
        c
        for c in (
            claude_hook_status(
                scope, project_dir, event=CAPTURE_EVENT, subcommand=CAPTURE_SUBCOMMAND
            )
            for scope in ("project", "shared", "user")
        )
        if c.installed  # opt-in: listed only where it is registered
    ]
    items = [] if claude_only else git_hooks.status(vault_root(vault))
    if as_json:
        print_json(
            [{**h.__dict__, "path": str(h.path)} for h in items]
            + [{"name": "claude-code", **c.__dict__, "path": str(c.path)} for c in claude]
            + [{"name": "claude-mcp", **m.__dict__, "path": str(m.path)} for m in servers]
            + [{"name": "claude-capture", **c.__dict__, "path": str(c.path)} for c in captures]
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
            echo(f"{h.name}: {state}  {h.path}")
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
            echo(f"claude-code ({c.scope}): {state}  {c.path}")
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
            echo(f"claude-mcp ({m.scope}): {state}  {m.path}")
        for c in captures:
            state = "installed" if c.executable_ok else "installed but its program is gone"
            echo(f"claude-capture ({c.scope}, SessionEnd): {state}  {c.path}")
    if not all(h.installed for h in items):
        sys.exit(1)


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
        hooks_install,
        vault=None,
        claude=True,
        scope=scope,
        project_dir=project_dir,
        no_mcp=False,
        capture=False,
    )


@cli.command(name="capture-session", hidden=True)
def capture_session() -> None:
    """Claude Code's SessionEnd hook (`hooks install --claude --capture`): queue the ended
    session for `vaultmem distill`. Reads the hook's JSON on stdin; always exits 0."""
    from ..agent.capture import main

    main()
