"""What the agent is given for a prompt: standing preferences (Layer B) and the notes relevant
to it (Layer A), each rendered as a fenced block (`render`), once per prompt.

`build_context` is the library entry point (the `context` command, the wrapper): it resolves the
registered vault, reads the preferences, retrieves (`search.retrieve`) and renders both layers.
`hook_context` answers Claude Code's per-prompt hook payload with the same blocks, for the cold
hook process and the warm service alike; `run_bounded` keeps it within the hook's time limit.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import VaultmemError
from ..files import prune_stale
from . import delivery
from .provenance import note_source
from .render import MemoryBlock, memory_block, render_plan
from .session import SessionLedger

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..config import Settings
    from ..embed import Embedder
    from ..search import Hit, Retrieval, SecondOpinion
    from ..store import db
    from ..store.db import Conn

log = logging.getLogger(__name__)

# --- library entry point ---------------------------------------------------------------------

# The preferences file inside a vault (Layer B), as the vault's index holds it.
VAULT_MEMORY_PATH = "MEMORY.md"
DEFAULT_AGENT_FOLDER = "agent"
# Two hooks that fire for the same prompt (an installed one and the wrapper's session hook)
# must not both add notes: the first claims the prompt for this long.
DUPLICATE_WINDOW_SECONDS = 10.0


@dataclass(frozen=True)
class Preferences:
    """Layer B: the text to inject (may be ""), where it came from, and why nothing was loaded."""

    text: str
    source: str | None  # for display: "~/.claude/MEMORY.md", "MEMORY.md in vault notes"
    vault_path: str | None = None  # set when it is the vault's own MEMORY.md (not a Layer A hit)
    notice: str | None = None  # e.g. "MEMORY.md in vault notes is quarantined: ..."


def _read_own_file(path: Path, max_chars: int) -> str:
    """The user's own preferences file (outside any vault), `<private>` spans removed."""
    from ..index.markdown import strip_private_spans

    # Read at most a generous multiple of the budget: a huge file must not cost time.
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        return strip_private_spans(fh.read(max(4096, max_chars * 8)))


def user_preferences(settings: Settings, agent_dir: Path | None = None) -> Preferences | None:
    """The user's own preferences file: VAULTMEM_MEMORY_FILE (from the environment or the
    user config, never a repository), else ~/.claude/MEMORY.md; None when there is none.
    A file inside `agent_dir` (the vault's agent folder) is the agent's, never preferences."""
    candidates = [settings.memory_file] if settings.memory_file else []
    candidates.append(Path.home() / ".claude" / "MEMORY.md")
    for path in candidates:
        if path is not None and path.is_file():
            if agent_dir is not None and _inside(path, agent_dir):
                return Preferences(
                    "",
                    _display(path),
                    notice=f"{_display(path)} is in the vault's agent folder: the agent's notes "
                    "are never preferences",
                )
            try:
                return Preferences(_read_own_file(path, settings.memory_max_chars), _display(path))
            except OSError as exc:
                log.warning("cannot read %s: %s", path, exc)
                return Preferences("", _display(path), notice=f"cannot read {_display(path)}")
    return None


def vault_preferences(
    conn: Conn, vault: db.Vault, agent_folder: str = DEFAULT_AGENT_FOLDER
) -> Preferences | None:
    """The vault's MEMORY.md exactly as the index holds it: committed (never the work tree),
    decided by the same triage as every note (a quarantined or skipped one is not used) and with
    its `<private>` spans already removed. None when the vault has no MEMORY.md. One the agent
    wrote (`provenance.note_source`) is not used: the agent's notes are never preferences."""
    from .. import store

    source = f"{VAULT_MEMORY_PATH} in vault {vault.name}"
    chunks = store.chunk_texts(conn, vault.id, VAULT_MEMORY_PATH)
    if chunks:
        fm = store.note_front_matter(conn, vault.id, [VAULT_MEMORY_PATH])
        conn.commit()
        if note_source(VAULT_MEMORY_PATH, fm.get(VAULT_MEMORY_PATH), agent_folder).agent:
            return Preferences(
                "",
                source,
                VAULT_MEMORY_PATH,
                notice=f"{source} was written by the agent, so it is not used as preferences",
            )
        return Preferences("\n\n".join(chunks), source, VAULT_MEMORY_PATH)
    held = store.held_kind(conn, vault.id, VAULT_MEMORY_PATH)
    conn.commit()
    if held is None:
        return None
    return Preferences(
        "",
        source,
        VAULT_MEMORY_PATH,
        notice=f"{source} is {held}, so it is not used (`vaultmem audit list`)",
    )


