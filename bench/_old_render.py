"""The renderer of main 0c4e12a, before delivery plans (issue 41): the text-band notes
water-filled into the budget less a pointer block of at most 440 characters. Kept only as
bench/delivery.py's "before" baseline; the product renders `agent.delivery` plans."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from vaultmem.agent.render import (
    _ENTRY_CLOSE,
    AGENT_PREAMBLE,
    CONTEXT_PREAMBLE,
    CONTEXT_TAG,
    ENTRY_TAG,
    MAX_HEADING_CHARS,
    MAX_PATH_CHARS,
    MAX_POINTERS,
    MIN_ENTRY_TEXT,
    POINTER_TAG,
    POINTERS_PREAMBLE,
    POINTERS_TAG,
    SHORT_COMMIT,
    TRUNCATED,
    _shorten,
    cut_escaped,
    escape_attr,
    escape_text,
)

POINTERS_MAX_CHARS = 440
MAX_POINTER_LINE = 200


class RenderableHit(Protocol):
    """What rendering needs from a search hit (search.Hit has these fields)."""

    @property
    def path(self) -> str: ...

    @property
    def heading(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def commit_sha(self) -> str: ...


def water_fill(lengths: Sequence[int], budget: int) -> list[int]:
    """Split `budget` across items: each gets min(length, fair share), leftovers redistributed."""
    alloc = [0] * len(lengths)
    remaining = max(0, budget)
    pending = sorted(range(len(lengths)), key=lambda i: lengths[i])
    while pending:
        share = remaining // len(pending)
        i = pending[0]
        if lengths[i] <= share:
            alloc[i] = lengths[i]
            remaining -= lengths[i]
            pending.pop(0)
            continue
        # Everyone left is longer than the fair share: split evenly, remainder to the first ones.
        extra = remaining - share * len(pending)
        for j in sorted(pending):
            alloc[j] = share + (1 if extra > 0 else 0)
            extra -= 1
        break
    return alloc


def _entry_open(hit: RenderableHit, extra: Mapping[str, str] | None = None) -> str:
    path = escape_attr(_shorten(hit.path, MAX_PATH_CHARS))
    heading = escape_attr(_shorten(hit.heading, MAX_HEADING_CHARS))
    commit = escape_attr(hit.commit_sha[:SHORT_COMMIT])
    # Provenance (agent.provenance: source="agent", written, project...) after the fixed ones.
    more = "".join(
        f' {name}="{escape_attr(_shorten(value, MAX_PATH_CHARS))}"'
        for name, value in (extra or {}).items()
        if name.isascii() and name.replace("_", "").isalpha()  # a name is never escaped text
    )
    return f'<{ENTRY_TAG} path="{path}" heading="{heading}" commit="{commit}"{more}>\n'


def render_context(
    hits: Sequence[RenderableHit],
    *,
    max_chars: int = 2500,
    provenance: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """The `<retrieved_context>` block for `hits` (best first), at most `max_chars` long.

    Returns "" when there are no hits or not even one entry fits. When the budget is tight the
    weakest hits are dropped before any entry is cut below MIN_ENTRY_TEXT characters.
    """
    return fit_context(hits, max_chars=max_chars, provenance=provenance)[0]


def fit_context(
    hits: Sequence[RenderableHit],
    *,
    max_chars: int = 2500,
    provenance: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[str, list[RenderableHit]]:
    """`render_context`'s block and the hits it holds (the injection log records their paths).

    `provenance` maps a hit's path to extra attributes of its entry (`agent.provenance`)."""
    hits = [h for h in hits if h.text.strip()]
    extras = [(provenance or {}).get(h.path) or {} for h in hits]
    head = f"<{CONTEXT_TAG}>\n{CONTEXT_PREAMBLE}\n"
    if any(e.get("source") == "agent" for e in extras):
        head += AGENT_PREAMBLE + "\n"
    tail = f"</{CONTEXT_TAG}>"
    bodies = [escape_text(h.text.strip()) for h in hits]
    opens = [_entry_open(h, e) for h, e in zip(hits, extras, strict=True)]
    n = len(hits)
    while n > 0:
        fixed = len(head) + len(tail) + sum(len(o) + len(_ENTRY_CLOSE) for o in opens[:n])
        budget = max_chars - fixed
        alloc = water_fill([len(b) for b in bodies[:n]], budget)
        if budget >= 0 and all(
            a >= min(len(b), MIN_ENTRY_TEXT) for a, b in zip(alloc, bodies[:n], strict=True)
        ):
            break
        n -= 1
    if n == 0:
        return "", []
    parts = [head]
    for open_tag, body, room in zip(opens[:n], bodies[:n], alloc, strict=True):
        if len(body) > room:
            body = cut_escaped(body, room - len(TRUNCATED)).rstrip() + TRUNCATED
        parts.append(open_tag + body + _ENTRY_CLOSE)
    parts.append(tail)
    out = "".join(parts)
    assert len(out) <= max_chars, (len(out), max_chars)
    return out, hits[:n]


@dataclass(frozen=True)
class Pointer:
    """One note offered by reference: where it is, what it is called, and why it may match."""

    path: str
    title: str
    heading: str
    why: str
    source: str | None = None  # "agent" for a note an agent wrote (agent.provenance)


def _pointer_line(p: Pointer) -> str:
    head = [f'path="{escape_attr(_shorten(p.path, 90))}"']
    if p.source:
        head.append(f'source="{escape_attr(_shorten(p.source, 20))}"')
    optional = []
    if p.title.strip():
        optional.append(f'title="{escape_attr(_shorten(p.title, 50))}"')
    if p.heading.strip() and p.heading.strip() != p.title.strip():
        optional.append(f'heading="{escape_attr(_shorten(p.heading, 50))}"')
    why = f'why="{escape_attr(_shorten(p.why, 50))}"'
    while True:
        line = f"<{POINTER_TAG} " + " ".join([*head, *optional, why]) + "/>"
        if len(line) <= MAX_POINTER_LINE or not optional:
            return line
        optional.pop()  # the heading, then the title: the path and why matter most


def render_pointers(
    pointers: Sequence[Pointer], *, max_chars: int = POINTERS_MAX_CHARS
) -> tuple[str, list[Pointer]]:
    """The `<note_pointers>` block (best first) within `max_chars`, and the pointers it holds.

    At most MAX_POINTERS lines; the weakest are left out until the block fits; "" when not
    even one does. Everything from a note is escaped as in `render_context`."""
    head = f"<{POINTERS_TAG}>\n{POINTERS_PREAMBLE}\n"
    tail = f"</{POINTERS_TAG}>"
    lines = [_pointer_line(p) + "\n" for p in pointers[:MAX_POINTERS]]
    n = len(lines)
    while n > 0 and len(head) + len(tail) + sum(map(len, lines[:n])) > max_chars:
        n -= 1
    if n == 0:
        return "", []
    out = head + "".join(lines[:n]) + tail
    assert len(out) <= max_chars, (len(out), max_chars)
    return out, list(pointers[:n])
