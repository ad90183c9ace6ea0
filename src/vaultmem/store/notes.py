"""What readers ask of the indexed notes: the MCP tools, the preferences block, `verify` and the
freshness check.

Search's own candidate statements stay in the search room; these are the small look-ups around
them. Every function leaves transaction control to the caller, as `tables` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from .db import Conn
from .tables import IndexedAs

__all__ = [
    "Held",
    "IndexedNote",
    "NoteChunk",
    "NoteCounts",
    "NoteRow",
    "RecentNote",
    "chunk_hashes",
    "chunk_texts",
    "held_kind",
    "held_version",
    "indexed_blobs",
    "indexed_note",
    "note_counts",
    "note_chunks",
    "note_front_matter",
    "note_rows",
    "note_paths_with_id",
    "note_titles",
    "note_warnings",
    "recently_indexed",
]


class NoteCounts(NamedTuple):
    notes: int
    quarantined: int


@dataclass(frozen=True)
class Held:
    """The index's own verdict on one version of a path that it does not serve: quarantined
    (`rule_ids` set) or skipped (`reason` and `code` set)."""

    rule_ids: list[str] | None
    reason: str | None
    code: str | None


def chunk_texts(conn: Conn, vault_id: int, path: str) -> list[str]:
    """The indexed text of a note, chunk by chunk, in order ([] when it is not indexed)."""
    rows = conn.execute(
        "SELECT content FROM memory_primary WHERE vault_id = %s AND path = %s ORDER BY chunk_index",
        (vault_id, path),
    ).fetchall()
    return [r["content"] for r in rows]


def held_kind(conn: Conn, vault_id: int, path: str) -> IndexedAs | None:
    """QUARANTINED or SKIPPED when the index keeps `path` out of search; None otherwise."""
    row = conn.execute(
        "SELECT 'quarantined' AS kind FROM memory_secure_audit WHERE vault_id = %(v)s"
        " AND path = %(p)s UNION ALL SELECT 'skipped' FROM memory_skipped"
        " WHERE vault_id = %(v)s AND path = %(p)s",
        {"v": vault_id, "p": path},
    ).fetchone()
    return None if row is None else IndexedAs(row["kind"])


def held_version(conn: Conn, vault_id: int, path: str, blob: str) -> Held | None:
    """The index's verdict on `path` at exactly `blob` when it keeps that version out: a
    quarantine no review allowed, or a skip. None when it holds neither for that version."""
    row = conn.execute(
        "SELECT rule_ids, NULL AS reason, NULL AS code FROM memory_secure_audit"
        " WHERE vault_id = %(v)s AND path = %(p)s AND blob_sha = %(b)s"
        " AND NOT EXISTS (SELECT 1 FROM audit_allow a WHERE a.vault_id = %(v)s"
        "   AND a.path = %(p)s AND a.blob_sha = %(b)s)"
        " UNION ALL SELECT NULL, reason, code FROM memory_skipped"
        " WHERE vault_id = %(v)s AND path = %(p)s AND blob_sha = %(b)s",
        {"v": vault_id, "p": path, "b": blob},
    ).fetchone()
    if row is None:
        return None
    rule_ids = None if row["rule_ids"] is None else list(row["rule_ids"])
    return Held(rule_ids, row["reason"], row["code"])


def note_paths_with_id(conn: Conn, vault_id: int, note_id: str) -> list[str]:
    """The indexed notes whose id (the first 10 hex digits of md5(path)) is `note_id`."""
    rows = conn.execute(
        "SELECT path FROM memory_notes WHERE vault_id = %s AND left(md5(path), 10) = %s",
        (vault_id, note_id),
    ).fetchall()
    return [str(r["path"]) for r in rows]


def note_titles(conn: Conn, vault_id: int, paths: Sequence[str]) -> dict[str, str]:
    """path -> title, for the `paths` indexed as notes."""
    rows = conn.execute(
        "SELECT path, title FROM memory_notes WHERE vault_id = %s AND path = ANY(%s)",
        (vault_id, list(paths)),
    ).fetchall()
    return {r["path"]: r["title"] for r in rows}


def note_front_matter(conn: Conn, vault_id: int, paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """path -> its front matter as indexed (string values), for the `paths` indexed as notes:
    what `agent.provenance` reads to tell the agent's notes from the user's."""
    if not paths:
        return {}
    rows = conn.execute(
        "SELECT path, front_matter FROM memory_notes WHERE vault_id = %s AND path = ANY(%s)",
        (vault_id, list(paths)),
    ).fetchall()
    return {r["path"]: dict(r["front_matter"] or {}) for r in rows}


def note_counts(conn: Conn, vault_id: int) -> NoteCounts:
    """How many notes the vault has indexed, and how many files it holds quarantined."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM memory_notes WHERE vault_id = %(v)s) AS notes,"
        " (SELECT count(*) FROM memory_secure_audit WHERE vault_id = %(v)s) AS held",
        {"v": vault_id},
    ).fetchone()
    return NoteCounts(row["notes"], row["held"]) if row else NoteCounts(0, 0)