@dataclass(frozen=True)
class ContextResult:
    """What `build_context` produced: the text to inject and notes for the person running it."""

    text: str
    notices: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()  # what the text holds: the preferences source, then notes
    band: str | None = None  # the notes' band: "notes" (some full text), "pointers", or None
    pointers: tuple[str, ...] = ()  # the notes given as pointers (also in `paths`)
    # Whether the notes were judged with the second opinion too (`search.second_opinion`).
    second_opinion: bool = False
    # The notes delivered, item by item, and the kept ones left out (`agent.delivery`)
    plan: delivery.Plan = delivery.Plan()
    # The preferences block, and what of the file it had no room for
    preferences: MemoryBlock | None = None
    # What the search found and the gate's verdict on every candidate, for an explanation
    # (`search.explain`); None when no notes were searched.
    retrieval: Retrieval | None = None

    @property
    def passages(self) -> tuple[str, ...]:
        return tuple(i.path for i in self.plan.items if i.form is delivery.Form.PASSAGE)

    @property
    def left_out(self) -> tuple[str, ...]:
        return tuple(f"{x.path}: {x.reason}" for x in self.plan.left_out)

    @property
    def signals(self) -> tuple[str, ...]:
        """Why each delivered note was given: "path: score nats (its strongest signals)", in
        the block's order, for the injection log (no note text)."""
        if self.retrieval is None:
            return ()
        from ..search.explain import strongest_signals

        judged = {v.hit.path: v for v in self.retrieval.verdicts if v.kept}
        out = []
        for item in self.plan.items:
            v = judged.get(item.path)
            if v is not None:
                out.append(
                    f"{item.path}: {v.score:.2f} nats ({', '.join(strongest_signals(v, 3))})"
                )
        return tuple(out)

    def record(
        self,
        home: Path,
        settings: Settings,
        *,
        source: str,
        vault: str | None,
        prompt: str,
        session: str | None = None,
    ) -> None:
        """Record what was given in the injection log (`injections`) as coming from `source`:
        the paths and how each was given, never the text."""
        from . import injections

        injections.record(
            home,
            enabled=settings.log_injections,
            keep_prompt=settings.log_prompts,
            source=source,
            vault=vault,
            prompt=prompt,
            paths=self.paths,
            chars=len(self.text),
            band=self.band,
            pointers=self.pointers,
            second_opinion=self.second_opinion,
            passages=self.passages,
            left_out=self.left_out,
            signals=self.signals,
            session=session,
        )

    def as_json(self) -> dict[str, object]:
        """What `vaultmem context --json` prints: the block and its items in order."""
        prefs = self.preferences
        return {
            "text": self.text,
            "chars": len(self.text),
            "band": self.band,
            "second_opinion": self.second_opinion,
            "preferences": None
            if prefs is None or not prefs.text
            else {
                "source": prefs.source,
                "chars": len(prefs.text),
                "left_out": list(prefs.left_out),
            },
            "items": [delivery.item_json(i) for i in self.plan.items],
            "left_out": [{"path": x.path, "reason": x.reason} for x in self.plan.left_out],
            "notices": list(self.notices),
        }


class Resources(Protocol):
    """Where `build_context` gets its connection and embedder. The default opens and closes a
    connection per call and makes a new embedder (`ColdResources`); a long-lived process (the
    warm service, the MCP server) passes one that keeps both loaded (`warm.WarmResources`)."""

    # Whether a prompt's query embedding starts beside the database work (embed.prefetching):
    # worth it where the embedder is already loaded.
    prefetch: bool

    def connection(
        self, settings: Settings, *, start: bool, timeout: int
    ) -> AbstractContextManager[Conn]: ...

    def embedder(self, settings: Settings) -> Embedder: ...

    def second_opinion(self, settings: Settings) -> SecondOpinion | None: ...


