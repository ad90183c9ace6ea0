"""`vaultmem hooks install --claude` registers the MCP server as `claude mcp add` would.

The stand-in `claude` does what Claude Code does with ~/.claude.json (MCP reference,
"installation scopes"): `claude mcp list` collects the user-scope servers (top-level
`mcpServers`) and the local-scope ones of the current project (`projects.<cwd>.mcpServers`),
plus the project's `.mcp.json`, starts each stdio server with its command, args and env over
its own environment, and reports whether it connected and which tools it offers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.indexing import index

from vaultmem import vaults
from vaultmem.agent.claude_mcp import (
    SERVER_NAME,
    claude_mcp_add_command,
    install_mcp_server,
    merge_server,
    remove_server,
    server_entry,
)
from vaultmem.cli import cli
from vaultmem.errors import ConfigError

FAKE_CLAUDE = """#!{python}
import json, os, sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

assert sys.argv[1:3] == ["mcp", "list"], sys.argv
data = json.load(open(os.path.expanduser("~/.claude.json"), encoding="utf-8"))
servers = dict(data.get("mcpServers", {{}}))
servers.update(data.get("projects", {{}}).get(os.getcwd(), {{}}).get("mcpServers", {{}}))
if os.path.isfile(".mcp.json"):
    servers.update(json.load(open(".mcp.json", encoding="utf-8")).get("mcpServers", {{}}))

async def probe(entry):
    params = StdioServerParameters(command=entry["command"], args=entry.get("args", []),
                                   env={{**os.environ, **entry.get("env", {{}})}})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            tools = (await client.list_tools()).tools
            found = await client.call_tool("search", {{"query": "restore postgres backup"}})
            return [t.name for t in tools], found.content[0].text

for name, entry in sorted(servers.items()):
    tools, found = anyio.run(probe, entry)
    print(json.dumps({{"name": name, "tools": tools, "found": found}}))
