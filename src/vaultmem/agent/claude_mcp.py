"""Register, remove and inspect `vaultmem mcp` as a Claude Code MCP server.

Design decision: write exactly what `claude mcp add` writes, in the user's own Claude Code file
`~/.claude.json`, never in a file a team commits (`.mcp.json`): this machine's absolute path
to vaultmem stays on this machine. Claude Code's MCP scopes (MCP reference, "MCP installation
scopes"): *local* servers live in `~/.claude.json` under `projects.<project path>.mcpServers`
(private to the user, for that project), *user* servers under the top-level `mcpServers` (every
project), *project* servers in the committed `.mcp.json`. The hook scopes map to them:
`--project` and `--shared` -> local (a shared settings file must not carry this machine's
paths), `--user` -> user. The entry is `claude mcp add --scope local|user vaultmem -- <vaultmem>
mcp`'s: `{"type": "stdio", "command": ..., "args": ["mcp"], "env": {}}`. The merge is pure
(`merge_server`, `remove_server`); the file wrapper keeps every other key of the file.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .claude_settings import command_runnable, read_json_object, write_json_atomic

SERVER_NAME = "vaultmem"
# The tools the registered server offers, in the order it lists them, with the one-line
# descriptions the model reads: `mcp_server.build_server` registers exactly these, and the
# help texts that name the tools read them from here (this module imports no MCP or pydantic,
# so the CLI can).
TOOLS = {
    "search": "Search the user's notes. Hits carry an id for get.",
    "get": "Read a note (or a line range) as committed at HEAD.",
    "recent": "Notes changed by the latest commits.",
    "status": "Index freshness: commits behind HEAD, embedding backlog, model.",
    "remember": "Commit a scanned note as the agent (mode new|append): path, blob, commit.",
}


def tool_names() -> str:
    """The tools in words: "search, get, recent, status and remember"."""
    *first, last = TOOLS
    return f"{', '.join(first)} and {last}"


# Which Claude Code MCP scope each hook scope registers the server in.
MCP_SCOPE = {"project": "local", "shared": "local", "user": "user"}


def claude_json_path() -> Path:
    """Claude Code's per-user state file, which holds local- and user-scoped MCP servers."""
    return Path.home() / ".claude.json"


def server_entry(program: list[str], vault: str | None = None) -> dict[str, Any]:
    """The stdio entry `claude mcp add vaultmem -- <program> mcp [--vault NAME]` writes."""
    args = [*program[1:], "mcp", *(["--vault", vault] if vault else [])]
    return {"type": "stdio", "command": program[0], "args": args, "env": {}}


def mcp_program() -> list[str]:
    """The program that runs vaultmem, as an absolute command (see `vaultmem_program`)."""
    from .claude_settings import vaultmem_program

    return vaultmem_program()