class ColdResources:
    """A new connection per call (closed after it) and a new embedder: one-shot processes.

    `second_opinion`: load the second opinion too (~1.3 s, once per process) where the
    vault's model is calibrated with it: `vaultmem context` and `vaultmem query` do; the cold
    hook, bound by Claude Code's hook timeout, does not."""

    prefetch = False  # the embedder loads on its first call: nothing to start early

    def __init__(self, *, second_opinion: bool = False) -> None:
        self.with_second_opinion = second_opinion

    def connection(
        self, settings: Settings, *, start: bool, timeout: int
    ) -> AbstractContextManager[Conn]:
        from ..store import db

        conn = db.connect(settings, start=start, timeout=timeout)
        try:
            db.check_readable(conn)  # a role set up wrong, a schema newer than this code
        except BaseException:
            conn.close()
            raise
        return conn

    def embedder(self, settings: Settings) -> Embedder:
        from ..embed import get_embedder

        return get_embedder(settings)

    def second_opinion(self, settings: Settings) -> SecondOpinion | None:
        if not self.with_second_opinion:
            return None  # the cold hook: imports nothing it does not use
        from ..embed.second_opinion import wanted
        from ..search.second_opinion import SecondOpinion

        return SecondOpinion.shared() if wanted(settings) else None


def build_context(
    settings: Settings,
    prompt: str,
    *,
    vault_root: Path | None = None,
    include_memory: bool = True,
    include_notes: bool = True,
    max_chars: int | None = None,
    k: int = 5,
    start_db: bool = False,
    db_timeout: int = 3,
    claim: tuple[Path, str] | None = None,
    resources: Resources | None = None,
    shared: str | None = None,
    session: str | None = None,
) -> ContextResult:
    """Layer B (preferences) then Layer A (notes relevant to `prompt`), or "" if neither has any.

    Library entry point for the hook, the wrapper and `vaultmem context`. `vault_root` must be a
    vault the caller resolved from the user's registry (`vaults.resolve`); nothing else is
    read. Does not start the bundled database unless `start_db` (a per-prompt hook must stay
    fast). `claim` (a directory and a key) makes a second call for the same key within
    DUPLICATE_WINDOW_SECONDS add no notes. Database errors propagate when notes are wanted;
    callers that must fail open catch them. `resources` supplies the connection and embedder
    (default: `ColdResources`). `shared` names a registered shared vault to read instead of
    `vault_root` (it has no folder on this machine: its notes come from the server).
    `session` (Claude Code's session id) keeps a chunk delivered in full once in the session
    from being delivered again (`session.SessionLedger`): it comes back as a one-line reminder.
    """
    from ..search import Prompt, Request, Retrieval, retrieve
    from ..store import db

    res = resources if resources is not None else ColdResources()

    notices: list[str] = []
    prefs: Preferences | None = None
    agent_dir = vault_root / settings.agent_folder if vault_root is not None else None
    if include_memory and settings.memory_file is not None:
        prefs = user_preferences(settings, agent_dir)
    has_vault = vault_root is not None or shared is not None
    wants_notes = include_notes and has_vault and bool(prompt.strip())
    # Decided once, before touching the database or loading a model; the search reuses it.
    asked = Prompt.of(prompt) if wants_notes else None
    if asked is not None and asked.content_free:
        wants_notes = False
    if wants_notes and claim is not None and not _claim(*claim):
        wants_notes = False
    needs_db = has_vault and (wants_notes or (include_memory and prefs is None))
    found = Retrieval(())
    provenance: dict[str, dict[str, str]] = {}
    embedder: Embedder | None = None
    opinion = res.second_opinion(settings) if wants_notes else None
    if opinion is not None and res.prefetch and asked is not None:
        # A loaded second opinion embeds the prompt first (~1.5 ms), then the vault's model
        # starts on it beside the database work.
        opinion = opinion.answered(asked.text)
    with ExitStack() as stack:
        if wants_notes and res.prefetch and asked is not None:
            from ..embed import prefetching

            # A loaded embedder starts on the prompt now, beside the database work below (on
            # the part that is searched: a huge paste is embedded no further than that).
            embedder = stack.enter_context(prefetching(res.embedder(settings), asked.text))
        if needs_db:
            try:
                opened = res.connection(settings, start=start_db, timeout=db_timeout)
            except VaultmemError:
                if wants_notes:
                    raise
                opened = None  # preferences only: fall back to the user's own file below
            if opened is not None:
                with opened as conn:
                    vault = (
                        db.find_shared_vault(conn, shared)
                        if shared is not None
                        else db.find_vault(
                            conn,
                            vault_root,  # type: ignore[arg-type]
                            installation=settings.installation,
                        )
                    )
                    if vault is not None:
                        if include_memory and prefs is None:
                            prefs = vault_preferences(conn, vault, settings.agent_folder)
                        if wants_notes and asked is not None:
                            embedder = embedder or res.embedder(settings)
                            asking = Request.of(settings, asked, k=k, second_opinion=opinion)
                            found = retrieve(conn, vault, asking, embedder)
                            provenance = sources(
                                conn, vault, list(found.hits), settings.agent_folder
                            )
    if include_memory and (prefs is None or (not prefs.text.strip() and prefs.vault_path)):
        if prefs is not None and prefs.notice:
            notices.append(prefs.notice)
        own = user_preferences(settings, agent_dir)
        prefs = own if own is not None else prefs
    blocks: list[str] = []
    paths: list[str] = []
    prefs_block: MemoryBlock | None = None
    if prefs is not None:
        if prefs.notice and prefs.notice not in notices:
            notices.append(prefs.notice)
        prefs_block = memory_block(prefs.text, settings.memory_max_chars, source=prefs.source or "")
        block = prefs_block.text
        if prefs_block.left_out:
            notices.append(
                f"{prefs.source or 'MEMORY.md'} is over its {settings.memory_max_chars}-character "
                f"budget (VAULTMEM_MEMORY_MAX_CHARS): {prefs_block.left_out_text} left out"
            )
        if block:
            blocks.append(block)
            paths.append(prefs.vault_path or prefs.source or "")
    ledger = SessionLedger.of(settings.home, session) if session else None
    chosen = notes_plan(
        settings,
        found,
        asked.text if asked is not None else "",
        provenance,
        max_chars=max_chars,
        seen=ledger.seen() if ledger is not None else (),
        # The preferences file is already in Layer B; do not spend Layer A's budget on it.
        preferences_given=prefs is not None and prefs.vault_path is not None,
    )
    band = None
    if chosen.items:
        blocks.append(render_plan(chosen.items))
        paths.extend(i.path for i in chosen.items)
        band = "notes" if chosen.delivered else "pointers"
        if ledger is not None:
            ledger.add(chosen.remembered)
    return ContextResult(
        "\n\n".join(blocks),
        tuple(notices),
        tuple(paths),
        band,
        tuple(i.path for i in chosen.pointers),
        # a judged hit carries the second opinion's cosine only when the gate weighed it
        second_opinion=band is not None and any(h.agnostic is not None for h in found.hits),
        plan=chosen,
        preferences=prefs_block,
        retrieval=found if wants_notes else None,
    )


