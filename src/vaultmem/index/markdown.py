"""Turn one note's bytes into a Note: front matter, title, tags and size-bounded chunks. No I/O.

Design decision: one linear, fence-aware line scan does all the work (headings, title, inline
tags, section boundaries), so cost grows with the note's length, never with its heading count
squared. Chunk texts are made only of body text (verbatim sections, or pieces of one, joined by
a blank line; only whitespace is ever dropped): the heading path travels separately in
`Chunk.heading`, for the embedder to prepend if it wants; a merged chunk carries the heading of
its first section. Consequently a note that is only front matter (or whose body is blank) has
zero chunks: nothing is invented to embed. Its title, tags and front matter are still on the Note.

Inline #tags follow Obsidian: '#' at the start of a word, then letters, digits, '_', '-', '/',
with at least one letter ("#123" is an issue number, not a tag); never inside fenced code or
`code spans`. A heading's own '#' markers are not tags, but a #tag written in heading text is.

Front matter values are normalised to strings once, here at the boundary: dates and datetimes to
ISO 8601, booleans to "true"/"false", numbers as the author wrote them (`1.10` stays "1.10",
`0123` stays "0123"), null to "", lists to lists of strings, and nested mappings/lists to compact
JSON. Malformed YAML never aborts: the note gets a warning and its whole text is indexed as plain
text.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from ..text import WIDE_CHAR_WEIGHT, text_size
from .lexical import TOKENISER_ID, WIDE_CHAR_RE, lexeme_text
from .skips import SkipCode

_BOM = b"\xef\xbb\xbf"

_FM_OPEN_RE = re.compile(r"---[ \t]*(?:\n|\Z)")
_FM_CLOSE_RE = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.M)
# Linear on any line: no lazy group before a trailing run (retried at every position), and a
# closing run of `#` is looked for only where a run of blanks starts.
_ATX_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?\Z")
_ATX_CLOSE_RE = re.compile(r"(?:^|(?<![ \t])[ \t]+)#+\Z")
_FENCE_RE = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)\Z")
# A span opens only where a run of backticks starts, and is looked for over a bounded stretch.
_CODE_SPAN_RE = re.compile(r"(?<!`)(`+)(?!`).{0,4000}?(?<!`)\1(?!`)")
# Obsidian-style tag: '#' at a word start, then letters/digits/_/-/ '/'.
_INLINE_TAG_RE = re.compile(r"(?<!\S)#([\w/-]+)")
_TAG_SPLIT_RE = re.compile(r"[,\s]+")
_BLANK_LINES_RE = re.compile(r"\A(?:[ \t]*\n)+")


class NoteSkipped(Exception):
    """A file that is not indexable as a note: `code` is why, as a value; `reason` the sentence
    people read."""

    def __init__(self, reason: str, code: SkipCode) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class Chunk:
    index: int
    heading: str  # heading path joined with " > " ("" before the first heading)
    text: str  # verbatim body text (the section's own heading line included); no path prefix
    content_hash: str  # sha256 hex of embedding_input(heading, text): what the vector is of
    # The file line (1-based, as `git show` numbers it) of each line of `text`; 0 for a line the
    # chunker put there (the blank line joining two merged sections). What a passage's line
    # range is read from (agent.passages), so the agent can `get` the lines around it.
    lines: tuple[int, ...] = ()


@dataclass(frozen=True)
class Note:
    path: str
    title: str  # front matter title, else first H1, else file stem
    tags: tuple[str, ...]  # lowercase, no '#', deduplicated, front matter tags first
    front_matter: dict[str, str | list[str]]
    body: str  # text after the front matter (the whole text if it was malformed)
    chunks: tuple[Chunk, ...]
    warnings: tuple[str, ...]

    def chunk_lexemes(self) -> list[str]:
        """What full-text search indexes of each chunk, in chunk order: the note's title, the
        chunk's heading path and its text, as `lexical` tokens (space-separated)."""
        return [lexeme_text(f"{self.title}\n{c.heading}\n{c.text}") for c in self.chunks]


def decode_note(data: bytes, max_bytes: int) -> str:
    """Note bytes -> text with LF line endings and no BOM; raises NoteSkipped if not a note."""
    if len(data) > max_bytes:
        raise NoteSkipped(f"too large ({len(data)} bytes, limit {max_bytes})", SkipCode.TOO_LARGE)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise NoteSkipped("UTF-16 encoded (convert the file to UTF-8)", SkipCode.UTF16)
    if b"\0" in data:
        raise NoteSkipped("binary content (NUL bytes)", SkipCode.BINARY)
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteSkipped(
            f"not valid UTF-8 (bad byte at offset {exc.start})", SkipCode.INVALID_UTF8
        ) from exc
    return _normalise_newlines(text)


