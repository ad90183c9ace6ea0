"""The injection log: what each agent was given from the vaults, recorded locally.

Design decision: one JSON object per line in `<vaultmem home>/log/injections.jsonl` (directory
0700, file 0600), appended with O_APPEND so concurrent hooks, the warm service and MCP servers
never interleave a record. A record names the time, where it came from (`claude-hook`, the
wrapper, `mcp-search`, `mcp-get`), the vault, a hash of the prompt (the text itself only when
VAULTMEM_LOG_PROMPTS=1), the paths injected and how many characters: never the note text.
Retention is bounded by size: past MAX_BYTES the file is renamed to `injections.jsonl.1`
(replacing the older one), so the log never holds more than about 2 x MAX_BYTES.
Recording never raises: an injection must not fail because its log could not be written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LOG_NAME = "injections.jsonl"
MAX_BYTES = 1 << 20  # per file; one older file is kept
PROMPT_HASH_CHARS = 16
# With VAULTMEM_LOG_PROMPTS=1, the most of a prompt a record keeps (more than is searched of it,
# search.prompt.MAX_PROMPT_CHARS): a pasted megabyte must not fill the log by itself.
MAX_KEPT_PROMPT_CHARS = 4000

# Where an injection came from (the `source` of a record).
CLAUDE_HOOK = "claude-hook"
CLAUDE_HOOK_WARM = "claude-hook/warm"
WRAPPER = "wrapper"
MCP_SEARCH = "mcp-search"
MCP_GET = "mcp-get"


@dataclass(frozen=True)
class Injection:
    """One thing an agent was given."""

    time: str  # ISO 8601, UTC, to the millisecond
    source: str
    vault: str | None
    # The first PROMPT_HASH_CHARS hex digits of the prompt's SHA-256; None when there was no
    # prompt (the wrapper's preferences, given before any prompt is typed).
    prompt_sha256: str | None
    paths: tuple[str, ...]
    chars: int
    prompt: str | None = None  # only with VAULTMEM_LOG_PROMPTS=1
    # The relevance gate's band for the notes: "notes" (some as full text) or "pointers" (only
    # one-line pointers); None for a record without notes. `pointers`: the paths given as
    # pointers (the rest of `paths` were given as text).
    band: str | None = None
    pointers: tuple[str, ...] = ()
    # Whether the gate also weighed the second, language-agnostic opinion (`search.second_opinion`:
    # the warm service and MCP once it has loaded), or the embedding model's signals alone.
    second_opinion: bool = False
    # The paths given as passages (part of a chunk) rather than whole, and the notes the gate
    # kept that the block had no room for, each as "path: why" (`agent.delivery.Plan`).
    passages: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    # Why each delivered note was given, as "path: score nats (its strongest signals)" (the
    # gate's verdict: `search.explain.strongest_signals`).
    signals: tuple[str, ...] = ()
    # The Claude Code session the hook answered (its `session_id`), for a timeline per session;
    # None for the wrapper, MCP and records written before it was kept.
    session: str | None = None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["paths"] = list(self.paths)
        data["pointers"] = list(self.pointers)
        for key in ("passages", "left_out", "signals"):
            if getattr(self, key):
                data[key] = list(getattr(self, key))
            else:
                del data[key]
        for key in ("prompt", "band", "session"):
            if data[key] is None:
                del data[key]
        if not self.pointers:
            del data["pointers"]
        if not self.second_opinion:
            del data["second_opinion"]
        return data


def prompt_hash(prompt: str) -> str:
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()
    return digest[:PROMPT_HASH_CHARS]


def log_path(home: Path) -> Path:
    return home / "log" / LOG_NAME


def make(
    source: str,
    vault: str | None,
    prompt: str,
    paths: Iterable[str],
    chars: int,
    *,
    keep_prompt: bool = False,
    now: float | None = None,
    band: str | None = None,
    pointers: Iterable[str] = (),
    second_opinion: bool = False,
    passages: Iterable[str] = (),
    left_out: Iterable[str] = (),
    signals: Iterable[str] = (),
    session: str | None = None,
) -> Injection:
    """The record for one injection (pure apart from the clock)."""
    t = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"
    return Injection(
        time=stamp,
        source=source,
        vault=vault,
        prompt_sha256=prompt_hash(prompt) if prompt else None,
        paths=tuple(paths),
        chars=chars,
        prompt=prompt[:MAX_KEPT_PROMPT_CHARS] if keep_prompt and prompt else None,
        band=band,
        pointers=tuple(pointers),
        second_opinion=second_opinion,
        passages=tuple(passages),
        left_out=tuple(left_out),
        signals=tuple(signals),
        session=session,
    )


def append(home: Path, entry: Injection, *, max_bytes: int = MAX_BYTES) -> None:
    """Add `entry` to the log under `home`, rotating it past `max_bytes`. Never raises."""
    from ..errors import SymlinkRefused
    from ..files import append_line

    path = log_path(home)
    line = json.dumps(entry.to_dict(), ensure_ascii=False).encode("utf-8", "replace") + b"\n"
    try:
        try:
            if path.lstat().st_size + len(line) > max_bytes:
                os.replace(path, path.with_name(LOG_NAME + ".1"))  # renames a link, never follows
        except FileNotFoundError:
            pass
        # Never through a symbolic link, the file's or its folder's (files.py).
        append_line(path, line, below=home)
    except (OSError, SymlinkRefused) as exc:
        log.warning("cannot write the injection log %s: %s", path, exc)


def record(
    settings_home: Path,
    *,
    enabled: bool,
    keep_prompt: bool,
    source: str,
    vault: str | None,
    prompt: str,
    paths: Sequence[str],
    chars: int,
    band: str | None = None,
    pointers: Sequence[str] = (),
    second_opinion: bool = False,
    passages: Sequence[str] = (),
    left_out: Sequence[str] = (),
    signals: Sequence[str] = (),
    session: str | None = None,
) -> None:
    """Record one injection when the log is enabled (VAULTMEM_LOG_INJECTIONS)."""
    if enabled and chars > 0:
        entry = make(
            source,
            vault,
            prompt,
            paths,
            chars,
            keep_prompt=keep_prompt,
            band=band,
            pointers=pointers,
            second_opinion=second_opinion,
            passages=passages,
            left_out=left_out,
            signals=signals,
            session=session,
        )
        append(settings_home, entry)


def read(home: Path, last: int | None = None) -> list[Injection]:
    """The recorded injections, oldest first (the rotated file, then the current one); the
    `last` ones only when given. Lines that cannot be parsed are passed over."""
    from ..files import read_regular

    path = log_path(home)
    out: list[Injection] = []
    for part in (path.with_name(LOG_NAME + ".1"), path):
        try:
            raw = read_regular(part, below=home)  # a symbolic link: SymlinkRefused
        except OSError:
            continue
        if raw is None:
            continue
        for line in raw.decode("utf-8", "replace").splitlines():
            try:
                data = json.loads(line)
                out.append(
                    Injection(
                        time=str(data["time"]),
                        source=str(data["source"]),
                        vault=_optional_str(data.get("vault")),
                        prompt_sha256=_optional_str(data.get("prompt_sha256")),
                        paths=tuple(str(p) for p in data.get("paths") or ()),
                        chars=int(data.get("chars") or 0),
                        band=_optional_str(data.get("band")),
                        pointers=tuple(str(p) for p in data.get("pointers") or ()),
                        prompt=_optional_str(data.get("prompt")),
                        second_opinion=data.get("second_opinion") is True,
                        passages=tuple(str(p) for p in data.get("passages") or ()),
                        left_out=tuple(str(p) for p in data.get("left_out") or ()),
                        signals=tuple(str(p) for p in data.get("signals") or ()),
                        session=_optional_str(data.get("session")),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue
    return out[-last:] if last else out


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
