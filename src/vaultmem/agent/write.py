"""`remember`: the agent writes one note into the vault's agent folder, scanned before it exists.

Design decision: the full note text (front matter included) goes through the ingester's own
`triage` before any byte is written, so a memory that would be quarantined is refused with its
reason category only (the secret is never echoed) and leaves no file, commit or row. The commit
itself is `index.gitwrite.commit_file`, which never touches the user's work.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import VaultmemError
from ..index.gitwrite import WriteRefused, Written, blob_at_head, commit_file, read_at_head
from ..index.triage import Quarantine, Rules, Skip, triage

AGENT_FOLDER_ENV = "VAULTMEM_AGENT_FOLDER"
DEFAULT_AGENT_FOLDER = "agent"


class MemoryRefused(VaultmemError):
    """The memory would be quarantined (it holds a credential or personal data): not written.
    `categories` names what was found (never the text)."""

    exit_code = 10

    def __init__(self, message: str, categories: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.categories = categories


class NotAgentNote(WriteRefused):
    """The note of that title is the user's: the agent adds to and replaces only its own."""


@dataclass(frozen=True)
class Provenance:
    session: str | None = None
    project: str | None = None


def agent_folder(environ: dict[str, str] | None = None) -> str:
    """The agent folder: VAULTMEM_AGENT_FOLDER from the user's environment or registry, never
    from the repository (`environ` given: from that mapping alone, for tests)."""
    from ..config import normalise_agent_folder, user_setting

    if environ is not None:
        return normalise_agent_folder(environ.get(AGENT_FOLDER_ENV, ""))
    return normalise_agent_folder(user_setting(AGENT_FOLDER_ENV))


def slug(title: str) -> str:
    text = unicodedata.normalize("NFKC", title).strip().lower()
    text = re.sub(r"[^\w]+", "-", text).strip("-")
    return text[:80] or "note"


def _front_matter(title: str, tags: list[str], prov: Provenance, date: str) -> str:
    """The note's front matter, written by a YAML emitter (quoting and escaping are its job:
    a value with a control character comes out escaped, so the front matter always parses and
    `author: agent` is never lost)."""
    from datetime import date as day

    import yaml

    # A date, not a string: the emitter writes it unquoted (`date: 2026-12-05`).
    data: dict[str, object] = {"title": title, "author": "agent", "date": day.fromisoformat(date)}
    if prov.session:
        data["session"] = prov.session
    if prov.project:
        data["project"] = prov.project
    if tags:
        data["tags"] = tags
    dumped = yaml.safe_dump(
        data, allow_unicode=True, sort_keys=False, width=10**9, default_flow_style=None
    )
    return f"---\n{dumped}---\n"


class BadText(WriteRefused):
    """A title or tag that is not plain text (a control character, bytes that are not UTF-8)."""

    exit_code = 2


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_text(what: str, value: str) -> None:
    """Refuse a title or tag that is not plain one-line text, with one sentence."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadText(
            f"the {what} is not valid text (bytes that are not UTF-8): use plain text"
        ) from None
    m = _CONTROL_RE.search(value)
    if m:
        raise BadText(
            f"the {what} holds a control character (U+{ord(m.group()):04X}): use plain "
            "one-line text"
        )


def compose(
    title: str,
    text: str,
    tags: list[str],
    prov: Provenance,
    *,
    existing: bytes | None,
    append: bool,
    now: datetime,
) -> bytes:
    date = now.strftime("%Y-%m-%d")
    if append and existing is not None:
        body = existing.decode("utf-8", errors="replace").rstrip("\n")
        return f"{body}\n\n## {now.strftime('%Y-%m-%d %H:%M')} UTC\n\n{text.strip()}\n".encode()
    return (_front_matter(title, tags, prov, date) + f"\n# {title}\n\n{text.strip()}\n").encode()


def _written_by_agent(path: str, data: bytes, own_folder: str) -> bool:
    from ..index.markdown import front_matter
    from .provenance import note_source

    fm = front_matter(data.decode("utf-8", errors="replace"))
    return note_source(path, fm, own_folder).agent


def remember(
    root: Path,
    title: str,
    text: str,
    *,
    tags: list[str] | None = None,
    folder: str | None = None,
    append: bool = False,
    expect_blob: str | None = None,
    provenance: Provenance = Provenance(),
    rules: Rules | None = None,
    environ: dict[str, str] | None = None,
    trailer: str = "remember",
) -> Written:
    """Scan, then commit the note `title` under the agent folder. Same title, same path: an
    update (needs `expect_blob`, the blob last read) or, with `append`, a dated entry."""
    check_text("title", title)
    for tag in tags or []:
        check_text("tag", tag)
    own_folder = agent_folder(environ)
    where = (folder or own_folder).strip("/")
    path = f"{where}/{slug(title)}.md" if where else f"{slug(title)}.md"
    existing = read_at_head(root, path)
    if existing is not None and not _written_by_agent(path, existing, own_folder):
        # The agent adds to and replaces only its own notes: its text in a note of the user's
        # would be delivered with the user's authority (agent.provenance).
        raise NotAgentNote(
            f"{path} is a note of the user's: the agent updates only its own notes "
            "(choose another title)"
        )
    if append and existing is not None and expect_blob is None:
        # Appending keeps what is there, so the blob read just now is the one to swap.
        expect_blob = blob_at_head(root, path)
    data = compose(
        title,
        text,
        list(tags or []),
        provenance,
        existing=existing,
        append=append,
        now=datetime.now(UTC),
    )
    outcome = triage(path, "100644", data, rules or Rules())
    if isinstance(outcome, Quarantine):
        kinds = sorted({f"{f.category}:{f.rule_id}" for f in outcome.findings})
        raise MemoryRefused(
            "memory refused: it would be quarantined (" + ", ".join(kinds) + "); "
            "remove the sensitive part and try again",
            tuple(sorted({str(f.category) for f in outcome.findings})),
        )
    if isinstance(outcome, Skip):
        raise MemoryRefused(f"memory refused: {outcome.reason}", (str(outcome.code),))
    return commit_file(
        root,
        path,
        data,
        expect_blob=expect_blob,
        message=f"{trailer}: {title[:60]}",
        trailer_value=trailer,
    )