"""


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def fake_claude(tmp_path) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    claude = bindir / "claude"
    claude.write_text(FAKE_CLAUDE.format(python=sys.executable), encoding="utf-8")
    claude.chmod(0o755)
    return claude


def claude_json(home: Path) -> dict:
    return json.loads((home / ".claude.json").read_text(encoding="utf-8"))


ENTRY = server_entry(["/opt/vaultmem/bin/vaultmem"])
EXISTING = {
    "numStartups": 12,
    "mcpServers": {"github": {"type": "stdio", "command": "gh-mcp", "args": [], "env": {}}},
    "projects": {"/elsewhere": {"allowedTools": [], "mcpServers": {}}},
}


def test_the_entry_is_what_claude_mcp_add_writes():
    assert ENTRY == {
        "type": "stdio",
        "command": "/opt/vaultmem/bin/vaultmem",
        "args": ["mcp"],
        "env": {},
    }
    assert server_entry(["/usr/bin/python3", "-m", "vaultmem"], "notes")["args"] == [
        "-m",
        "vaultmem",
        "mcp",
        "--vault",
        "notes",
    ]


def test_merge_keeps_everything_else_is_idempotent_and_removes_only_ours():
    user, changed = merge_server(EXISTING, ENTRY, "user")
    assert changed and user["mcpServers"]["github"] == EXISTING["mcpServers"]["github"]
    assert user["mcpServers"][SERVER_NAME] == ENTRY and user["numStartups"] == 12
    assert merge_server(user, ENTRY, "user") == (user, False)
    local, _ = merge_server(EXISTING, ENTRY, "local", Path("/work/app"))
    assert local["projects"]["/work/app"]["mcpServers"] == {SERVER_NAME: ENTRY}
    assert local["projects"]["/elsewhere"] == EXISTING["projects"]["/elsewhere"]
    assert SERVER_NAME not in local["mcpServers"]
    assert remove_server(local, "local", Path("/work/app"))[0]["projects"]["/work/app"] == {
        "mcpServers": {}
    }
    assert remove_server(user, "user")[0] == EXISTING
    assert remove_server(EXISTING, "user") == (EXISTING, False)
    assert len(EXISTING["mcpServers"]) == 1  # the input is never modified


def test_a_foreign_server_with_our_name_is_left_alone():
    theirs = {"mcpServers": {SERVER_NAME: {"type": "stdio", "command": "other", "args": []}}}
    with pytest.raises(ConfigError, match="does not run vaultmem"):
        merge_server(theirs, ENTRY, "user")
    assert remove_server(theirs, "user") == (theirs, False)


def test_install_refuses_to_clobber_an_unreadable_claude_json(home):
    (home / ".claude.json").write_text("{ not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid JSON"):
        install_mcp_server("user", program=["/opt/vaultmem"])
    assert (home / ".claude.json").read_text(encoding="utf-8") == "{ not json"


def test_hooks_install_registers_the_server_per_scope_and_never_in_committed_files(home, tmp_path):
    (home / ".claude.json").write_text(json.dumps(EXISTING), encoding="utf-8")
    (home / ".claude.json").chmod(0o600)
    project = tmp_path / "app"
    project.mkdir()
    runner = CliRunner()
    where = ["--project-dir", str(project)]

    result = runner.invoke(cli, ["hooks", "install", "--claude", "--project", *where])
    assert result.exit_code == 0, result.output
    assert "claude mcp add --scope local vaultmem --" in result.output
    data = claude_json(home)
    local = data["projects"][str(project.resolve())]["mcpServers"][SERVER_NAME]
    assert local["type"] == "stdio" and local["args"][-1] == "mcp" and local["env"] == {}
    assert os.path.isabs(local["command"])
    assert data["numStartups"] == 12 and data["mcpServers"] == EXISTING["mcpServers"]
    assert (home / ".claude.json").stat().st_mode & 0o777 == 0o600

    result = runner.invoke(cli, ["hooks", "install", "--claude", "--shared", *where])
    assert result.exit_code == 0, result.output
    shared = (project / ".claude" / "settings.json").read_text(encoding="utf-8")
    assert '"vaultmem claude-hook"' in shared and str(Path(sys.executable).parent) not in shared
    assert not (project / ".mcp.json").exists()

    result = runner.invoke(cli, ["hooks", "install", "--claude", "--user", "--vault", "notes"])
    assert result.exit_code == 0, result.output
    user = claude_json(home)["mcpServers"][SERVER_NAME]
    assert user["args"][-3:] == ["mcp", "--vault", "notes"]

    result = runner.invoke(cli, ["hooks", "status", "--claude", "--json", *where])
    states = {s["scope"]: s for s in json.loads(result.output) if s["name"] == "claude-mcp"}
    assert states["local"]["installed"] and states["local"]["executable_ok"]
    assert states["user"]["installed"] and states["user"]["command"].endswith("--vault notes")
    text = runner.invoke(cli, ["hooks", "status", "--claude", *where]).output
    assert "claude-mcp (local): registered" in text and "claude-mcp (user): registered" in text

    # the shared hook still needs the local server: removing the project hook keeps it
    result = runner.invoke(cli, ["hooks", "uninstall", "--claude", "--project", *where])
    assert result.exit_code == 0 and "MCP" not in result.output
    assert SERVER_NAME in claude_json(home)["projects"][str(project.resolve())]["mcpServers"]
    result = runner.invoke(cli, ["hooks", "uninstall", "--claude", "--shared", *where])
    assert "MCP server removed (local scope)" in result.output
    result = runner.invoke(cli, ["hooks", "uninstall", "--claude", "--user"])
    assert "MCP server removed (user scope)" in result.output
    data = claude_json(home)
    assert data["mcpServers"] == EXISTING["mcpServers"] and data["numStartups"] == 12
    assert data["projects"][str(project.resolve())]["mcpServers"] == {}


def test_no_mcp_installs_only_the_hook(home, tmp_path):
    result = CliRunner().invoke(
        cli, ["hooks", "install", "--claude", "--no-mcp", "--project-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert not (home / ".claude.json").exists()


def test_a_stand_in_claude_finds_and_uses_the_registered_server(
    home, fake_claude, db_url, vault, tmp_path
):
    vault.write(
        "ops/postgres-backup.md", "# Backup\n\nTo restore a postgres backup run pg_restore.\n"
    )
    vault.commit()
    vaults.register(vault.root, database_url=db_url)
    index(vault.root)
    project = tmp_path / "app"
    project.mkdir()
    env = dict(os.environ)
    list_servers = [str(fake_claude), "mcp", "list"]

    result = CliRunner().invoke(
        cli, ["hooks", "install", "--claude", "--project", "--project-dir", str(project)]
    )
    assert result.exit_code == 0, result.output
    proc = subprocess.run(list_servers, cwd=project, env=env, capture_output=True, timeout=180)
    assert proc.returncode == 0, proc.stderr.decode()
    [server] = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert server["name"] == "vaultmem"
    assert server["tools"] == ["search", "get", "recent", "status", "remember"]
    assert 'path="ops/postgres-backup.md"' in server["found"]

    # local scope: another directory does not get it
    other = tmp_path / "other"
    other.mkdir()
    proc = subprocess.run(list_servers, cwd=other, env=env, capture_output=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout == b""

    result = CliRunner().invoke(
        cli, ["hooks", "uninstall", "--claude", "--project", "--project-dir", str(project)]
    )
    assert result.exit_code == 0, result.output
    proc = subprocess.run(list_servers, cwd=project, env=env, capture_output=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout == b""


def test_the_documented_claude_mcp_add_line_matches():
    line = claude_mcp_add_command("user", "notes")
    assert line.startswith("claude mcp add --scope user vaultmem -- ")
    assert line.endswith(" mcp --vault notes")


def test_no_mcp_goes_with_claude(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["hooks", "install", "--no-mcp"])
    assert result.exit_code == 2 and "--claude" in result.output


@pytest.mark.parametrize("command", [["hooks", "install"], ["mcp"]])
def test_the_help_names_every_tool_the_server_serves(command: list[str]) -> None:
    from vaultmem.agent.claude_mcp import TOOLS

    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "tools search, get, recent, status and remember" in text
    assert set(TOOLS) == {"search", "get", "recent", "status", "remember"}
