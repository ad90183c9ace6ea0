"""Skip codes: why a file that could be a note is not indexed, as a value.

Design decision: the codes sit below both the parser (`markdown`, which raises `NoteSkipped`
carrying one) and the decision (`triage`, which returns `Skip` with one), so the parser's
reason reaches the index as the value it was, never as a string matched again later.
"""

from __future__ import annotations

from enum import StrEnum


class SkipCode(StrEnum):
    """Why a file that could be a note is not indexed (stored in memory_skipped.code)."""

    SUBMODULE = "submodule"
    SYMLINK = "symlink"
    PATH_TOO_LONG = "path-too-long"
    TOO_LARGE = "too-large"
    BINARY = "binary"
    UTF16 = "utf-16"
    INVALID_UTF8 = "invalid-utf-8"
    UNREADABLE = "unreadable"
    ALLOWED_NOT_A_NOTE = "allowed-not-a-note"
    NAME_NOT_UTF8 = "name-not-utf-8"

    @property
    def recordable(self) -> bool:
        """False when no table can hold the skip (the path is too long to be a key, or not
        text): it is then reported by every run and by `verify` / `status` from HEAD's tree."""
        return self not in (SkipCode.PATH_TOO_LONG, SkipCode.NAME_NOT_UTF8)

    @property
    def retried(self) -> bool:
        """Skips the next run tries again though the blob did not change (it may be readable
        by then: a partial clone fetched it, a pack was repaired)."""
        return self is SkipCode.UNREADABLE
