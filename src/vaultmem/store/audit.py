"""Reads and writes of the review tables: `memory_secure_audit` (what is quarantined, and why)
joined with `audit_allow` (the versions a review allowed).

The quarantine itself is written with the rest of a file's change (`tables.quarantine`), in the
ingester's transaction; this module holds what `vaultmem audit` lists, shows and records. Every
function leaves transaction control to the caller, as `tables` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from .db import Conn

__all__ = [
    "AllowState",
    "AllowedFile",
    "QuarantineRecord",
    "QuarantinedFile",
    "allowed_files",
    "drop_allow",
    "is_allowed",
    "quarantine_record",
    "quarantined_files",
    "record_allow",
]


class AllowState(StrEnum):
    """What became of a path a review allowed, as the index holds it now."""

    INDEXED = "indexed"
    SKIPPED = "skipped"  # allowed, but still not a note (a `.env`, a `*.pem`)
    EDITED = "edited since review"  # the index holds another version: scanned again
    NOT_INDEXED = "not in the index"


@dataclass(frozen=True)
class QuarantinedFile:
    """One row of `memory_secure_audit`, with the review decision recorded for its path, if any."""

    path: str
    risk: str
    rule_ids: list[str]
    line_numbers: list[int]
    blob_sha: str
    first_seen_at: datetime
    updated_at: datetime
    allowed_blob_sha: str | None = None  # set when a version of this path was allowed
    allowed_at: datetime | None = None

    @property
    def allowed(self) -> bool:
        """True if this very version was allowed (it is indexed by the next re-decision)."""
        return self.allowed_blob_sha == self.blob_sha

    @property
    def allowed_earlier_version(self) -> bool:
        """An older version was allowed; this one was edited since and quarantined again."""
        return self.allowed_blob_sha is not None and not self.allowed

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "allowed": self.allowed,
            "allowed_earlier_version": self.allowed_earlier_version,
        }


@dataclass(frozen=True)
class AllowedFile:
    """A review decision and what became of the path: indexed, skipped, edited since, or gone."""

    path: str
    blob_sha: str
    allowed_at: datetime
    state: AllowState

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QuarantineRecord:
    """One quarantined path in full: why (rule ids, and each finding's rule, category and line;
    never any matched text), since when, and the version a review allowed, if any."""

    path: str
    risk: str
    blob_sha: str
    findings: list[dict[str, Any]]  # {"rule", "category", "line"} per finding
    rule_ids: list[str]
    first_seen_at: datetime
    updated_at: datetime
    allowed_blob_sha: str | None
    allowed_at: datetime | None


def quarantined_files(conn: Conn, vault_id: int) -> list[QuarantinedFile]:
    """Every quarantined path of the vault, by path, with why (rule ids, line numbers)."""
    rows = conn.execute(
        """
        SELECT a.path, a.risk, a.rule_ids, a.line_numbers, a.blob_sha, a.first_seen_at,
               a.updated_at, w.blob_sha AS allowed_blob_sha, w.allowed_at
          FROM memory_secure_audit a
          LEFT JOIN audit_allow w ON w.vault_id = a.vault_id AND w.path = a.path
         WHERE a.vault_id = %s
         ORDER BY a.path
        """,
        (vault_id,),
    ).fetchall()
    return [
        QuarantinedFile(
            path=r["path"],
            risk=r["risk"],
            rule_ids=list(r["rule_ids"]),
            line_numbers=list(r["line_numbers"]),
            blob_sha=r["blob_sha"],
            first_seen_at=r["first_seen_at"],
            updated_at=r["updated_at"],
            allowed_blob_sha=r["allowed_blob_sha"],
            allowed_at=r["allowed_at"],
        )
        for r in rows
    ]


def allowed_files(conn: Conn, vault_id: int) -> list[AllowedFile]:
    """Every review decision of the vault, with what the index holds for that path now."""
    rows = conn.execute(
        """
        SELECT w.path, w.blob_sha, w.allowed_at,
               CASE WHEN n.blob_sha = w.blob_sha THEN 'indexed'
                    WHEN s.blob_sha = w.blob_sha THEN 'skipped'
                    WHEN coalesce(n.path, a.path, s.path) IS NOT NULL THEN 'edited since review'
                    ELSE 'not in the index' END AS state
          FROM audit_allow w
          LEFT JOIN memory_notes n ON n.vault_id = w.vault_id AND n.path = w.path
          LEFT JOIN memory_secure_audit a ON a.vault_id = w.vault_id AND a.path = w.path
          LEFT JOIN memory_skipped s ON s.vault_id = w.vault_id AND s.path = w.path
         WHERE w.vault_id = %s
         ORDER BY w.path
        """,
        (vault_id,),
    ).fetchall()
    return [
        AllowedFile(r["path"], r["blob_sha"], r["allowed_at"], AllowState(r["state"])) for r in rows
    ]


def quarantine_record(conn: Conn, vault_id: int, path: str) -> QuarantineRecord | None:
    """The quarantine of `path` in full, or None when the path is not quarantined."""
    row = conn.execute(
        """
        SELECT a.path, a.risk, a.blob_sha, a.findings, a.rule_ids, a.first_seen_at, a.updated_at,
               w.blob_sha AS allowed_blob_sha, w.allowed_at
          FROM memory_secure_audit a
          LEFT JOIN audit_allow w ON w.vault_id = a.vault_id AND w.path = a.path
         WHERE a.vault_id = %s AND a.path = %s
        """,
        (vault_id, path),
    ).fetchone()
    if row is None:
        return None
    return QuarantineRecord(
        path=row["path"],
        risk=row["risk"],
        blob_sha=row["blob_sha"],
        findings=list(row["findings"] or []),
        rule_ids=list(row["rule_ids"]),
        first_seen_at=row["first_seen_at"],
        updated_at=row["updated_at"],
        allowed_blob_sha=row["allowed_blob_sha"],
        allowed_at=row["allowed_at"],
    )


def is_allowed(conn: Conn, vault_id: int, path: str, blob: str) -> bool:
    """True if a review allowed `path` at exactly this blob."""
    row = conn.execute(
        "SELECT 1 FROM audit_allow WHERE vault_id = %s AND path = %s AND blob_sha = %s",
        (vault_id, path, blob),
    ).fetchone()
    return row is not None


def record_allow(conn: Conn, vault_id: int, path: str, blob: str) -> None:
    """Record that a review allowed `path` at `blob` (replacing an earlier version's review)."""
    conn.execute(
        """
        INSERT INTO audit_allow (vault_id, path, blob_sha) VALUES (%s, %s, %s)
        ON CONFLICT (vault_id, path) DO UPDATE SET blob_sha = EXCLUDED.blob_sha, allowed_at = now()
        """,
        (vault_id, path, blob),
    )


def drop_allow(conn: Conn, vault_id: int, path: str) -> str | None:
    """Withdraw the review of `path`; returns the blob it was bound to, None if there was none."""
    row = conn.execute(
        "DELETE FROM audit_allow WHERE vault_id = %s AND path = %s RETURNING blob_sha",
        (vault_id, path),
    ).fetchone()
    return None if row is None else str(row["blob_sha"])
