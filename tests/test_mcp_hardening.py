"""The MCP server under attack: inert text, refusals that name only vault paths, and one slow
`get` (a huge note's scan) never stalling the other tools."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from support.indexing import index

from vaultmem import vaults
from vaultmem.agent.mcp_tools import Refused, VaultTools
from vaultmem.agent.warm import WarmResources
from vaultmem.index import decision

# What a note, a file name, a commit subject or a query can hold to drive a terminal: ESC
# (CSI, OSC), BEL, a C1 CSI and a right-to-left override.
NASTY = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
GUARD = 60  # seconds: only a broken build waits this long


def _raw_controls(text: str) -> list[str]:
    return [c for c in RAW if c in text]


@pytest.fixture
def nasty_vault(db_url, vault):
    vault.write(
        "ops/restore.md",
        f"# Restore {NASTY} drill\n\nTo restore the postgres backup{NASTY} run pg_restore.\n",
    )
    vault.write(f"ops/odd{NASTY}name.md", "# Odd\n\nrestore postgres backup from the odd note\n")
    vault.commit(f"restore notes {NASTY} subject")
    vaults.register(vault.root, database_url=db_url)
    index(vault.root)
    return vault


def _session(cwd: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def main() -> list[Any]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "vaultmem", "mcp"],
            env=dict(os.environ),
            cwd=str(cwd),
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(main)


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def test_every_text_the_server_returns_is_inert(nasty_vault, tmp_path) -> None:
    results = _session(
        tmp_path,
        [
            ("search", {"query": f"restore postgres backup {NASTY}"}),
            ("recent", {"n": 5}),
            ("get", {"note": "ops/restore.md"}),
            ("get", {"note": f"ops/odd{NASTY}name.md"}),
            ("get", {"note": f"missing{NASTY}.md"}),
            ("status", {}),
        ],
    )
    search, recent, note, odd, missing, _status = results
    assert "ops/restore.md" in _text(search) and "pg_restore" in _text(note)
    assert "restore notes" in _text(recent) and "odd note" in _text(odd)
    assert missing.is_error
    for result in results:
        assert _raw_controls(_text(result)) == [], _text(result)
    # shown, not dropped: the user can still see what the note holds
    assert "\\x1b[2J" in _text(note) and "\\u202e" in _text(search)


def test_refusals_name_paths_inside_the_vault_and_never_git_text(nasty_vault) -> None:
    tools = VaultTools(None, nasty_vault.root, WarmResources())
    root = str(nasty_vault.root)
    try:
        for wanted in ("../../etc/passwd", "ops/../../../etc/passwd", "/etc/passwd", "..", "./"):
            with pytest.raises(Refused) as refused:
                tools.get(wanted)
            message = str(refused.value)
            assert root not in message and "fatal" not in message and "git " not in message
            assert str(Path(root).parent) not in message
        with pytest.raises(Refused, match=r"^etc/passwd is not a file of the vault at HEAD"):
            tools.get("/etc/passwd")
    finally:
        tools.resources.close()


def test_a_slow_get_does_not_stall_the_other_tools(nasty_vault, monkeypatch) -> None:
    inside, go = threading.Event(), threading.Event()
    real = decision.triage

    def slow_scan(*args: Any, **kwargs: Any) -> Any:
        inside.set()  # a huge note's scan, still running
        go.wait(GUARD)
        return real(*args, **kwargs)

    monkeypatch.setattr(decision, "triage", slow_scan)
    tools = VaultTools(None, nasty_vault.root, WarmResources())
    got: list[str] = []
    others: dict[str, str] = {}
    reader = threading.Thread(target=lambda: got.append(tools.get("ops/restore.md")), daemon=True)
    reader.start()
    try:
        assert inside.wait(GUARD)

        def the_others() -> None:
            others["status"] = tools.status()
            others["recent"] = tools.recent()
            others["search"] = tools.search("restore postgres backup")

        served = threading.Thread(target=the_others, daemon=True)
        served.start()
        served.join(GUARD)
        # All three answered while the scan was still going on.
        assert not served.is_alive() and reader.is_alive()
        assert "up to date" in others["status"] and "ops/restore.md" in others["search"]
    finally:
        go.set()
        reader.join(GUARD)
        tools.resources.close()
    assert got and "pg_restore" in got[0]


def test_errors_over_mcp_never_name_the_vaults_folder(nasty_vault, monkeypatch) -> None:
    from vaultmem.agent.mcp_server import _without_paths

    monkeypatch.chdir(nasty_vault.root)
    tools = VaultTools(None, nasty_vault.root, WarmResources())
    root = str(nasty_vault.root)
    try:
        said = _without_paths(f"git update-ref failed: fatal: cannot lock {root}/.git/HEAD", tools)
        assert root not in said and ".git/HEAD" in said
        said = _without_paths(f"{root} is not an indexed vault yet", tools)
        assert root not in said and said.startswith("vault ")
        assert str(Path.home()) not in _without_paths(f"see {Path.home()}/x", tools)
    finally:
        tools.resources.close()
    # through the server: a refused write names no folder either
    (nasty_vault.root / ".git/index.lock").write_bytes(b"")
    try:
        [refused] = _session(nasty_vault.root, [("remember", {"title": "t", "text": "x"})])
    finally:
        (nasty_vault.root / ".git/index.lock").unlink()
    assert refused.is_error and "index.lock" in _text(refused) and root not in _text(refused)
