"""Sensitive-content detection: which files must be quarantined instead of indexed, and why.

The front door: `SensitivePolicy.scan` (every reason a note must not be indexed), `redact`,
`mask_path_tokens` and the bounds; the rest of vaultmem imports only the names in `__all__`.
This module runs the rule families in order and keeps one finding per secret.

Design decision: every content rule runs as one compiled regex over the *whole* note (line
numbers come from match offsets), never as a per-line loop, over a view whose work is bounded
(`note.py`). detect-secrets supplies part of the token-format detectors; vaultmem adds about
seventy vendor formats of its own and the rules notes need and code scanners lack: passwords in
prose, tables and commands in English, Chinese, Japanese and Korean (and the password words of
a dozen other languages), connection strings of every shape, `.netrc` and `.pgpass` lines,
secrets wrapped in base64 or over two lines, seed phrases. Generic rules (passwords, high
entropy) skip placeholders, hashes, algorithm names and code, because a quarantined note is a
note the user cannot search. A Finding never holds the secret itself, only a masked preview.

One module per rule family, all reading the note through `note._Note` and judging values with
the same guards (`values.py`); the families are tuned together against one set of corpora
(tests/sensitive_corpus*.py), so a change to a shared guard is read next to every family that
imports it:

- note.py: the bounded view of the note, its gates and budgets, and `_Hit`
- values.py: judgements of one value (placeholder, code name, entropy, password-shaped)
- names.py: what the path says; markers.py: front matter flags and private tags
- tokens.py: vendor token formats; connections.py: connection strings, URL credentials, headers
- passwords.py: labelled passwords; commands.py: command lines; tables.py: Markdown tables
- assignments.py: random values under a secret's name; prose.py: a secret in a sentence
- strict.py: any `label: value` in a note named for secrets
- layouts.py: base64-encoded or wrapped secrets; seeds.py: wallet seed phrases
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..findings import Finding, mask
from .assignments import _entropy_hits
from .commands import _command_hits
from .connections import _header_hits, _url_hits, _url_param_hits
from .layouts import _base64_hits, _wrapped_hits
from .markers import _as_strings, _marker_findings, _raw_marker_findings
from .names import _name_has_keyword, _path_findings, mask_path_tokens
from .note import (
    RULE_CANDIDATES,
    SCAN_LINE_CHARS,
    SCAN_NOTE_CHARS,
    TOO_COMPLEX,
    ScanStats,
    _Hit,
    _Note,
)
from .passwords import _label_line_hits, _password_hits
from .prose import _prose_hits
from .seeds import _bip39_hits, _seed_hits
from .strict import _strict_hits
from .tables import _table_hits
from .tokens import HIGH_CONFIDENCE_RULES, _plugin_hits, _token_hits
from .values import is_placeholder

if TYPE_CHECKING:
    from ...config import Settings

__all__ = [
    "HIGH_CONFIDENCE_RULES",
    "RULE_CANDIDATES",
    "SCAN_LINE_CHARS",
    "SCAN_NOTE_CHARS",
    "TOO_COMPLEX",
    "Redacted",
    "ScanStats",
    "SensitivePolicy",
    "is_placeholder",
    "mask_path_tokens",
    "redact",
]


_CONTENT_RULES = (
    _plugin_hits,
    _token_hits,
    _url_hits,
    _url_param_hits,
    _password_hits,
    _command_hits,
    _table_hits,
    _entropy_hits,
    _header_hits,
    _seed_hits,
    _bip39_hits,
    _label_line_hits,
    _prose_hits,
    _strict_hits,
    _base64_hits,
    _wrapped_hits,
)


# At most this many findings per note: it is quarantined by the first, the rest only help review.
MAX_FINDINGS = 1000


def _family(rule: Any) -> str:
    """`_password_hits` -> "password": the name budgets and the audit use for a rule family."""
    return str(rule.__name__).strip("_").removesuffix("_hits").replace("_", "-")


def _kept_hits(text: str, strict: bool, stats: ScanStats) -> list[tuple[int, int, _Hit]]:
    """Every rule's hits in `text` as (start, end, hit) spans of the text itself, one per
    secret (overlaps resolved by rule priority), in order."""
    note = _Note(text, strict, stats)
    hits: list[tuple[int, int, int, _Hit]] = []  # (priority, start, end) in the note's own text
    for rule in _CONTENT_RULES:
        note.rule = _family(rule)
        # A family stops at MAX_FINDINGS hits: no more can be reported, and a note made of
        # nothing but keywords (a megabyte of "password: key=") would otherwise spend the whole
        # candidate budget of every family.
        for n, hit in enumerate(rule(note), 1):
            start, end = note.source_span(hit.start, hit.end)
            hits.append((hit.priority, start, end, hit))
            if n >= MAX_FINDINGS:
                break
    hits.sort(key=lambda h: (h[0], h[1]))
    # One secret, one finding: a GitHub token is not also a "high-entropy secret", and a secret
    # seen in two overlapping windows of a long line is one secret. Kept spans never overlap,
    # so checking the neighbours of a span's place among them is enough.
    starts: list[int] = []
    kept: list[tuple[int, int, _Hit]] = []
    for _, start, end, hit in hits:
        i = bisect_right(starts, start)
        if i > 0 and kept[i - 1][1] > start:
            continue
        if i < len(kept) and kept[i][0] < end:
            continue
        starts.insert(i, start)
        kept.insert(i, (start, end, hit))
    return kept


def _content_findings(
    text: str, strict: bool = False, stats: ScanStats | None = None
) -> list[Finding]:
    stats = stats if stats is not None else ScanStats()
    if len(text) > SCAN_NOTE_CHARS:
        why = f"{len(text):,} characters; the scan stops at {SCAN_NOTE_CHARS:,}"
        stats.too_complex.append(("note", why))
        return [Finding(TOO_COMPLEX, "unscanned", 0, f"too complex to scan: {why}")]
    kept = _kept_hits(text, strict, stats)
    newlines = [m.start() for m in re.finditer("\n", text)] if kept or stats.too_complex else []
    out = [
        Finding(h.rule_id, "secret", bisect_right(newlines, start) + 1, h.preview or mask(h.value))
        for start, _, h in kept[:MAX_FINDINGS]
    ]
    for _, why in stats.too_complex:
        out.append(Finding(TOO_COMPLEX, "unscanned", 0, f"too complex to scan: {why}"))
    return out


@dataclass(frozen=True)
class Redacted:
    """Text with every secret the content rules find replaced by its mask."""

    text: str
    masked: int  # how many secrets were masked
    complete: bool  # False: part of the text was too complex to scan (it may hold more)


def redact(text: str) -> Redacted:
    """`text` with each secret the content rules find (strict: every rule, as for a file
    named like a secret) replaced by `[masked RULE]`, not one character of it kept: what may
    leave the machine in text sent to another program (`distill`'s excerpt to `claude -p`)."""
    stats = ScanStats()
    if len(text) > SCAN_NOTE_CHARS:
        return Redacted("", 0, False)
    kept = _kept_hits(text, True, stats)
    for start, end, hit in sorted(kept, key=lambda k: -k[0]):
        text = text[:start] + f"[masked {hit.rule_id}]" + text[end:]
    return Redacted(text, len(kept), not stats.too_complex)


def _front_matter_secret_findings(front_matter: Mapping[str, Any], seen: set[str]) -> list[Finding]:
    """Safety net for callers that scan only the body: check `key: value` pairs themselves."""
    # One scan of every pair, one per line: bounded like a note, however many keys there are.
    pairs = "\n".join(
        f"{key}: {v}" for key, value in front_matter.items() for v in _as_strings(value)
    )
    out: list[Finding] = []
    for f in _content_findings(pairs) if pairs else ():
        if f.masked not in seen:
            seen.add(f.masked)
            out.append(Finding(f.rule_id, f.category, 0, f.masked))
    return out


# ---------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SensitivePolicy:
    """Decides whether a note must be quarantined instead of indexed; see `scan`."""

    name_keywords: tuple[str, ...] = (
        "password",
        "passwd",
        "secret",
        "credential",
        "private-key",
        "密码",
        "密碼",
        "口令",
        "私钥",
        "パスワード",
        "비밀번호",
    )
    private_tags: tuple[str, ...] = ("private",)

    @classmethod
    def from_settings(cls, settings: Settings) -> SensitivePolicy:
        return cls(
            name_keywords=tuple(settings.name_keywords), private_tags=tuple(settings.private_tags)
        )

    def scan(
        self,
        path: str,
        text: str,
        front_matter: Mapping[str, Any] | None = None,
        tags: Iterable[str] = (),
        stats: ScanStats | None = None,
    ) -> list[Finding]:
        """Every reason `path` must not be indexed; empty means index it.

        Path findings first (line 0), then explicit markers (line 0), then content findings in
        text order. `text` is the whole note (front matter included, so line numbers match the
        file); front matter values are checked again on their own in case the caller passes only
        the body. A name with a sensitive keyword makes the content scan strict. `stats`, when
        given, receives what the content scan handed its regexes (see `ScanStats`).

        The work is bounded (SCAN_LINE_CHARS, SCAN_NOTE_CHARS, RULE_CANDIDATES): a note the
        scan cannot finish within its bounds gets a `too-complex-to-scan` finding, so it is
        quarantined rather than indexed unscanned.
        """
        front_matter = front_matter or {}
        findings = _path_findings(path)
        findings += _marker_findings(front_matter, tags, self.private_tags)
        if not any(f.category == "private" for f in findings):
            findings += _raw_marker_findings(text, self.private_tags, parsed=bool(front_matter))
        content = _content_findings(
            text, strict=_name_has_keyword(path, self.name_keywords), stats=stats
        )
        findings += content
        findings += _front_matter_secret_findings(front_matter, {f.masked for f in content})
        return findings
