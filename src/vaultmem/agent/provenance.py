"""Who wrote a note: the user, or the agent (`remember`, `distill`). One pure function,
`note_source`, that every reader asks: the context block (`vaultmem context`, the hook, the
wrapper), the preferences (Layer B) and the MCP tools `search`, `get` and `recent`.

Design decision: a note is the agent's when EITHER mark says so: its path is inside the agent
folder (VAULTMEM_AGENT_FOLDER, a setting of the user's, never of a repository), or its front
matter says `author: agent` (what `remember` writes, wherever the note was put). Either is
enough because the two mistakes are not alike: taking a note of the user's for the agent's only
lowers its authority (it is still delivered, as a claim), while taking the agent's note for the
user's would give a planted instruction the user's voice. An agent's note is never loaded as
preferences, and is delivered with `source="agent"`, the date it was written and the project it
came from in its fence. The agent cannot forge the mark away: `remember` writes the front
matter itself and the agent's text only ever follows it. A user who wants to adopt a claim as
their own moves the note out of the agent folder and removes `author: agent`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

AGENT = "agent"
# Longest value of a provenance attribute: a front matter field is the agent's own text.
MAX_VALUE_CHARS = 200
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Source:
    """Who wrote a note. For the agent's: when (YYYY-MM-DD), in which project, which session."""

    agent: bool
    written: str | None = None
    project: str | None = None
    session: str | None = None

    def attrs(self) -> dict[str, str]:
        """The fence attributes, in a fixed order ({} for a note of the user's)."""
        if not self.agent:
            return {}
        out = {"source": AGENT}
        for name in ("written", "project", "session"):
            value = getattr(self, name)
            if value:
                out[name] = value
        return out


USER = Source(False)


def in_folder(path: str, folder: str) -> bool:
    """True when the vault-relative `path` is inside `folder` (a relative folder)."""
    folder = folder.strip("/")
    return bool(folder) and (path == folder or path.startswith(folder + "/"))


def _text(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = " ".join(value.split())
    return value[:MAX_VALUE_CHARS] or None


def note_source(path: str, front_matter: Mapping[str, object] | None, agent_folder: str) -> Source:
    """The source of the note at `path` with `front_matter` (as the index normalises it: string
    values), given the user's agent folder. Pure."""
    fm = front_matter or {}
    author = fm.get("author")
    marked = isinstance(author, str) and author.strip().lower() == AGENT
    if not (marked or in_folder(path, agent_folder)):
        return USER
    date = _text(fm.get("date"))
    return Source(
        True,
        written=date[:10] if date and _DATE_RE.match(date) else None,
        project=_text(fm.get("project")),
        session=_text(fm.get("session")),
    )
