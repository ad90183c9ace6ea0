"""Explicit markers: a note its author marked private, in its front matter (`private: true`,
`visibility: confidential`, `私密: 是`) or by a tag (`#private`, `#private/…`).

Design decision: markers are read twice, from the parsed front matter and from the block's raw
lines, so that none is lost to the parser (a block it could not read, a dialect it does not
read, a key given twice); a block the parser could not read fails closed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..findings import Finding

_TRUTHY = frozenset({"true", "yes", "y", "on", "1", "是", "是的", "對", "对", "はい", "예", "네"})
_PRIVATE_KEYS = frozenset(
    {"private", "secret", "sensitive", "confidential", "私密", "隐私", "隱私", "机密", "機密",
     "秘密", "非公開", "비공개", "privat", "privé", "privado", "privato"}
)  # fmt: skip
# Keys that name a level, and the levels that mean "keep it out" (Obsidian, Hugo and Jekyll
# users write `visibility`; document labels use `classification` / `sensitivity`).
_LEVEL_KEYS = frozenset(
    {"visibility", "access", "privacy", "classification", "sensitivity", "confidentiality"}
)
_PRIVATE_VISIBILITY = frozenset(
    {"private", "secret", "confidential", "internal-only", "restricted", "personal", "sensitive",
     "highly confidential", "strictly confidential", "top secret", "only me", "私密", "机密",
     "機密", "秘密", "非公開", "비공개"}
)  # fmt: skip


def _as_strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, Iterable) and not isinstance(value, Mapping | bytes):
        return [str(v) for v in value]
    return [str(value)]


def _norm_tag(tag: str) -> str:
    return tag.strip().lstrip("#").strip().lower()


def _is_private_tag(tag: str, wanted: set[str]) -> bool:
    return tag in wanted or any(tag.startswith(w + "/") for w in wanted)


def _marker_findings(
    front_matter: Mapping[str, Any], tags: Iterable[str], private_tags: tuple[str, ...]
) -> list[Finding]:
    out: list[Finding] = []
    for key, value in front_matter.items():
        k = str(key).strip().lower()
        values = [v.strip().lower() for v in _as_strings(value)]
        if (k in _PRIVATE_KEYS and any(v in _TRUTHY for v in values)) or (
            k in _LEVEL_KEYS and any(v in _PRIVATE_VISIBILITY for v in values)
        ):
            out.append(Finding("front-matter-private", "private", 0, f"{key}: {value}"))
            break
    wanted = {_norm_tag(t) for t in private_tags if _norm_tag(t)}
    all_tags = [_norm_tag(t) for t in tags]
    for raw in _as_strings(front_matter.get("tags")) + _as_strings(front_matter.get("tag")):
        all_tags += [_norm_tag(t) for t in re.split(r"[,\s]+", raw) if t]
    for tag in all_tags:
        if _is_private_tag(tag, wanted):
            out.append(Finding("private-tag", "private", 0, f"#{tag}"))
            break
    return out


# The block read for markers: the first lines of the note, where front matter is, in whatever
# dialect (YAML `---`, TOML `+++`, JSON `{`), indented, after a blank line or a BOM.
_FM_LINE_LIMIT = 80
_FM_FENCES = {"---": ("---", "..."), "+++": ("+++",), "{": ("}",)}
_RAW_PRIVATE_RE = re.compile(
    r"(?im)^[ \t]*+[\"']?(?P<key>private|secret|sensitive|confidential|visibility|access|privacy"
    r"|classification|sensitivity|confidentiality|私密|隐私|隱私|机密|機密|秘密|非公開|비공개|privat"
    r"|privé|privado|privato)[\"']?[ \t]*+[:=：][ \t]*+[\"']?(?P<value>[^\"'#\n,}]{0,80})"
)
_RAW_TAGS_RE = re.compile(r"(?i)^[\"']?tags?[\"']?[ \t]*+[:=][ \t]*+(?P<items>.{0,400})")
_FALSY = frozenset({"false", "no", "n", "off", "0", "public", "", "否", "いいえ", "아니요"})


def _front_block(text: str) -> list[str] | None:
    """The lines of the note's front matter block (without its fences); None when the note
    opens with none."""
    head = text.split("\n", _FM_LINE_LIMIT + 8)[: _FM_LINE_LIMIT + 8]
    first = 0
    while first < min(len(head), 6) and not head[first].strip("\ufeff \t"):
        first += 1
    if first >= len(head):
        return None
    opening = head[first].strip("\ufeff \t")
    fences = _FM_FENCES.get(opening)
    if fences is None:
        return None
    block: list[str] = []
    for line in head[first + 1 : first + 1 + _FM_LINE_LIMIT]:
        if line.strip() in fences:
            return block
        block.append(line)
    return None


def _raw_marker_findings(text: str, private_tags: tuple[str, ...], parsed: bool) -> list[Finding]:
    """Markers read from the front matter block's lines themselves, so that none is lost to the
    parser: a block it could not read (a tab, an open quote), a dialect it does not read (TOML
    `+++`, JSON), a block indented or after a blank line, a key given twice (the parser keeps
    the last), a flag nested under another key. `parsed`: the parser read this block, so a
    flag must say yes (`private: true`); otherwise any value but a no counts (fail closed)."""
    block = _front_block(text)
    if block is None:
        return []
    raw = "\n".join(block)
    found = None
    for m in _RAW_PRIVATE_RE.finditer(raw):
        key, value = m.group("key").lower(), m.group("value").strip().strip("\"' ").lower()
        if key in _LEVEL_KEYS:
            if value in _PRIVATE_VISIBILITY:
                found = f"{key}: {value}"
        elif value in _TRUTHY or (not parsed and value not in _FALSY):
            found = f"{key}: …"
        if found:
            break
    if found is None:
        wanted = {_norm_tag(t) for t in private_tags if _norm_tag(t)}
        in_tags = False
        for line in block:
            stripped = line.strip()
            tags = _RAW_TAGS_RE.match(stripped)
            head, colon, _ = stripped.partition(":")
            if tags:
                in_tags, items = True, tags.group("items")
            elif colon and not stripped.startswith("-"):
                in_tags = False
                continue
            elif stripped.startswith("-") and in_tags:
                items = stripped[1:]
            else:
                continue
            for item in re.split(r"[\s,\[\]\"']+", items):
                tag = _norm_tag(item)
                if tag and _is_private_tag(tag, wanted):
                    found = f"#{tag}"
                    break
            if found:
                break
    if found is None:
        return []
    rule = "front-matter-private" if parsed else "malformed-front-matter-private"
    what = f"front matter: {found}" if parsed else f"unparsed front matter: {found}"
    return [Finding(rule, "private", 0, what)]