def notes_plan(
    settings: Settings,
    found: Retrieval,
    prompt: str,
    provenance: Mapping[str, Mapping[str, str]],
    *,
    max_chars: int | None = None,
    seen: Collection[str] = (),
    preferences_given: bool = False,
) -> delivery.Plan:
    """What the agent gets of a prompt's kept notes (`delivery.plan`), for every reader alike:
    `vaultmem context`, the hook, `vaultmem query` and MCP `search` (which pass the same
    settings, so they show the same items in the same order with the same delivery). The
    passages are chosen by the terms' rarity in the vault and the judging calibration's
    passage coverage, both from `found`. `preferences_given`: the vault's MEMORY.md is
    already in the preferences block."""
    hits = list(found.hits)
    if settings.memory_file is None or preferences_given:
        # Without a preferences file of the user's own, the vault's MEMORY.md is Layer B even
        # when this block leaves it out (`claude-hook --no-memory`: the wrapper put it in the
        # system prompt already): never a retrieved note as well.
        hits = [h for h in hits if h.path != VAULT_MEMORY_PATH]
    return delivery.plan(
        hits,
        prompt=prompt,
        weights=delivery.term_weights(found.rarity),
        budget=settings.context_max_chars if max_chars is None else max_chars,
        provenance=provenance,
        seen=seen,
        passage_coverage=found.passage_coverage,
    )


def sources(
    conn: Conn, vault: db.Vault, hits: Sequence[Hit], agent_folder: str
) -> dict[str, dict[str, str]]:
    """path -> the fence attributes saying who wrote it, for the hits the agent wrote
    (`provenance.note_source` over the front matter the index holds)."""
    from .. import store

    if not hits:
        return {}
    paths = [h.path for h in hits]
    fm = store.note_front_matter(conn, vault.id, paths)
    conn.commit()
    out = {p: note_source(p, fm.get(p), agent_folder).attrs() for p in paths}
    return {p: a for p, a in out.items() if a}


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (OSError, ValueError):
        return False
    return True


