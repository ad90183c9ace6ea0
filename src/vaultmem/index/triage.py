"""Decide each vault file's fate: ignore it, skip it (with a code), quarantine it, or index it.

`triage` is one pure function (no I/O beyond its arguments): the path, the git file mode, the
blob's bytes (or None when they could not be read) and the rules in; an `Outcome` out. The
ingester, the audit rescan and `verify` all call it, so "what happens to this file" has one
definition. `triage_path` is its first half, the part that needs no bytes: callers use it to
avoid reading blobs that can never be notes, and to check a tree cheaply. Codes are values;
the reason strings are for people and nothing branches on them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .findings import Finding
from .markdown import Note, NoteSkipped, decode_note, parse_note, strip_private_spans
from .paths import ExclusionCode, PathPolicy, display_path, storable
from .sensitive import SensitivePolicy
from .skips import SkipCode as SkipCode

if TYPE_CHECKING:
    from ..config import Settings

# PostgreSQL cannot put a key much over 2.7 kB in a btree index, and every table is keyed by path,
# so a longer path cannot be recorded at all (not even as a skip). 2,000 bytes leaves headroom.
MAX_PATH_BYTES = 2000

SUBMODULE_MODE = "160000"
SYMLINK_MODE = "120000"


@dataclass(frozen=True)
class Ignore:
    """Not a vault note and nothing to report (an image, an excluded folder)."""

    code: ExclusionCode
    reason: str


@dataclass(frozen=True)
class Skip:
    """Could be a note but is not indexed; recorded with its code and reason."""

    code: SkipCode
    reason: str


@dataclass(frozen=True)
class Quarantine:
    """Kept out of search and recorded in the audit table.

    `note` is the parsed note when the content was scanned, None when the path alone decided
    (a `.env`, a `*.pem`): `allow()` needs it to index a reviewed false positive."""

    findings: tuple[Finding, ...]
    note: Note | None = None
    reason: str = ""  # for path-only quarantines: why the file is not a note

    def allow(self) -> Index | Skip:
        """The outcome once a review allowed this very version (see `audit allow`)."""
        if self.note is None:
            return Skip(SkipCode.ALLOWED_NOT_A_NOTE, f"allowed by review, but {self.reason}")
        return Index(self.note, self.findings)


@dataclass(frozen=True)
class Index:
    """A note to index. `allowed` holds the findings a review allowed (usually none)."""

    note: Note
    allowed: tuple[Finding, ...] = ()


Outcome = Ignore | Skip | Quarantine | Index


@dataclass(frozen=True)
class Rules:
    """Everything `triage` decides by: the path policy, the detector and the size limits."""

    paths: PathPolicy = PathPolicy()
    sensitive: SensitivePolicy = SensitivePolicy()
    max_file_bytes: int = 5_000_000
    max_chunk_chars: int = 1500

    @classmethod
    def from_settings(cls, settings: Settings) -> Rules:
        return cls(
            paths=PathPolicy.from_settings(settings),
            sensitive=SensitivePolicy.from_settings(settings),
            max_file_bytes=settings.max_file_bytes,
            max_chunk_chars=settings.max_chunk_chars,
        )


def _by_path(path: str, mode: str, rules: Rules) -> Outcome | None:
    excluded = rules.paths.check(path)
    if excluded is not None and excluded.code is ExclusionCode.EXCLUDED_FOLDER:
        return Ignore(excluded.code, excluded.reason)
    if mode == SUBMODULE_MODE:
        # Whatever its name (it rarely ends in .md), a submodule is a folder of files that are
        # not indexed: report it rather than ignore it silently like an image.
        if excluded is None or excluded.code is ExclusionCode.NOT_A_NOTE:
            return Skip(SkipCode.SUBMODULE, "submodule (not indexed)")
        return Ignore(excluded.code, excluded.reason)
    if excluded is not None:
        # Not a note, but a file that is secret by nature (.env, *.pem) is still recorded in
        # the audit table so the user learns it sits in the vault.
        findings = rules.sensitive.scan(path, "", None, ())
        if findings:
            return Quarantine(tuple(findings), None, excluded.reason)
        return Ignore(excluded.code, excluded.reason)
    if mode == SYMLINK_MODE:
        return Skip(SkipCode.SYMLINK, "symbolic link (not followed)")
    return None


def triage_path(path: str, mode: str, rules: Rules) -> Outcome | None:
    """The outcome decided by path and mode alone, or None when the content decides.

    None means: read the blob and call `triage`."""
    outcome = _by_path(path, mode, rules)
    if not isinstance(outcome, Ignore) and not storable(path):
        return Skip(
            SkipCode.NAME_NOT_UTF8,
            f"file name is not valid UTF-8 ({display_path(path)}): rename it to index it",
        )
    if not isinstance(outcome, Ignore):
        size = len(os.fsencode(path))
        if size > MAX_PATH_BYTES:
            return Skip(
                SkipCode.PATH_TOO_LONG,
                f"path too long to index ({size} bytes, limit {MAX_PATH_BYTES})",
            )
    return outcome


def triage(path: str, mode: str, data: bytes | None, rules: Rules) -> Outcome:
    """What to do with one tree entry: decode, strip `<private>` spans, parse, scan.

    `data` is the blob's bytes; None when they could not be read (a partial clone, a damaged
    pack): the file is then skipped, and the next run tries again. A quarantine is returned
    whatever any review decided: the caller applies an allowance with `Quarantine.allow()`.
    """
    decided = triage_path(path, mode, rules)
    if decided is not None:
        return decided
    if data is None:
        return Skip(SkipCode.UNREADABLE, "content not readable from the repository")
    try:
        text = decode_note(data, rules.max_file_bytes)
    except NoteSkipped as exc:
        return Skip(exc.code, exc.reason)
    text = strip_private_spans(text)
    note = parse_note(path, text, max_chunk_chars=rules.max_chunk_chars)
    findings = rules.sensitive.scan(path, text, note.front_matter, note.tags)
    if findings:
        return Quarantine(tuple(findings), note)
    return Index(note)
