"""`vaultmem distill`: turn queued sessions (`agent.capture`) into notes, through `remember`.

Design decisions:
- The user's own `claude -p` does the reading (VAULTMEM_CLAUDE_BIN, else `claude` on PATH),
  with the prompt kept in the package (`distill_prompt.md`) as its argument and a compact
  excerpt of the session on standard input: the user's and the assistant's text only (no tool
  calls, tool output or thinking), bounded (MAX_READ_BYTES read, MAX_EXCERPT_CHARS sent), with
  vaultmem's own injected blocks cut out so memory is not distilled back into memory. The
  transcript itself is never written to the vault. `claude` runs in an empty temporary folder
  (no project of the user's to act on), with DISTILLING_ENV set so its own SessionEnd is not
  queued, and `--output-format json` so its answer is one object whose `result` holds ours.
- Every note goes through `write.remember` (`trailer` "distill"): scanned before it exists, a
  sensitive one refused and reported by category only; a title the agent already used gets a
  dated entry instead of a near-duplicate.
- Nothing is lost: a queue entry is removed only after all of its notes are committed. When
  `claude` fails (missing, non-zero exit, timeout, output that is not the JSON asked for),
  distill stops with `ClaudeFailed` (one sentence, never claude's own output, which may quote the
  session) and the entry stays queued. Notes parsed and written are recorded in the entry, so a
  retry after a failed write neither asks `claude` again nor writes a note twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ClaudeFailed, ConfigError
from ..files import atomic_write, open_regular, read_regular
from ..index.sensitive import redact
from . import capture

KINDS = ("decision", "fix", "gotcha", "todo")
PROMPT_RESOURCE = "distill_prompt.md"
MAX_READ_BYTES = 8 * 1024 * 1024
HEAD_BYTES = 1024 * 1024
MAX_EXCERPT_CHARS = 24_000
MAX_TURN_CHARS = 2_000
MAX_NOTES = 5
MAX_TITLE_CHARS = 80
MAX_TEXT_CHARS = 4_000
MAX_TAGS = 4
MAX_OUTPUT_BYTES = 1024 * 1024
# vaultmem's own injected blocks: never distilled back into memory.
_INJECTED_RE = re.compile(
    r"<(retrieved_context|user_preferences|search_results|recent_notes)\b.*?</\1>", re.S
)


def prompt_text() -> str:
    return resources.files(__package__).joinpath(PROMPT_RESOURCE).read_text(encoding="utf-8")


# --- the excerpt (pure) ----------------------------------------------------------------------


def _texts(content: object) -> list[str]:
    """The text of one message's content: a string, or the `text` blocks of a list (tool
    calls, tool results, thinking and images left out)."""
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    out.append(text)
    return out


def turns(lines: Iterable[bytes]) -> list[tuple[str, str]]:
    """(role, text) of the user's and the assistant's messages in transcript JSONL lines."""
    out = []
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("type") not in ("user", "assistant"):
            continue
        if record.get("isMeta") or record.get("isSidechain"):
            continue
        message = record.get("message")
        if not isinstance(message, dict):
            continue
        role = message.get("role") or record["type"]
        text = "\n".join(_texts(message.get("content")))
        text = _INJECTED_RE.sub("", text).strip()
        if text and role in ("user", "assistant"):
            out.append((str(role), text))
    return out


def excerpt(pairs: list[tuple[str, str]], max_chars: int = MAX_EXCERPT_CHARS) -> str:
    """The session as `User:` / `Assistant:` paragraphs, each turn at most MAX_TURN_CHARS, the
    whole at most `max_chars`: the beginning (the task) and as much of the end (where decisions
    and fixes land) as fits, the cut marked."""
    parts = []
    for role, text in pairs:
        if len(text) > MAX_TURN_CHARS:
            text = text[: MAX_TURN_CHARS - 1] + "…"
        parts.append(f"{'User' if role == 'user' else 'Assistant'}: {text}")
    whole = "\n\n".join(parts)
    if len(whole) <= max_chars:
        return whole
    marker = "\n\n[…earlier part of the session left out…]\n\n"
    head_room = max_chars // 4
    tail_room = max_chars - head_room - len(marker)
    return whole[:head_room] + marker + whole[-tail_room:]


def read_excerpt(path: Path, below: Path) -> str:
    """The excerpt of the transcript at `path`, opened with no link followed below `below`
    (Claude Code's projects folder; `capture.accepted_transcript` checked it). At most
    MAX_READ_BYTES are read: of a longer transcript its first HEAD_BYTES (the task) and the
    rest from its end (where the outcome is), whole lines only."""
    fd = open_regular(path, os.O_RDONLY, below=below)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= MAX_READ_BYTES:
            lines = fh.read().splitlines()
        else:
            head = fh.read(HEAD_BYTES).splitlines()[:-1]  # the last line may be cut
            fh.seek(size - (MAX_READ_BYTES - HEAD_BYTES))
            lines = head + fh.read().splitlines()[1:]  # so may the first
    return excerpt(turns(lines))


# --- claude's answer (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class Note:
    kind: str
    title: str
    text: str
    tags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "title": self.title, "text": self.text, "tags": list(self.tags)}


class BadAnswer(ValueError):
    """claude's output is not the JSON asked for."""


def _json_in(text: str) -> object:
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    for candidate in (text, fenced.group(1) if fenced else None):
        if candidate is None:
            continue
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            return json.loads(text[start : end + 1])
        except ValueError:
            pass
    raise BadAnswer("no JSON object in the answer")


def parse_answer(stdout: bytes) -> list[Note]:
    """The notes in `claude -p --output-format json`'s output: its `result` holds our JSON
    (`{"notes": [...]}`). Notes of an unknown kind or without title or text are dropped;
    raises BadAnswer when there is no such JSON at all."""
    try:
        envelope = json.loads(stdout)
    except ValueError:
        raise BadAnswer("the output is not JSON") from None
    if isinstance(envelope, dict) and "result" in envelope:
        if envelope.get("is_error"):
            raise BadAnswer("claude reported an error")
        result = envelope["result"]
        data = _json_in(result) if isinstance(result, str) else result
    else:
        data = envelope
    items = data.get("notes") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise BadAnswer("the answer has no list of notes")
    notes = []
    for item in items[:MAX_NOTES]:
        if not isinstance(item, dict):
            continue
        kind = str(item.get("kind") or "").strip().lower()
        title = " ".join(str(item.get("title") or "").split())[:MAX_TITLE_CHARS]
        text = str(item.get("text") or "").strip()[:MAX_TEXT_CHARS]
        tags_raw = item.get("tags")
        tags = tags_raw if isinstance(tags_raw, list) else []
        clean_tags = tuple(
            t.strip().lower()[:40] for t in tags[:MAX_TAGS] if isinstance(t, str) and t.strip()
        )
        if kind in KINDS and title and text:
            notes.append(Note(kind, title, text, clean_tags))
    return notes


# --- running claude --------------------------------------------------------------------------


def claude_binary(configured: str, environ: Mapping[str, str] | None = None) -> str:
    """VAULTMEM_CLAUDE_BIN, else `claude` on PATH; ClaudeFailed when there is none."""
    env = os.environ if environ is None else environ
    wanted = configured or "claude"
    found = shutil.which(wanted, path=env.get("PATH"))
    if found is None:
        raise ClaudeFailed(
            f"`{wanted}` was not found: install Claude Code or set VAULTMEM_CLAUDE_BIN; the "
            "queued sessions stay queued"
        )
    return found


def ask_claude(binary: str, text: str, timeout: float) -> list[Note]:
    """Run `claude -p PROMPT --output-format json` with `text` on standard input.

    It runs in a process group of its own, ended whole when it times out (a child it started
    does not outlive it), and at most MAX_OUTPUT_BYTES of its answer are read (a huge answer
    costs no more memory than that)."""
    env = dict(os.environ, **{capture.DISTILLING_ENV: "1"})
    with tempfile.TemporaryDirectory(prefix="vaultmem-distill-") as empty:
        try:
            proc = subprocess.Popen(
                [binary, "-p", prompt_text(), "--output-format", "json"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=empty,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise ClaudeFailed(
                f"`claude -p` could not be run ({exc.strerror or exc}): the session stays queued"
            ) from None
        answer, finished = _bounded_run(proc, text.encode("utf-8", "replace"), timeout)
    if not finished:
        raise ClaudeFailed(
            f"`claude -p` gave no answer within {timeout:g} s (VAULTMEM_DISTILL_TIMEOUT): "
            "the session stays queued; run `vaultmem distill` again"
        )
    if proc.returncode != 0:
        raise ClaudeFailed(
            f"`claude -p` exited with status {proc.returncode}: the session stays queued; check "
            "that `claude -p hello` works, then run `vaultmem distill` again"
        )
    try:
        return parse_answer(answer)
    except BadAnswer as exc:
        raise ClaudeFailed(
            f"`claude -p` did not answer with the notes asked for ({exc}): the session stays "
            "queued; run `vaultmem distill` again"
        ) from None


def _bounded_run(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> tuple[bytes, bool]:
    """Feed `data` to `proc`, read at most MAX_OUTPUT_BYTES of its output, wait at most
    `timeout` seconds; (what was read, whether it finished in time). On a timeout, or an answer
    over the limit, its whole process group is killed."""
    import signal
    import threading

    assert proc.stdin is not None and proc.stdout is not None
    out = bytearray()

    def feed() -> None:
        with contextlib.suppress(OSError):
            proc.stdin.write(data)  # type: ignore[union-attr]
        with contextlib.suppress(OSError):
            proc.stdin.close()  # type: ignore[union-attr]

    def read() -> None:
        while len(out) <= MAX_OUTPUT_BYTES:
            chunk = proc.stdout.read1(65536)  # type: ignore[union-attr]
            if not chunk:
                return
            out.extend(chunk)

    threads = [threading.Thread(target=f, daemon=True) for f in (feed, read)]
    for t in threads:
        t.start()
    threads[1].join(timeout)
    timed_out = threads[1].is_alive()
    if timed_out or len(out) > MAX_OUTPUT_BYTES:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5 if timed_out else max(1.0, timeout))
    except subprocess.TimeoutExpired:  # closed its output but runs on: end it all the same
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        timed_out = True
    threads[1].join(1)
    proc.stdout.close()
    return bytes(out[:MAX_OUTPUT_BYTES]), not timed_out


# --- the run ---------------------------------------------------------------------------------


@dataclass
class SessionResult:
    """What distill did with one queued session."""

    session_id: str
    vault: str | None = None
    written: list[dict[str, str]] = field(default_factory=list)  # path, commit, kind
    refused: list[str] = field(default_factory=list)  # categories only, never the text
    skipped: str | None = None  # why the session was dropped without notes

    def to_dict(self) -> dict[str, object]:
        return {
            "session_id": self.session_id,
            "vault": self.vault,
            "written": self.written,
            "refused": self.refused,
            "skipped": self.skipped,
        }


def _progress_path(home: Path, item: capture.Queued) -> Path:
    return capture.queue_dir(home) / item.name


def _save_progress(home: Path, item: capture.Queued, notes: list[Note], done: list[str]) -> None:
    """Record in the queue entry the notes claude gave that are still to be written, and the
    titles already handled: a note written or refused (it held a secret) leaves no text here."""
    data = item.to_dict()
    data["notes"] = [n.to_dict() for n in notes if n.title not in done]
    data["written_titles"] = done
    atomic_write(_progress_path(home, item), json.dumps(data) + "\n", below=home, dir_mode=0o700)


def _load_progress(home: Path, item: capture.Queued) -> tuple[list[Note] | None, list[str]]:
    raw = read_regular(_progress_path(home, item), below=home)
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return None, []
    if not isinstance(data, dict) or not isinstance(data.get("notes"), list):
        return None, []
    notes = parse_answer(json.dumps({"notes": data["notes"]}).encode())
    done = [t for t in data.get("written_titles") or [] if isinstance(t, str)]
    return notes, done


def distill_one(
    item: capture.Queued,
    *,
    home: Path,
    claude_bin: str,
    timeout: float,
    vault: str | None,
) -> SessionResult:
    """Distill one queued session into notes in its vault (the registered vault `vault`, else
    the one holding the session's folder, else the default), committed through `remember`."""
    from .. import vaults
    from ..config import load_settings
    from .write import MemoryRefused, NotAgentNote, Provenance, remember

    result = SessionResult(item.session_id)
    path = capture.accepted_transcript(item.transcript_path)
    if path is None:
        result.skipped = "transcript-not-readable"
        return result
    if item.cwd and capture.excluded(item.cwd, capture.exclusions()):
        result.skipped = "excluded"
        return result
    user = vaults.load()
    entry = vaults.resolve(user, vault, cwd=Path(item.cwd) if item.cwd else None)
    if entry is None:
        raise ConfigError(vaults.NO_VAULT_HINT)
    if entry.path is None:
        raise ConfigError(f"{entry.name} is a shared vault: distill writes into a vault of yours")
    result.vault = entry.name
    settings = load_settings(entry.path, user=user, entry=entry)
    notes, done = _load_progress(home, item)
    if notes is None:
        text = read_excerpt(path, capture.claude_projects_dir().resolve())
        if not text.strip():
            result.skipped = "empty-session"
            return result
        # Secrets in the session never leave the machine: masked before `claude -p` sees it.
        clean = redact(text)
        if not clean.complete:
            raise ClaudeFailed(
                "the session's excerpt could not be fully scanned for secrets, so it was not "
                "sent to `claude -p`: the session stays queued"
            )
        notes = ask_claude(claude_binary(claude_bin), clean.text, timeout)
        done = []
        _save_progress(home, item, notes, done)
    for note in notes:
        if note.title in done:
            continue
        try:
            written = remember(
                entry.path,
                note.title,
                note.text,
                tags=[note.kind, *note.tags],
                append=True,
                provenance=Provenance(item.session_id or None, item.cwd or None),
                environ={"VAULTMEM_AGENT_FOLDER": settings.agent_folder},
                trailer="distill",
            )
        except MemoryRefused as exc:
            result.refused.append(",".join(exc.categories) or "sensitive")
        except NotAgentNote:
            result.refused.append("user-note")
        else:
            result.written.append(
                {"path": written.path, "commit": written.commit, "kind": note.kind}
            )
        done.append(note.title)
        _save_progress(home, item, notes, done)
    if result.written:
        from ..config import user_home
        from . import injections

        # Every write is in `vaultmem log`: the paths, never the text.
        injections.record(
            user_home(),
            enabled=settings.log_injections,
            keep_prompt=False,
            source="distill",
            vault=entry.name,
            prompt="",
            paths=[w["path"] for w in result.written],
            chars=max(1, sum(len(n.text) for n in notes)),
        )
    return result


def run(
    home: Path,
    *,
    limit: int | None = None,
    vault: str | None = None,
    claude_bin: str = "",
    timeout: float = 300.0,
) -> tuple[list[SessionResult], int]:
    """Distill up to `limit` queued sessions (oldest first; a session queued more than once is
    read at its latest state). Returns what was done and how many sessions remain queued.
    Raises ClaudeFailed (nothing dequeued for that session) when claude fails."""
    from ..index.hook_run import run_from_git_hook

    queued = capture.read_queue(home)
    by_session: dict[str, list[capture.Queued]] = {}
    for item in queued:
        by_session.setdefault(item.session_id, []).append(item)
    order = list(by_session)[: limit if limit is not None else None]
    results: list[SessionResult] = []
    touched: set[Path] = set()
    try:
        for session in order:
            entries = by_session[session]
            latest = entries[-1]
            result = distill_one(
                latest, home=home, claude_bin=claude_bin, timeout=timeout, vault=vault
            )
            results.append(result)
            if result.written:
                from .. import vaults

                found = vaults.load().get(result.vault or "")
                if found is not None and found.path is not None:
                    touched.add(found.path)
            # Everything this session gave is committed: its entries leave the queue.
            capture.dequeue(home, entries)
    finally:
        for root in touched:
            # commit-tree runs no hooks: start the catch-up the post-commit hook would.
            run_from_git_hook(str(root), None)
    return results, len(capture.read_queue(home))