def is_our_server(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    words = [entry.get("command"), *(entry.get("args") or [])]
    text = " ".join(w for w in words if isinstance(w, str))
    return "vaultmem" in text and "mcp" in (entry.get("args") or [])


def _servers(data: dict[str, Any], scope: str, project: Path | None, create: bool) -> Any:
    """The `mcpServers` object of `scope` inside Claude Code's file (created if `create`)."""
    if scope == "user":
        holder: Any = data
    elif scope == "local":
        if project is None:
            raise ConfigError("a local-scope MCP server needs its project directory")
        projects = data.setdefault("projects", {}) if create else data.get("projects")
        if not isinstance(projects, dict):
            if projects is None:
                return None
            raise ConfigError('"projects" in ~/.claude.json is not an object: fix it first')
        key = str(project)
        holder = projects.setdefault(key, {}) if create else projects.get(key)
        if holder is None:
            return None
        if not isinstance(holder, dict):
            raise ConfigError(f'"projects.{key}" in ~/.claude.json is not an object: fix it first')
    else:
        raise ConfigError(f"MCP scope must be local or user, got {scope!r}")
    servers = holder.setdefault("mcpServers", {}) if create else holder.get("mcpServers")
    if servers is not None and not isinstance(servers, dict):
        raise ConfigError('"mcpServers" in ~/.claude.json is not an object: fix it first')
    return servers


def merge_server(
    data: dict[str, Any], entry: dict[str, Any], scope: str, project: Path | None = None
) -> tuple[dict[str, Any], bool]:
    """`data` (Claude Code's file) with our server at `scope`; (new data, changed?). Pure.

    A server named "vaultmem" that is not ours is left alone: a ConfigError says so."""
    if not isinstance(data, dict):
        raise ConfigError("~/.claude.json does not hold a JSON object: fix it first")
    out = copy.deepcopy(data)
    servers = _servers(out, scope, project, create=True)
    current = servers.get(SERVER_NAME)
    if current is not None and not is_our_server(current):
        raise ConfigError(
            f'~/.claude.json already has an MCP server named "{SERVER_NAME}" that does not run '
            "vaultmem: remove it (`claude mcp remove vaultmem`) or rename it first"
        )
    servers[SERVER_NAME] = {**(current or {}), **entry}
    return out, out != data


def remove_server(
    data: dict[str, Any], scope: str, project: Path | None = None
) -> tuple[dict[str, Any], bool]:
    """`data` without our server at `scope`; (new data, changed?). Pure; only ours goes."""
    if not isinstance(data, dict):
        raise ConfigError("~/.claude.json does not hold a JSON object: fix it first")
    out = copy.deepcopy(data)
    servers = _servers(out, scope, project, create=False)
    if not servers or not is_our_server(servers.get(SERVER_NAME)):
        return copy.deepcopy(data), False
    del servers[SERVER_NAME]
    return out, True


def _update(path: Path, change: Any) -> bool:
    # Read right before writing: Claude Code rewrites this file itself, so keep the window short.
    # Never through a symbolic link (files.py): a linked ~/.claude.json is refused.
    data = read_json_object(path, below=path.parent)
    new, changed = change(data)
    if changed:
        write_json_atomic(path, new, below=path.parent)
    return bool(changed)


def install_mcp_server(
    hook_scope: str,
    project_dir: Path | None = None,
    *,
    vault: str | None = None,
    program: list[str] | None = None,
) -> tuple[str, Path]:
    """Register `vaultmem mcp` for Claude Code at the MCP scope matching `hook_scope`.
    Returns (MCP scope, the file written)."""
    scope = MCP_SCOPE[hook_scope]
    project = project_dir.resolve() if project_dir is not None else None
    entry = server_entry(program if program is not None else mcp_program(), vault)
    path = claude_json_path()
    _update(path, lambda data: merge_server(data, entry, scope, project))
    return scope, path


def uninstall_mcp_server(hook_scope: str, project_dir: Path | None = None) -> tuple[str, bool]:
    """Remove our server from the MCP scope matching `hook_scope`: (scope, was it there)."""
    scope = MCP_SCOPE[hook_scope]
    project = project_dir.resolve() if project_dir is not None else None
    removed = _update(claude_json_path(), lambda data: remove_server(data, scope, project))
    return scope, removed


@dataclass(frozen=True)
class McpServerStatus:
    scope: str  # "local" or "user"
    path: Path
    installed: bool
    command: str | None  # the command line, when installed
    executable_ok: bool
    problem: str | None


def mcp_server_status(scope: str, project_dir: Path | None = None) -> McpServerStatus:
    """Whether Claude Code's file registers our server at `scope`, and whether it can run."""
    path = claude_json_path()
    project = project_dir.resolve() if project_dir is not None else None
    try:
        servers = _servers(read_json_object(path), scope, project, create=False)
    except (ConfigError, OSError) as exc:
        return McpServerStatus(scope, path, False, None, False, str(exc))
    entry = (servers or {}).get(SERVER_NAME)
    if entry is None or not is_our_server(entry):
        return McpServerStatus(scope, path, False, None, False, None)
    command = shlex.join([str(entry.get("command", "")), *entry.get("args", [])])
    return McpServerStatus(scope, path, True, command, command_runnable(command), None)


def claude_mcp_add_command(hook_scope: str, vault: str | None = None) -> str:
    """The `claude mcp add` line that registers the same server (for docs/claude-code.md and
    output)."""
    entry = server_entry(mcp_program(), vault)
    return shlex.join(
        [
            "claude",
            "mcp",
            "add",
            "--scope",
            MCP_SCOPE[hook_scope],
            SERVER_NAME,
            "--",
            entry["command"],
            *entry["args"],
        ]
    )