def _claim(directory: Path, key: str) -> bool:
    """True for the first caller with `key` within DUPLICATE_WINDOW_SECONDS, False after."""
    import hashlib
    import time

    name = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        marker = directory / name
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            # Claims long past their window go, at most once a window per process: the warm
            # service claims for every prompt, and a scan per prompt cost it milliseconds.
            prune_stale(
                directory,
                older_than=DUPLICATE_WINDOW_SECONDS * 10,
                every=DUPLICATE_WINDOW_SECONDS,
            )
            return True
        except FileExistsError:
            # lstat / utime of the name itself: a link planted here is never followed.
            if time.time() - marker.lstat().st_mtime < DUPLICATE_WINDOW_SECONDS:
                return False
            os.utime(marker, follow_symlinks=False)
            return True
    except OSError:
        return True  # no place to record the claim: better twice than never


def _display(path: Path | None) -> str:
    if path is None:
        return "MEMORY.md"
    home = Path.home()
    try:
        return "~/" + path.relative_to(home).as_posix()
    except ValueError:
        return path.as_posix()


# --- Claude Code hook and fail-open helpers --------------------------------------------------


def hook_context(
    payload: bytes | str,
    *,
    include_memory: bool = True,
    resources: Resources | None = None,
    source: str = "claude-hook",
) -> str:
    """The context for one Claude Code UserPromptSubmit payload (JSON with `prompt`, `cwd`...).

    The vault is VAULTMEM_VAULT, else the registered vault holding the payload's `cwd`, else
    the default vault (`vaults.resolve`): a repository Claude Code was opened in is never read
    unless the user registered it. Raises on bad input or an unreachable database;
    `claude-hook` turns every failure into no output. What is injected is recorded in the
    injection log (`injections`) as coming from `source`.
    """
    from .. import vaults
    from ..config import load_settings, user_home

    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("hook input is not a JSON object")
    event = data.get("hook_event_name")
    if event not in (None, "UserPromptSubmit"):
        return ""
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return ""
    cwd = data.get("cwd")
    user = vaults.load()
    entry = vaults.resolve(user, cwd=Path(cwd) if isinstance(cwd, str) and cwd else None)
    root = entry.path if entry is not None else None
    settings = load_settings(root, user=user, entry=entry)
    session = data.get("session_id")
    claim = None
    if isinstance(session, str) and session:
        claim = (settings.home / "run" / "claude-hook", f"{session}\0{prompt}")
    result = build_context(
        settings,
        prompt,
        vault_root=root,
        include_memory=include_memory,
        claim=claim,
        resources=resources,
        shared=entry.shared if entry is not None else None,
        session=session if isinstance(session, str) and session else None,
    )
    result.record(
        user_home(user),
        settings,
        source=source,
        vault=entry.name if entry is not None else None,
        prompt=prompt,
        session=session if isinstance(session, str) and session else None,
    )
    return result.text


def run_bounded(
    fn: Callable[[], str], seconds: float, *, warn: Callable[[str], object] | None = None
) -> str | None:
    """Run `fn` in a daemon thread; its result, or None if it raised or took over `seconds`.
    A failure is said through `warn` (default: the log)."""
    box: dict[str, str] = {}
    errors: list[BaseException] = []

    def target() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - fail open means every failure
            errors.append(exc)

    worker = threading.Thread(target=target, name="vaultmem-bounded", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        log.warning("gave up after %.1f s", seconds)
        return None
    if errors:
        if warn is not None:
            warn(f"failed: {errors[0]}")
        else:
            log.warning("failed: %s", errors[0])
        return None
    return box.get("out", "")


# A session's warnings are remembered this long (a day: longer than any one session's pauses).
WARNED_KEEP_SECONDS = 86400.0


def warn_once_per_session(payload: bytes | str, message: str, home: Path | None = None) -> bool:
    """Write `message` to stderr unless this Claude Code session (the payload's `session_id`)
    was told it already: a database that is down, or a schema newer than this code, fails
    every prompt the same way, and one line says it. True if written. Without a session id,
    or with nowhere to remember, it is written every time."""
    import hashlib
    import sys

    from ..config import user_home

    try:
        data = json.loads(payload)
        session = data.get("session_id") if isinstance(data, dict) else None
    except ValueError:
        session = None
    first = True
    if isinstance(session, str) and session:
        key = hashlib.sha256(f"{session}\0{message}".encode("utf-8", "surrogatepass")).hexdigest()
        directory = (home or user_home()) / "run" / "claude-hook-warned"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.close(os.open(directory / key[:32], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            prune_stale(directory, older_than=WARNED_KEEP_SECONDS, every=3600.0)
        except FileExistsError:
            first = False
        except OSError:
            pass  # nowhere to remember: better every time than never
    if first:
        sys.stderr.write(f"vaultmem claude-hook: {message}\n")
        sys.stderr.flush()
    return first