def _normalise_newlines(text: str) -> str:
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


# --- <private> spans ---------------------------------------------------------------------

# `<private>`, `</private>` in any case, with blanks or a line break where people put them
# (`< private >`, `</ private>`, `<Private reason="bank">`); attributes are bounded, so text
# full of unclosed `<private` costs one short look each. `<private/>` and `<privateer>` are not
# tags.
_PRIVATE_TAG_RE = re.compile(
    r"<\s{0,16}(/?)\s{0,16}private(?=[\s>])(?:\s[^<>]{0,512})?>", re.IGNORECASE
)


def strip_private_spans(text: str) -> str:
    """Remove `<private>…</private>` (nested, multi-line, any case), keeping line numbers stable.

    Each span becomes as many newlines as it held. An unclosed `<private>` hides everything to
    the end of the text (fail closed); a stray `</private>` is left as it is.
    """
    if "<" not in text:
        return text
    out: list[str] = []
    depth = 0
    pos = 0  # start of text not yet copied (outside spans) or span start (inside)
    for m in _PRIVATE_TAG_RE.finditer(text):
        closing = m.group(1) == "/"
        if not closing:
            if depth == 0:
                out.append(text[pos : m.start()])
                pos = m.start()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                out.append("\n" * text.count("\n", pos, m.end()))
                pos = m.end()
    if depth > 0:
        out.append("\n" * text.count("\n", pos))
    else:
        out.append(text[pos:])
    return "".join(out)


# --- front matter ---------------------------------------------------------------------------


