"""Retrieval and Claude Code: `query`, `context`, `claude-hook`."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ..agent import claude_hook as claude_hook_process
from ..config import load_settings
from ..errors import VaultmemError
from ..search import Mode
from ..search.explain import DROP_REASONS, band_line, explain_line
from .base import (
    cli,
    display_path,
    echo,
    json_option,
    print_json,
    reading_vault,
    reading_vault_option,
)


def _registered_vault(conn: Any, entry: Any, installation: str | None = None) -> Any:
    """The index row of a registered vault (a shared vault's by its name on the server)."""
    from ..store import db

    if entry.shared is not None:
        v = db.find_shared_vault(conn, entry.shared)
        if v is None:
            raise VaultmemError(
                f"shared vault {entry.shared} is not readable on the server by this role yet: "
                f"its owner grants it with `vaultmem grant {entry.shared} ROLE`"
            )
        return v
    v = db.find_vault(conn, entry.path, installation=installation)
    if v is None:
        raise VaultmemError(f"{entry.path} is not an indexed vault yet: run `vaultmem init` in it")
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
    type=click.Choice([m.value for m in Mode]),
    default=Mode.HYBRID.value,
    show_default=True,
    help="Retrievers to use.",
)
@reading_vault_option
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
    What it lists is what `vaultmem context` and the Claude Code hook deliver, item for item:
    the relevance gate keeps a note when its evidence is strong enough, and each kept note
    reaches the agent as its chunk whole ("text"), as the lines that matched ("passage", with
    their line range) or as a one-line "pointer", within the context budget
    (VAULTMEM_CONTEXT_MAX_CHARS); a kept note with no room is listed as "left out" (VAULTMEM_GATE
    moves every band; --explain shows each note's band, score and signals, and what was
    dropped and why). Content-free prompts ("ok continue", "好的繼續") return nothing.
    """
    from ..agent.claude_hook import quiet_openmp
    from ..agent.context import ColdResources, notes_plan, sources
    from ..agent.delivery import Form, item_json
    from ..embed import get_embedder
    from ..search import Prompt, Request, retrieve
    from ..store import db
    from ..vaults import NO_VAULT_HINT

    # One query to embed, as the hook embeds it: OpenMP threads that spin between parallel
    # regions cost this command twice the hook's CPU for the same search (see claude_hook.py).
    quiet_openmp()
    entry = reading_vault(vault)
    if entry is None:
        from ..errors import ConfigError

        raise ConfigError(NO_VAULT_HINT)
    settings = load_settings(entry=entry)
    embedder = get_embedder(settings)
    with db.connect(settings) as conn:
        db.check_readable(conn)
        v = _registered_vault(conn, entry, settings.installation)
        asking = Request.of(
            settings,
            text,
            k=k,
            path_prefix=path_prefix,
            tag=tag,
            mode=Mode(mode),
            second_opinion=ColdResources(second_opinion=True).second_opinion(settings),
        )
        found = retrieve(conn, v, asking, embedder)
        provenance = sources(conn, v, list(found.hits), settings.agent_folder)
    # A kept hit that HEAD no longer holds is in neither list: not shown at all.
    hits = found.hits
    dropped = list(found.dropped)
    scored = {v.hit.path: v for v in found.verdicts}
    # What the agent would get of these notes: the same plan as `vaultmem context` and the hook.
    chosen = notes_plan(settings, found, Prompt.of(text).text, provenance)
    by_path = {h.path: h for h in hits}
    if as_json:
        rows = [
            {
                **by_path[i.path].breakdown(),
                "heading": i.heading,
                "title": i.title,
                "tags": list(by_path[i.path].tags),
                "text": by_path[i.path].text,
                "band": _band_of(by_path[i.path]),
                **item_json(i),
                "delivered": i.body,
                **(_gate_fields(scored[i.path]) if explain and i.path in scored else {}),
            }
            for i in chosen.items
        ]
        if explain:
            print_json(
                {
                    "outcome": found.outcome.value,
                    "hits": rows,
                    "left_out": [{"path": x.path, "reason": x.reason} for x in chosen.left_out],
                    "dropped": [
                        {
                            **h.breakdown(),
                            "heading": h.heading,
                            "drop": drop.value,
                            **_gate_fields(scored[h.path]),
                        }
                        for h, drop in dropped
                    ],
                }
            )
        else:
            print_json(rows)
        return
    if not chosen.items:
        echo("no relevant notes", err=True)
    for n, item in enumerate(chosen.items, 1):
        h = by_path[item.path]
        where = (
            f"{display_path(h.path)} › {display_path(h.heading)}"
            if h.heading
            else display_path(h.path)
        )
        lines = f", lines {item.lines[0]}-{item.lines[1]}" if item.lines else ""
        echo(f"{n}. {where}  [{h.score:.3f}]  ({item.form.value}{lines})")
        if item.form is Form.POINTER:
            echo(f"   {display_path(item.why)}")
        else:
            snippet = " ".join(item.body.split())
            echo(f"   {snippet[:160]}{'…' if len(snippet) > 160 else ''}")
        if explain:
            echo(f"   {explain_line(h)}")
            if h.path in scored:
                echo(f"   {band_line(scored[h.path], settings.gate)}")
    for gone in chosen.left_out:
        echo(f"left out: {display_path(gone.path)} ({gone.reason})")
    if explain and hits:
        echo(f"outcome: {found.outcome.value}")
    if explain and dropped:
        # Every verdict of a query carries the same prompt score and calibration (the profile's,
        # or its lexical-only one for a search without vectors).
        judged = scored[dropped[0][0].path]
        prompt_score, cal, level = judged.prompt_score, judged.calibration, settings.gate
        assert cal is not None  # every verdict the gate makes names its calibration
        echo(
            f"dropped by the relevance gate (the prompt scores {prompt_score:.2f}, answered from "
            f"{cal.prompt + level:g}; a note is a pointer from {cal.hit_pointer + level:g}, "
            f"text from {cal.hit_text + level:g}; VAULTMEM_GATE={level:g}):"
        )
        first = found.verdicts[0].signals if found.verdicts else None
        if first is not None and first.generic >= GENERIC_NOTICE:
            echo(
                "  this prompt reads like generic coding work (it is closer to one of vaultmem's "
                "generic requests than to the notes)"
            )
        reasons = {drop for _, drop in dropped}
        if len(reasons) == 1:  # say it once, not on every line
            echo(f"  all: {DROP_REASONS[dropped[0][1].value]}")
        for h, drop in dropped[:10]:
            why = "" if len(reasons) == 1 else f" {DROP_REASONS[drop.value]}"
            echo(f"-  {display_path(h.path)}  [{h.score:.3f}]{why}")
            echo(f"   {explain_line(h)}")
            echo(f"   {band_line(scored[h.path], settings.gate)}")
        if len(dropped) > 10:
            echo(f"   ... and {len(dropped) - 10} more")


# Say a prompt reads like generic coding work when it is at least this much closer (cosine
# hundredths) to vaultmem's generic requests than to its best-ranked note.
GENERIC_NOTICE = 3.0


def _band_of(hit: Any) -> str | None:
    """The gate's band for a kept hit (text or pointer), before the delivery plan."""
    return hit.delivery.value if hit.delivery is not None else None