def note_warnings(conn: Conn, vault_id: int) -> list[dict[str, Any]]:
    """Notes indexed with a caveat (e.g. malformed front matter indexed as plain text)."""
    rows: list[Any] = conn.execute(
        "SELECT path, warnings FROM memory_notes WHERE vault_id = %s"
        " AND cardinality(warnings) > 0 ORDER BY path",
        (vault_id,),
    ).fetchall()
    return [{"path": r["path"], "warnings": list(r["warnings"])} for r in rows]


def chunk_hashes(conn: Conn, vault_id: int) -> dict[str, list[str]]:
    """path -> its chunks' content hashes in chunk order, for every note of the vault."""
    rows = conn.execute(
        "SELECT path, array_agg(content_hash ORDER BY chunk_index) AS hashes"
        " FROM memory_primary WHERE vault_id = %s GROUP BY path",
        (vault_id,),
    ).fetchall()
    return {r["path"]: list(r["hashes"]) for r in rows}


def indexed_blobs(conn: Conn, vault_id: int, paths: Sequence[str]) -> dict[str, str]:
    """path -> the blob the index holds, for the `paths` indexed as notes."""
    rows = conn.execute(
        "SELECT path, blob_sha FROM memory_notes WHERE vault_id = %s AND path = ANY(%s)",
        (vault_id, list(paths)),
    ).fetchall()
    return {r["path"]: r["blob_sha"] for r in rows}


class IndexedNote(NamedTuple):
    """A note as the index holds it: the commit it was indexed at and its chunks' text."""

    commit_sha: str
    text: str


def indexed_note(conn: Conn, vault_id: int, path: str) -> IndexedNote | None:
    """The note at `path` as indexed (its chunks joined, in order), None when it is not a note
    of the index. What MCP `get` serves for a shared vault, which its readers have no clone of."""
    row = conn.execute(
        "SELECT n.commit_sha, coalesce(string_agg(p.content, E'\\n\\n' ORDER BY p.chunk_index),"
        " '') AS text FROM memory_notes n LEFT JOIN memory_primary p"
        " ON p.vault_id = n.vault_id AND p.path = n.path"
        " WHERE n.vault_id = %s AND n.path = %s GROUP BY n.commit_sha",
        (vault_id, path),
    ).fetchone()
    return IndexedNote(row["commit_sha"], row["text"]) if row else None


class RecentNote(NamedTuple):
    path: str
    title: str
    commit_sha: str
    indexed_at: datetime


def recently_indexed(conn: Conn, vault_id: int, n: int) -> list[RecentNote]:
    """The `n` notes the vault's index wrote last, newest first."""
    rows = conn.execute(
        "SELECT path, title, commit_sha, indexed_at FROM memory_notes WHERE vault_id = %s"
        " ORDER BY indexed_at DESC, path LIMIT %s",
        (vault_id, n),
    ).fetchall()
    return [RecentNote(r["path"], r["title"], r["commit_sha"], r["indexed_at"]) for r in rows]


class NoteRow(NamedTuple):
    path: str
    title: str
    commit_sha: str
    chunks: int


def note_rows(
    conn: Conn, vault_id: int, prefix: str = "", *, limit: int = 200, offset: int = 0
) -> list[NoteRow]:
    """The vault's notes under the path `prefix`, by path, with their chunk counts: a page of
    `limit` from `offset` (the web room's browser)."""
    rows = conn.execute(
        "SELECT n.path, n.title, n.commit_sha,"
        " (SELECT count(*) FROM memory_primary p WHERE p.vault_id = n.vault_id"
        "  AND p.path = n.path) AS chunks"
        " FROM memory_notes n WHERE n.vault_id = %s AND starts_with(n.path, %s)"
        " ORDER BY n.path LIMIT %s OFFSET %s",
        (vault_id, prefix, limit, offset),
    ).fetchall()
    return [NoteRow(r["path"], r["title"], r["commit_sha"], r["chunks"]) for r in rows]


class NoteChunk(NamedTuple):
    """One chunk of an indexed note and where it came from."""

    chunk_index: int
    heading: str
    text: str
    embedded: bool  # has a vector of some model yet


def note_chunks(conn: Conn, vault_id: int, path: str) -> list[NoteChunk]:
    """The chunks of the note at `path`, in order (empty when it is not an indexed note)."""
    rows = conn.execute(
        "SELECT chunk_index, heading, content, embedding IS NOT NULL AS embedded"
        " FROM memory_primary WHERE vault_id = %s AND path = %s ORDER BY chunk_index",
        (vault_id, path),
    ).fetchall()
    return [NoteChunk(r["chunk_index"], r["heading"], r["content"], r["embedded"]) for r in rows]