class _FrontMatterLoader(yaml.SafeLoader):
    """SafeLoader that keeps impossible dates (2025-02-30) as strings and refuses aliases.

    Aliases are refused because normalising nested values to JSON would expand a "billion
    laughs" alias bomb; real front matter does not use them.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # unannotated in types-PyYAML
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not supported", event.start_mark
            )
        return super().compose_node(parent, index)


def _construct_timestamp(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    try:
        return loader.construct_yaml_timestamp(node)
    except ValueError:
        return loader.construct_scalar(node)


def _construct_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    # Numbers keep the author's spelling: `version: 1.10` is not 1.1 and `id: 0123` is not 83.
    return loader.construct_scalar(node)


_FrontMatterLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_FrontMatterLoader.add_constructor("tag:yaml.org,2002:int", _construct_number)
_FrontMatterLoader.add_constructor("tag:yaml.org,2002:float", _construct_number)


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):  # datetime is a date subclass
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _key(key: Any) -> str:
    # `null:` is a key someone spelled "null", not an empty key.
    return "null" if key is None else _scalar(key)


def _sequence(value: Any) -> list[Any]:
    # A YAML !!set has no order; sort it so the same note always normalises the same way.
    return sorted(value, key=_scalar) if isinstance(value, set | frozenset) else list(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in _sequence(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return _scalar(value)


def _normalise_value(value: Any) -> str | list[str]:
    if isinstance(value, list | tuple | set | frozenset):
        return [
            json.dumps(_jsonable(v), ensure_ascii=False)
            if isinstance(v, dict | list | tuple | set | frozenset)
            else _scalar(v)
            for v in _sequence(value)
        ]
    if isinstance(value, dict):
        return json.dumps(_jsonable(value), ensure_ascii=False)
    return _scalar(value)


def _split_front_matter(text: str) -> tuple[str | None, str]:
    """(YAML block or None, body). An unclosed opening '---' is not front matter."""
    opening = _FM_OPEN_RE.match(text)
    if opening is None:
        return None, text
    closing = _FM_CLOSE_RE.search(text, opening.end())
    if closing is None:
        return None, text
    block = text[opening.end() : closing.start()]
    body = text[closing.end() + 1 :] if closing.end() < len(text) else ""
    return block, body


def _parse_front_matter(text: str) -> tuple[dict[str, str | list[str]], str, list[str]]:
    """(front matter, body, warnings)."""
    block, body = _split_front_matter(text)
    if block is None:
        return {}, text, []
    try:
        data = yaml.load(block, Loader=_FrontMatterLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        where = f" (line {exc.problem_mark.line + 2})" if exc.problem_mark else ""
        problem = exc.problem or exc.context or "unparseable"
        return {}, text, [f"malformed YAML front matter: {problem}{where}; indexed as plain text"]
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return {}, text, [f"malformed YAML front matter: {reason}; indexed as plain text"]
    if data is None:
        return {}, body, []
    if not isinstance(data, dict):
        kind = type(data).__name__
        return {}, text, [f"front matter is a YAML {kind}, not a mapping; indexed as plain text"]
    return {_key(k): _normalise_value(v) for k, v in data.items()}, body, []


def front_matter(text: str) -> dict[str, str | list[str]]:
    """A note's front matter as the index stores it (values normalised to strings); {} when
    it has none or it does not parse."""
    return _parse_front_matter(text)[0]


def _normalise_tag(tag: str) -> str:
    return tag.strip().lstrip("#").strip().lower()


def _front_matter_tags(front_matter: dict[str, str | list[str]]) -> list[str]:
    tags: list[str] = []
    for key in ("tags", "tag"):
        value = front_matter.get(key)
        items = value if isinstance(value, list) else _TAG_SPLIT_RE.split(value or "")
        tags.extend(t for t in (_normalise_tag(i) for i in items) if t)
    return tags


# --- body scan ------------------------------------------------------------------------------


@dataclass
class _Section:
    heading: str
    start: int  # first line index (the heading line itself, if any)
    end: int  # one past the last line


def _heading(line: str) -> tuple[int, str] | None:
    """(level, text) if `line` is an ATX heading."""
    if "#" not in line[:4]:
        return None
    m = _ATX_RE.match(line)
    if m is None:
        return None
    content = _ATX_CLOSE_RE.sub("", (m[2] or "").rstrip(" \t")).strip()
    return len(m[1]), content


def _inline_tags(line: str) -> Iterator[str]:
    if "#" not in line:
        return
    if "`" in line:
        line = _CODE_SPAN_RE.sub(" ", line)
    for m in _INLINE_TAG_RE.finditer(line):
        tag = m[1].strip("/-")
        # Like Obsidian, "#123" (an issue number) is not a tag: it needs a letter.
        if any(c.isalpha() for c in tag):
            yield tag.lower()


@dataclass
class _Scan:
    sections: list[_Section]
    in_fence: list[bool]  # per line: inside (or delimiting) a fenced code block
    first_h1: str | None
    tags: list[str]


def _scan(lines: list[str]) -> _Scan:
    sections = [_Section("", 0, 0)]
    in_fence = [False] * len(lines)
    stack: list[tuple[int, str]] = []
    first_h1: str | None = None
    tags: list[str] = []
    fence_char = ""
    fence_len = 0
    for i, line in enumerate(lines):
        if fence_char:
            in_fence[i] = True
            m = _FENCE_RE.match(line)
            if m and m[2][0] == fence_char and len(m[2]) >= fence_len and not m[3].strip():
                fence_char = ""
            continue
        m = _FENCE_RE.match(line)
        if m and not (m[2][0] == "`" and "`" in m[3]):
            in_fence[i] = True
            fence_char, fence_len = m[2][0], len(m[2])
            continue
        heading = _heading(line)
        if heading is not None:
            level, text = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            if level == 1 and first_h1 is None and text:
                first_h1 = text
            sections[-1].end = i
            sections.append(_Section(" > ".join(t for _, t in stack if t), i, i))
        tags.extend(_inline_tags(line))
    sections[-1].end = len(lines)
    return _Scan(sections, in_fence, first_h1, tags)


# --- chunking -------------------------------------------------------------------------------


# Chunks are sized for the embedder in text.text_size's units (a CJK character counts three):
# the default budget of 1,500 fits e5's 512-token window in either script (see text.py).


def _clean(text: str) -> str:
    """Drop leading blank lines (keeping the first line's indentation) and trailing space."""
    return _BLANK_LINES_RE.sub("", text).rstrip()


def _hard_split(text: str, limit: int, first: int | None = None) -> list[str]:
    """Split one over-long line, preferring the last whitespace within each window.

    `first`, when given, is the budget of the first piece (room left beside a lead-in).
    """
    wide = bytearray(len(text))  # 1 where a character weighs WIDE_CHAR_WEIGHT
    if not text.isascii():
        for m in WIDE_CHAR_RE.finditer(text):
            wide[m.start()] = 1
    pieces: list[str] = []
    start, n = 0, len(text)
    while start < n:
        budget = first if first is not None and not pieces else limit
        end, used = start, 0  # the longest window from `start` that fits the budget
        while end < n:
            used += WIDE_CHAR_WEIGHT if wide[end] else 1
            if used > budget:
                break
            end += 1
        if end == n:
            pieces.append(text[start:])
            break
        end = max(end, start + 1)  # a limit below one character's weight still progresses
        cut = text.rfind(" ", start + 1, end + 1)
        if cut <= start:
            cut = end
        pieces.append(text[start:cut])
        start = cut
        while start < n and text[start] == " ":
            start += 1
    return [p for p in (p.rstrip() for p in pieces) if p.strip()]


def _pack(parts: list[str], limit: int, sep: str) -> list[str]:
    """Greedily join consecutive parts (each <= limit) with `sep` into pieces <= limit."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for part in parts:
        extra = text_size(part) + (len(sep) if current else 0)
        if current and size + extra > limit:
            out.append(sep.join(current))
            current, size = [], 0
            extra = text_size(part)
        current.append(part)
        size += extra
    if current:
        out.append(sep.join(current))
    return out


def _split_block(block: str, limit: int, lead: str = "") -> list[str]:
    """A block (no blank lines) that is too long: pack its lines, hard-splitting long ones.

    A long line is cut into pieces of about equal size rather than full ones and a scrap, and
    `lead` (a short part just before the block: a heading line, a lead-in) goes into the first
    piece instead of standing alone as a chunk that says nothing.
    """
    lines: list[str] = [lead] if lead else []
    lead_size = text_size(lead) + 1 if lead else 0  # with the newline that joins it
    for line in block.split("\n"):
        size = text_size(line)
        beside = lead_size if lead and len(lines) == 1 else 0  # only the first line sits by it
        if size + beside > limit:
            pieces = -(-(size + beside) // limit)
            target = min(limit, -(-(size + beside) // pieces) + limit // 20)
            first = max(1, target - beside) if beside else None
            lines.extend(_hard_split(line, target, first))
        elif line.strip():
            lines.append(line.rstrip())
    return _pack(lines, limit, "\n")


def _split_section(lines: list[str], in_fence: list[bool], start: int, limit: int) -> list[str]:
    """Split an oversized section on paragraphs (blank lines outside fences), then lines."""
    blocks: list[str] = []
    current: list[str] = []
    for offset, line in enumerate(lines):
        if not line.strip() and not in_fence[start + offset]:
            if current:
                blocks.append(_clean("\n".join(current)))
                current = []
        else:
            current.append(line)
    if current:
        blocks.append(_clean("\n".join(current)))
    parts: list[str] = []
    for block in blocks:
        size = text_size(block)
        before = text_size(parts[-1]) if parts else limit
        if before < limit // 4 < size and before + 2 + size > limit:
            # A short part (a heading line) that would otherwise stand alone rides with the
            # first piece of the block after it.
            parts.extend(_split_block(block, limit, parts.pop()))
        elif size <= limit:
            parts.append(block)
        else:
            parts.extend(_split_block(block, limit))
    return _pack([p for p in parts if p], limit, "\n\n")


def _chunk_texts(scan: _Scan, lines: list[str], limit: int) -> list[tuple[str, str]]:
    """(heading, text) pairs: sections, oversized ones split, tiny ones merged forward."""
    units: list[tuple[str, str]] = []
    for section in scan.sections:
        text = _clean("\n".join(lines[section.start : section.end]))
        if not text:
            continue
        if text_size(text) <= limit:
            units.append((section.heading, text))
        else:
            section_lines = lines[section.start : section.end]
            for piece in _split_section(section_lines, scan.in_fence, section.start, limit):
                units.append((section.heading, piece))

    # Merge a tiny unit (a heading with a line under it, say) into the ones that follow it.
    tiny = max(1, limit // 4)
    sep = "\n\n"
    groups: list[tuple[str, list[str], int]] = []
    for heading, text in units:
        size = text_size(text)
        if groups:
            g_heading, g_texts, g_size = groups[-1]
            if g_size < tiny and g_size + len(sep) + size <= limit:
                g_texts.append(text)
                groups[-1] = (g_heading, g_texts, g_size + len(sep) + size)
                continue
        groups.append((heading, [text], size))
    # A tiny last group joins the previous one when it fits.
    if len(groups) >= 2 and groups[-1][2] < tiny:
        last = groups.pop()
        prev = groups[-1]
        if prev[2] + len(sep) + last[2] <= limit:
            groups[-1] = (prev[0], prev[1] + last[1], prev[2] + len(sep) + last[2])
        else:
            groups.append(last)
    return [(heading, sep.join(texts)) for heading, texts, _ in groups]


# How far ahead of the last matched line a chunk's line is looked for in the body: the chunker
# only drops blank lines, so a line is normally the next one; the window bounds the work for
# a chunk line that matches nothing (it then gets 0).
LINE_SEARCH_WINDOW = 64


def _line_numbers(texts: list[str], body: list[str], offset: int) -> list[tuple[int, ...]]:
    """Each chunk line's 1-based line in the file, by walking the body forward once.

    The chunker keeps lines verbatim but for trailing space, drops blank lines between blocks,
    joins merged sections with a blank line and cuts an over-long line into pieces; so a chunk
    line is the next body line that equals it (or holds it, for a piece of a cut line), within
    LINE_SEARCH_WINDOW lines. `offset` is the number of file lines before the body (front
    matter)."""
    out: list[tuple[int, ...]] = []
    cursor = 0  # the next body line to look at
    last = -1  # the body line the previous chunk line matched
    for text in texts:
        found: list[int] = []
        for line in text.split("\n"):
            if not line.strip():
                found.append(0)
                continue
            j = -1
            if last >= 0 and line in body[last] and line != body[last].rstrip():
                j = last  # another piece of the same cut line
            else:
                for k in range(cursor, min(len(body), cursor + LINE_SEARCH_WINDOW)):
                    if body[k].rstrip() == line or (len(line) > 8 and line in body[k]):
                        j = k
                        break
            if j < 0:
                found.append(0)
                continue
            found.append(offset + j + 1)
            last, cursor = j, j + 1
        out.append(tuple(found))
    return out


# Bump when chunk boundaries, embedding inputs or search tokens (lexical.tokens) change for the
# same note and settings: vaults indexed by another version are re-chunked on their next run
# (see chunker_signature). Unchanged chunk texts keep their cached vectors. 3: English stemming.
# 4: each chunk's file line numbers (Chunk.lines), so that stored chunks carry them.
CHUNKER_VERSION = 4


def chunker_signature(max_chunk_chars: int) -> str:
    """What decides how a note is chunked; stored per vault to notice a change."""
    return f"v{CHUNKER_VERSION}:{max_chunk_chars}:{TOKENISER_ID}"


def embedding_input(heading: str, text: str) -> str:
    """What the embedder sees for a chunk: its heading path, then its text.

    A chunk cut from the middle of a section ("...and the dose was halved.") means little
    alone; the headings above it say what it is about. Headings come from the text, never the
    file name, so a rename still re-embeds nothing. A chunk that starts with its own full path
    (an H1 section's first chunk) is left as it is.
    """
    if not heading:
        return text
    first = text.split("\n", 1)[0].lstrip("#").strip()
    if first == heading:
        return text
    return f"{heading}\n\n{text}"


def parse_note(path: str, text: str, *, max_chunk_chars: int = 1500) -> Note:
    """Parse a decoded note (see decode_note) into front matter, title, tags and chunks."""
    if max_chunk_chars < 1:
        raise ValueError("max_chunk_chars must be at least 1")
    if text.startswith("\ufeff"):
        text = text[1:]
    text = _normalise_newlines(text)
    front_matter, body, warnings = _parse_front_matter(text)

    lines = body.split("\n")
    scan = _scan(lines)

    fm_title = front_matter.get("title")
    if isinstance(fm_title, str) and fm_title.strip():
        title = fm_title.strip()
    elif scan.first_h1:
        title = scan.first_h1
    else:
        title = PurePosixPath(path).stem or path

    tags = tuple(dict.fromkeys(_front_matter_tags(front_matter) + scan.tags))

    pieces = _chunk_texts(scan, lines, max_chunk_chars)
    numbers = _line_numbers([t for _, t in pieces], lines, text.count("\n") - body.count("\n"))
    chunks = tuple(
        Chunk(
            i,
            heading,
            chunk_text,
            hashlib.sha256(embedding_input(heading, chunk_text).encode("utf-8")).hexdigest(),
            numbers[i],
        )
        for i, (heading, chunk_text) in enumerate(pieces)
    )
    return Note(
        path=path,
        title=title,
        tags=tags,
        front_matter=front_matter,
        body=body,
        chunks=chunks,
        warnings=tuple(warnings),
    )