def _gate_fields(v: Any) -> dict[str, Any]:
    """The gate's reading of one hit for --json --explain: its score and each signal."""
    from dataclasses import asdict

    return {
        "gate_score": round(v.score, 3),
        "prompt_score": round(v.prompt_score, 3),
        "band": v.delivery.value if v.delivery is not None else "none",
        "signals": {k: round(x, 3) for k, x in asdict(v.signals).items()} if v.signals else {},
    }


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
@json_option
@reading_vault_option
def context_cmd(
    text: str,
    max_chars: int | None,
    memory: bool,
    memory_only: bool,
    fail_open: bool,
    timeout: float,
    record_as: str | None,
    as_json: bool,
    vault: str | None,
) -> None:
    """Print the context block for TEXT: preferences, then relevant notes, fenced as data.

    This is exactly what the agent receives. Prints nothing when there is nothing relevant.
    Reads VAULTMEM_VAULT, else the registered vault holding the current directory, else the
    default vault (`vaultmem vaults list`); with no vault registered, only your own
    preferences file. Why something was not loaded (a quarantined MEMORY.md, no vault) goes
    to stderr. --json prints the block and its delivered items in order (path, delivery: text,
    passage or pointer, characters, line range), and the kept notes it had no room for.
    """
    import json

    from ..agent import context
    from ..agent.claude_hook import quiet_openmp
    from ..terminal import json_safe
    from ..vaults import NO_VAULT_HINT

    # One query to embed: spinning OpenMP threads only cost time (see claude_hook.py).
    quiet_openmp()
    notices: list[str] = []

    def build() -> str:
        entry = reading_vault(vault)
        if entry is None:
            notices.append(NO_VAULT_HINT)
        root = entry.path if entry is not None else None
        settings = load_settings(root, entry=entry)
        result = context.build_context(
            settings,
            text,
            vault_root=root,
            shared=entry.shared if entry is not None else None,
            include_memory=memory,
            include_notes=not memory_only,
            max_chars=max_chars,
            resources=context.ColdResources(second_opinion=True),
        )
        notices.extend(result.notices)
        if record_as:
            from ..config import user_home

            result.record(
                user_home(),
                settings,
                source=record_as,
                vault=entry.name if entry is not None else None,
                prompt=text,
            )
        if as_json:
            return json_safe(json.dumps(result.as_json(), ensure_ascii=False, indent=2))
        return result.text

    if not fail_open:
        out = build()
    else:
        result = context.run_bounded(build, timeout)
        out = result or ""
    for line in notices:
        echo(f"vaultmem: {line}", err=True)
    if out:
        echo(out)
    if fail_open:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # a timed-out worker may still hold a socket: do not wait for it


@cli.command(name="claude-hook")
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Give up (printing nothing) after this many seconds. Default: VAULTMEM_HOOK_TIMEOUT, "
    f"else {claude_hook_process.DEFAULT_TIMEOUT:g}.",
)
@click.option(
    "--memory/--no-memory",
    default=True,
    show_default=True,
    help="Include the preferences block (the wrapper already puts it in the system "
    "prompt, so it passes --no-memory).",
)
def claude_hook(timeout: float | None, memory: bool) -> None:
    """Claude Code UserPromptSubmit hook: reads the hook JSON on stdin, prints the context.

    Claude Code adds a UserPromptSubmit hook's stdout (exit 0) to the model's context. Fails
    open: bad input, an unreachable database or a timeout print nothing and exit 0.
    Register it with `vaultmem hooks install --claude`.
    """
    # The `vaultmem` command runs the hook without importing click (see __main__.py), with
    # agent.claude_hook's own option parser; this path serves `--help` and CliRunner, with the
    # same defaults (claude_hook_process.default_timeout).
    if timeout is None:
        timeout = claude_hook_process.default_timeout()
    claude_hook_process.run(timeout, memory)
