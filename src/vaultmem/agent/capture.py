"""Session capture (opt-in): Claude Code's SessionEnd hook queues the ended session for
`vaultmem distill`, and returns at once.

Design decisions:
- The hook only queues: it reads the payload (`session_id`, `transcript_path`, `cwd`,
  `hook_event_name`, `reason`), checks it, writes one small entry and exits 0, whatever
  happens. Distilling (a `claude -p` call) is the user's, later (`vaultmem distill`).
- The queue is a folder of one file per ended session in the user's vaultmem home (never in a
  repository), each written atomically: the hook never waits on a lock held by `distill`,
  and `distill` removes an entry only once its notes are committed, so a crash or a failing
  `claude` loses nothing and a concurrent hook's entry is never overwritten by a rewrite.
- A transcript is accepted only from Claude Code's own folder (`~/.claude/projects`, or
  `$CLAUDE_CONFIG_DIR/projects`): a regular `.jsonl` file there, reached through no symbolic
  link below that folder. Checked when queued and again when read.
- Capture is skipped for the project folders the user excluded (VAULTMEM_CAPTURE_EXCLUDE, from
  the environment or the registry, never from a repository), and for `distill`'s own `claude -p`
  (DISTILLING_ENV), so distilling never queues itself.
- Standard library only: the hook runs as `python -S hook_entry.py capture-session`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

QUEUE_DIR = "capture-queue"
DISTILLING_ENV = "VAULTMEM_DISTILLING"
EXCLUDE_ENV = "VAULTMEM_CAPTURE_EXCLUDE"
MAX_PAYLOAD_BYTES = 64 * 1024
STDIN_SECONDS = 1.0
MAX_FIELD_CHARS = 4096


@dataclass(frozen=True)
class Queued:
    """One ended session waiting for `distill`."""

    session_id: str
    transcript_path: str
    cwd: str
    reason: str
    queued_at: float
    name: str = ""  # the entry's file name in the queue folder

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("name")
        return out


def claude_projects_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where Claude Code keeps its transcripts: $CLAUDE_CONFIG_DIR/projects, else
    ~/.claude/projects."""
    env = os.environ if environ is None else environ
    base = env.get("CLAUDE_CONFIG_DIR") or str(Path.home() / ".claude")
    return Path(base).expanduser() / "projects"


def accepted_transcript(path: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """`path` as a transcript vaultmem may read, or None: an absolute `.jsonl` path inside
    Claude Code's projects folder (named as it is or as it resolves), every folder below that
    one a real folder, the file a regular file (never a symbolic link)."""
    if not path or "\0" in path or not os.path.isabs(path) or not path.endswith(".jsonl"):
        return None
    given = Path(os.path.normpath(path))
    base = claude_projects_dir(environ)
    try:
        real_base = base.resolve(strict=True)
    except OSError:
        return None
    rel: Path | None = None
    for root in (Path(os.path.normpath(base)), real_base):
        with contextlib.suppress(ValueError):
            rel = given.relative_to(root)
            break
    if rel is None or not rel.parts or ".." in rel.parts:
        return None
    here = real_base
    st = None
    for part in rel.parts:
        here = here / part
        try:
            st = here.lstat()
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return None
    return here if st is not None and stat.S_ISREG(st.st_mode) else None


def excluded(cwd: str, patterns: Sequence[str]) -> bool:
    """True when `cwd` is one of the excluded folders or inside one."""
    if not cwd:
        return False
    try:
        here = Path(cwd).expanduser().resolve()
    except OSError:
        return False
    for raw in patterns:
        try:
            folder = Path(raw).expanduser().resolve()
        except OSError:
            continue
        if here == folder or folder in here.parents:
            return True
    return False


def exclusions(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    from ..config import user_setting

    raw = user_setting(EXCLUDE_ENV, environ)
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def queue_dir(home: Path) -> Path:
    return home / QUEUE_DIR


def _text(value: object) -> str:
    return value[:MAX_FIELD_CHARS] if isinstance(value, str) else ""


def enqueue(home: Path, payload: Mapping[str, object], now: float | None = None) -> Queued:
    """Write one queue entry for a SessionEnd payload (already checked)."""
    from ..files import atomic_write

    when = time.time() if now is None else now
    item = Queued(
        session_id=_text(payload.get("session_id")),
        transcript_path=_text(payload.get("transcript_path")),
        cwd=_text(payload.get("cwd")),
        reason=_text(payload.get("reason")),
        queued_at=when,
    )
    digest = hashlib.sha256(f"{item.session_id}\0{item.transcript_path}".encode()).hexdigest()
    name = f"{int(when * 1e6):020d}-{digest[:16]}.json"
    atomic_write(
        queue_dir(home) / name, json.dumps(item.to_dict()) + "\n", below=home, dir_mode=0o700
    )
    return Queued(**{**asdict(item), "name": name})


def read_queue(home: Path) -> list[Queued]:
    """The queued sessions, oldest first (entries that do not parse are skipped)."""
    from ..files import read_regular

    folder = queue_dir(home)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
    except OSError:
        return []
    out = []
    for name in names:
        try:
            data = json.loads(
                read_regular(folder / name, below=home, limit=MAX_PAYLOAD_BYTES) or b""
            )
            out.append(
                Queued(
                    session_id=str(data["session_id"]),
                    transcript_path=str(data["transcript_path"]),
                    cwd=str(data.get("cwd") or ""),
                    reason=str(data.get("reason") or ""),
                    queued_at=float(data.get("queued_at") or 0),
                    name=name,
                )
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def dequeue(home: Path, items: Sequence[Queued]) -> None:
    """Remove `items` from the queue (once their notes are committed)."""
    for item in items:
        if item.name and "/" not in item.name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(queue_dir(home) / item.name)


@dataclass(frozen=True)
class Decision:
    """What the hook did with one payload: queued, or why not (a code, for tests and logs)."""

    queued: bool
    code: str


def capture(payload: Mapping[str, object], home: Path, environ: Mapping[str, str]) -> Decision:
    """Check one SessionEnd payload and queue it. Never raises for a bad payload."""
    if environ.get(DISTILLING_ENV):
        return Decision(False, "distilling")
    if payload.get("hook_event_name") not in (None, "SessionEnd"):
        return Decision(False, "not-session-end")
    session = payload.get("session_id")
    if not isinstance(session, str) or not session:
        return Decision(False, "no-session")
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or accepted_transcript(transcript, environ) is None:
        return Decision(False, "transcript-not-claude-code")
    cwd = payload.get("cwd")
    if isinstance(cwd, str) and excluded(cwd, exclusions(environ)):
        return Decision(False, "excluded")
    enqueue(home, payload)
    return Decision(True, "queued")


def _read_stdin(seconds: float = STDIN_SECONDS) -> bytes:
    """The payload: read until end of input, a whole JSON object, or `seconds` (a caller that
    never closes standard input must not hold the hook)."""
    import select

    fd = sys.stdin.fileno()
    data = b""
    deadline = time.monotonic() + seconds
    while len(data) < MAX_PAYLOAD_BYTES:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        with contextlib.suppress(ValueError):
            json.loads(data)
            break
    return data[:MAX_PAYLOAD_BYTES]


def main() -> None:
    """`capture-session`: the SessionEnd hook. Always exits 0, prints nothing."""
    try:
        from ..config import user_home

        payload = json.loads(_read_stdin() or b"null")
        if isinstance(payload, dict):
            capture(payload, user_home(), os.environ)
    except Exception:  # noqa: BLE001, S110 - a hook fails open: the session is over anyway
        pass
    sys.exit(0)
