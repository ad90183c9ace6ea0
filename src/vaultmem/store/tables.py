"""Index writes and reads for one vault: notes, chunks, quarantine, skips, watermark, backlog.

Every function takes an open connection and leaves transaction control to the caller, so the
ingester can make one file's change (remove from search + record in the audit table, or replace
a note's chunks) atomic. SQL lives in the store room and nowhere else (search's candidate
statements aside): the review tables are in `audit`, readers' look-ups in `notes`.

The store imports no other room: what it writes of a note or a finding is stated as a protocol
here (`StoredNote`, `StoredFinding`), which the index room's values satisfy, and what text goes
into the search and embedding inputs (`StoredNote.chunk_lexemes`, `markdown.embedding_input`) is
the index's to decide.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

import numpy as np

from .db import Conn


class StoredFinding(Protocol):
    """What the audit table keeps of a finding: never the matched text (index.findings.Finding)."""

    @property
    def rule_id(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def line(self) -> int: ...


class StoredChunk(Protocol):
    """A chunk as `upsert_note` writes it (index.markdown.Chunk)."""

    @property
    def index(self) -> int: ...
    @property
    def heading(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def lines(self) -> Sequence[int]:
        """Each line's file line number (0: unknown)."""
        ...


class StoredNote(Protocol):
    """A note as `upsert_note` writes it (index.markdown.Note)."""

    @property
    def path(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def front_matter(self) -> Mapping[str, Any]: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def chunks(self) -> Sequence[StoredChunk]: ...
    def chunk_lexemes(self) -> list[str]:
        """Each chunk's full-text tokens, space-separated, in chunk order."""
        ...


class IndexedAs(StrEnum):
    """Which table holds a path: indexed as a note, quarantined, or skipped."""

    NOTE = "note"  # memory_notes (and its chunks in memory_primary)
    QUARANTINED = "quarantined"  # memory_secure_audit
    SKIPPED = "skipped"  # memory_skipped


class Known(NamedTuple):
    """What the index holds for a path: which table, at which blob (and a skip's code)."""

    kind: IndexedAs
    blob_sha: str | None
    code: str | None = None


@dataclass(frozen=True)
class IndexState:
    watermark: str | None
    model_id: str | None
    rebuild_target: str | None
    rebuild_started_at: Any
    last_run: dict[str, Any] | None
    chunker: str | None = None
    watermark_at: Any = None  # when the watermark was last moved (server time)

    def rechunk_due(self, signature: str) -> bool:
        """Indexed by another chunker (an upgrade, a new VAULTMEM_MAX_CHUNK_CHARS) than the one
        `signature` names: the next run re-chunks every note."""
        return self.watermark is not None and self.chunker != signature


def state(conn: Conn, vault_id: int) -> IndexState:
    row = conn.execute(
        "SELECT watermark, model_id, rebuild_target, rebuild_started_at, last_run, chunker,"
        " watermark_at FROM index_state WHERE vault_id = %s",
        (vault_id,),
    ).fetchone()
    if row is None:
        return IndexState(None, None, None, None, None)
    return IndexState(
        row["watermark"],
        row["model_id"],
        row["rebuild_target"],
        row["rebuild_started_at"],
        row["last_run"],
        row["chunker"],
        row["watermark_at"],
    )


def set_chunker(conn: Conn, vault_id: int, signature: str) -> None:
    conn.execute(
        "UPDATE index_state SET chunker = %s, updated_at = now() WHERE vault_id = %s",
        (signature, vault_id),
    )


def set_watermark(conn: Conn, vault_id: int, commit: str) -> None:
    conn.execute(
        "UPDATE index_state SET watermark = %s, watermark_at = now(), updated_at = now()"
        " WHERE vault_id = %s",
        (commit, vault_id),
    )


def set_model(conn: Conn, vault_id: int, model_id: str) -> None:
    """Make `model_id` the vault's embedding model. A chunk's vector is always of its vault's
    model or NULL (the backlog is exactly the NULL rows, which a partial index finds without
    reading the vault), so a change of model clears the other model's vectors, once. The
    shared cache keeps them: switching back costs no model call."""
    changed = conn.execute(
        "UPDATE index_state SET model_id = %s, updated_at = now()"
        " WHERE vault_id = %s AND model_id IS DISTINCT FROM %s RETURNING vault_id",
        (model_id, vault_id, model_id),
    ).fetchone()
    if changed:
        conn.execute(
            "UPDATE memory_primary SET embedding = NULL, model_id = NULL, updated_at = now()"
            " WHERE vault_id = %s AND embedding IS NOT NULL AND model_id IS DISTINCT FROM %s",
            (vault_id, model_id),
        )


def set_last_run(conn: Conn, vault_id: int, outcome: dict[str, Any]) -> None:
    conn.execute(
        "UPDATE index_state SET last_run = %s, updated_at = now() WHERE vault_id = %s",
        (json.dumps(outcome, default=str), vault_id),
    )


def start_rebuild(conn: Conn, vault_id: int, target: str) -> Any:
    """Record a rebuild towards `target`; an unfinished one for the same target is resumed."""
    row = conn.execute(
        """
        UPDATE index_state SET
            rebuild_started_at = CASE WHEN rebuild_target = %(t)s AND rebuild_started_at IS NOT NULL
                                      THEN rebuild_started_at ELSE now() END,
            rebuild_target = %(t)s
        WHERE vault_id = %(v)s RETURNING rebuild_started_at
        """,
        {"t": target, "v": vault_id},
    ).fetchone()
    return row["rebuild_started_at"] if row else None


def finish_rebuild(conn: Conn, vault_id: int) -> None:
    conn.execute(
        "UPDATE index_state SET rebuild_target = NULL, rebuild_started_at = NULL"
        " WHERE vault_id = %s",
        (vault_id,),
    )


def known_paths(conn: Conn, vault_id: int, only: Iterable[str] | None = None) -> dict[str, Known]:
    """Paths the index holds for the vault (all, or just `only`) -> which table, which blob."""
    params: dict[str, Any] = {"v": vault_id}
    cond = ""
    if only is not None:
        params["only"] = list(only)
        cond = " AND path = ANY(%(only)s)"
    rows = conn.execute(
        f"""
        SELECT path, 'note' AS kind, blob_sha, NULL AS code FROM memory_notes
         WHERE vault_id = %(v)s{cond}
        UNION ALL SELECT path, 'quarantined', blob_sha, NULL FROM memory_secure_audit
                   WHERE vault_id = %(v)s{cond}
        UNION ALL SELECT path, 'skipped', blob_sha, code FROM memory_skipped
                   WHERE vault_id = %(v)s{cond}
        """,
        params,
    ).fetchall()
    return {r["path"]: Known(IndexedAs(r["kind"]), r["blob_sha"], r["code"]) for r in rows}


def skipped_paths(conn: Conn, vault_id: int, code: str) -> list[str]:
    """Paths skipped with `code` (e.g. the unreadable ones the next run retries)."""
    rows = conn.execute(
        "SELECT path FROM memory_skipped WHERE vault_id = %s AND code = %s ORDER BY path",
        (vault_id, code),
    ).fetchall()
    return [r["path"] for r in rows]


def paths_done_since(conn: Conn, vault_id: int, since: Any) -> set[str]:
    """Paths (re)written at or after `since`: the finished part of an interrupted rebuild."""
    rows = conn.execute(
        """
        SELECT path FROM memory_notes WHERE vault_id = %(v)s AND indexed_at >= %(s)s
        UNION SELECT path FROM memory_secure_audit WHERE vault_id = %(v)s AND updated_at >= %(s)s
        UNION SELECT path FROM memory_skipped WHERE vault_id = %(v)s AND skipped_at >= %(s)s
        """,
        {"v": vault_id, "s": since},
    ).fetchall()
    return {r["path"] for r in rows}


def delete_path(conn: Conn, vault_id: int, path: str) -> int:
    """Remove a path from every derived table (chunks go with their note). Returns rows removed."""
    n = 0
    for table in ("memory_notes", "memory_secure_audit", "memory_skipped"):
        cur = conn.execute(
            f"DELETE FROM {table} WHERE vault_id = %s AND path = %s", (vault_id, path)
        )
        n += cur.rowcount
    return n


def carry_rename(conn: Conn, vault_id: int, old: str, new: str) -> None:
    """A renamed file keeps its review decision and its quarantine history."""
    conn.execute(
        "DELETE FROM audit_allow WHERE vault_id = %s AND path = %s AND %s <> %s",
        (vault_id, new, old, new),
    )
    conn.execute(
        "UPDATE audit_allow SET path = %s WHERE vault_id = %s AND path = %s", (new, vault_id, old)
    )
    conn.execute(
        "DELETE FROM memory_secure_audit WHERE vault_id = %s AND path = %s AND %s <> %s",
        (vault_id, new, old, new),
    )
    conn.execute(
        "UPDATE memory_secure_audit SET path = %s WHERE vault_id = %s AND path = %s",
        (new, vault_id, old),
    )


def prune_embedding_cache(conn: Conn, hashes: Sequence[str] | None = None) -> int:
    """Delete cached vectors that no chunk (of any vault) refers to; only among `hashes` when
    given. Returns the rows removed."""
    if hashes is not None and not hashes:
        return 0
    # Through the schema's owner (SECURITY DEFINER): under row-level security a role sees only
    # its own chunks and could not tell that no other vault holds a text.
    row = conn.execute(
        "SELECT vaultmem_prune_embedding_cache(%s) AS n",
        (None if hashes is None else list(hashes),),
    ).fetchone()
    return int(row["n"]) if row else 0


def refresh_statistics(conn: Conn) -> None:
    """ANALYZE the tables a catch-up plans its statements on (the chunks, the lexicon, the
    vector cache), committed. A role that does not own them gets PostgreSQL's warning and
    autovacuum's statistics: nothing fails."""
    for table in ("memory_primary", "memory_lexicon", "embedding_cache"):
        conn.execute(f"ANALYZE {table}")
    conn.commit()


def flush_word_index(conn: Conn) -> int:
    """Merge the full-text index's pending list (the words of chunks written since the last
    merge) into its tree, committed; the pages merged. Until then every full-text search reads
    the whole list: up to 4 MB, 2-3 ms a search at any vault size (the lexical statement's p50,
    profiled on bench/scale.py's vaults: 1k notes 3.2 -> 1.3 ms, 50k 3.4 -> 1.8 ms merged).
    The writer that filled it pays for the merge, in proportion to what it wrote."""
    row = conn.execute("SELECT vaultmem_flush_word_index() AS n").fetchone()
    conn.commit()
    return int(row["n"]) if row else 0


def purge_embedding_cache(conn: Conn) -> int:
    """Delete every cached vector this role may delete: those it wrote and those of the roles
    acting for it (its worker roles); every entry for the role that owns vaultmem's tables.
    Chunks keep the vectors on their rows; a text that needs one again is embedded again."""
    return conn.execute("DELETE FROM embedding_cache").rowcount


def collect_garbage(conn: Conn, *, cache: bool = False) -> dict[str, int]:
    """What `vaultmem gc` removes: cached vectors no chunk uses, lexemes no chunk holds; and
    with `cache`, every cached vector this role may purge (`purge_embedding_cache`)."""
    purged = purge_embedding_cache(conn) if cache else 0
    cache_rows = prune_embedding_cache(conn) + purged
    lexemes = conn.execute("DELETE FROM memory_lexicon WHERE df <= 0").rowcount
    return {"embedding_cache": cache_rows, "lexicon": lexemes}


def _chunk_hashes(conn: Conn, vault_id: int, path: str) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT content_hash FROM memory_primary WHERE vault_id = %s AND path = %s",
        (vault_id, path),
    ).fetchall()
    return [r["content_hash"] for r in rows]


def quarantine(
    conn: Conn, vault_id: int, path: str, blob: str, findings: Sequence[StoredFinding]
) -> None:
    """Take a file out of search and record why. Stores rule ids and line numbers, never text.

    The vectors of its former chunks go too, unless another chunk still has the same text."""
    old_hashes = _chunk_hashes(conn, vault_id, path)
    conn.execute("DELETE FROM memory_notes WHERE vault_id = %s AND path = %s", (vault_id, path))
    prune_embedding_cache(conn, old_hashes)
    conn.execute("DELETE FROM memory_skipped WHERE vault_id = %s AND path = %s", (vault_id, path))
    categories = sorted({f.category for f in findings})
    risk = "secret" if "secret" in categories else categories[0] if categories else "sensitive"
    details = [{"rule": f.rule_id, "category": f.category, "line": f.line} for f in findings]
    conn.execute(
        """
        INSERT INTO memory_secure_audit
            (vault_id, path, blob_sha, risk, rule_ids, line_numbers, findings)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (vault_id, path) DO UPDATE SET
            blob_sha = EXCLUDED.blob_sha, risk = EXCLUDED.risk, rule_ids = EXCLUDED.rule_ids,
            line_numbers = EXCLUDED.line_numbers, findings = EXCLUDED.findings, updated_at = now()
        """,
        (
            vault_id,
            path,
            blob,
            risk,
            sorted({f.rule_id for f in findings}),
            sorted({f.line for f in findings}),
            json.dumps(details),
        ),
    )


def mark_skipped(
    conn: Conn, vault_id: int, path: str, blob: str | None, reason: str, code: str | None = None
) -> None:
    """Record that `path` is not indexed: `code` is the triage SkipCode, `reason` its sentence."""
    conn.execute("DELETE FROM memory_notes WHERE vault_id = %s AND path = %s", (vault_id, path))
    conn.execute(
        "DELETE FROM memory_secure_audit WHERE vault_id = %s AND path = %s", (vault_id, path)
    )
    conn.execute(
        """
        INSERT INTO memory_skipped (vault_id, path, blob_sha, reason, code)
        VALUES (%s, %s, %s, %s, %s)
        ON CONFLICT (vault_id, path) DO UPDATE SET
            blob_sha = EXCLUDED.blob_sha, reason = EXCLUDED.reason, code = EXCLUDED.code,
            skipped_at = now()
        """,
        (vault_id, path, blob, reason, code),
    )


def upsert_note(
    conn: Conn,
    vault_id: int,
    note: StoredNote,
    blob: str,
    commit: str,
    *,
    keep_unchanged: bool = True,
) -> tuple[bool, int]:
    """Write a note and bring its chunks to `note`'s. Returns (was it new, chunks written).

    A chunk the index already holds as it is (same place, heading, text and words) is kept,
    with its vectors, and only its line numbers follow an edit above it: an edit costs the
    chunks it changed, not the note. Rewriting them all cost, per chunk, the lexicon's rows of
    each of its words (removed, then added back) and a vector-index insert when the cache gave
    the vector back, both of which grow with the vault (bench/scale.py --profile-catchup).
    `keep_unchanged=False` (a rebuild's re-derivation, a review decision) rewrites them all."""
    conn.execute(
        "DELETE FROM memory_secure_audit WHERE vault_id = %s AND path = %s", (vault_id, note.path)
    )
    conn.execute(
        "DELETE FROM memory_skipped WHERE vault_id = %s AND path = %s", (vault_id, note.path)
    )
    row = conn.execute(
        """
        INSERT INTO memory_notes
            (vault_id, path, blob_sha, commit_sha, title, tags, front_matter, warnings)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (vault_id, path) DO UPDATE SET
            blob_sha = EXCLUDED.blob_sha, commit_sha = EXCLUDED.commit_sha, title = EXCLUDED.title,
            tags = EXCLUDED.tags, front_matter = EXCLUDED.front_matter,
            warnings = EXCLUDED.warnings, indexed_at = now()
        RETURNING (xmax = 0) AS inserted
        """,
        (
            vault_id,
            note.path,
            blob,
            commit,
            note.title,
            list(note.tags),
            json.dumps(note.front_matter, ensure_ascii=False),
            list(note.warnings),
        ),
    ).fetchone()
    inserted = bool(row and row["inserted"])
    chunks = note.chunks
    params = {
        "v": vault_id,
        "p": note.path,
        "i": [c.index for c in chunks],
        "h": [c.heading for c in chunks],
        "t": [c.text for c in chunks],
        "hash": [c.content_hash for c in chunks],
        "w": note.chunk_lexemes(),
        # An array per chunk, as its literal (unnest would flatten a 2-D array).
        "l": ["{" + ",".join(map(str, c.lines)) + "}" if c.lines else None for c in chunks],
        "keep": keep_unchanged and not inserted,
    }
    new_chunks = """unnest(%(i)s::integer[], %(h)s::text[], %(t)s::text[], %(hash)s::text[],
                      %(w)s::text[], %(l)s::text[]) AS c(i, heading, content, hash, words, lines)"""
    # Each statement below is one for all of the note's chunks: the lexicon triggers then count
    # the note's words once, not once per chunk.
    conn.execute(
        f"""
        DELETE FROM memory_primary p WHERE p.vault_id = %(v)s AND p.path = %(p)s
           AND NOT (%(keep)s AND EXISTS (
               SELECT 1 FROM {new_chunks}
                WHERE c.i = p.chunk_index AND c.hash = p.content_hash
                  AND c.heading = p.heading AND c.content = p.content
                  AND to_tsvector('simple', c.words) = p.lexemes))
        """,
        params,
    )
    if params["keep"]:
        # Kept chunks below an edit moved in the file. Only line_map is set (not updated_at,
        # which the backlog's index holds), so the row is not re-indexed when its page has room.
        conn.execute(
            f"""
            UPDATE memory_primary p SET line_map = c.lines::integer[]
              FROM {new_chunks}
             WHERE p.vault_id = %(v)s AND p.path = %(p)s AND p.chunk_index = c.i
               AND p.line_map IS DISTINCT FROM c.lines::integer[]
            """,
            params,
        )
    written = 0
    if chunks:
        written = conn.execute(
            f"""
            INSERT INTO memory_primary
                (vault_id, path, chunk_index, heading, content, content_hash, lexemes, line_map)
            SELECT %(v)s, %(p)s, c.i, c.heading, c.content, c.hash,
                   to_tsvector('simple', c.words), c.lines::integer[]
              FROM {new_chunks}
             WHERE NOT EXISTS (SELECT 1 FROM memory_primary p
                                WHERE p.vault_id = %(v)s AND p.path = %(p)s
                                  AND p.chunk_index = c.i)
            """,
            params,
        ).rowcount
    return inserted, written


def fill_from_cache(
    conn: Conn,
    vault_id: int,
    model_id: str,
    paths: Iterable[str] | None = None,
    dimension: int | None = None,
) -> int:
    """Give chunks whose content is already embedded (by this model, in an entry the vault
    trusts, of `dimension` when given: `vector_cache`) their vector. No model call."""
    params: dict[str, Any] = {"v": vault_id, "m": model_id}
    where = ""
    if paths is not None:
        params["paths"] = list(paths)
        where = " AND p.path = ANY(%(paths)s)"
    if dimension is not None:
        params["d"] = int(dimension)
        where += " AND vector_dims(c.embedding) = %(d)s"
    cur = conn.execute(
        f"""
        UPDATE memory_primary p SET embedding = c.embedding, model_id = c.model_id,
               updated_at = now()
          FROM embedding_cache c, vaults v
         WHERE p.vault_id = %(v)s AND c.model_id = %(m)s AND c.content_hash = p.content_hash
           AND v.id = p.vault_id AND vaultmem_trusts(c.written_by, v.owner)
           AND p.embedding IS NULL{where}
           AND EXISTS (SELECT 1 FROM index_state s WHERE s.vault_id = %(v)s AND s.model_id = %(m)s)
        """,
        params,
    )
    return cur.rowcount


def backlog_size(conn: Conn, vault_id: int, model_id: str | None) -> int:
    """Chunks of the vault without a `model_id` vector: its NULL rows when `model_id` is the
    vault's model (found through the backlog's partial index), every row otherwise."""
    row = conn.execute(
        """
        SELECT CASE WHEN s.model_id IS NOT DISTINCT FROM %(m)s
                    THEN (SELECT count(*) FROM memory_primary p
                           WHERE p.vault_id = %(v)s AND p.embedding IS NULL)
                    ELSE (SELECT count(*) FROM memory_primary p WHERE p.vault_id = %(v)s)
               END AS n
          FROM (SELECT (SELECT model_id FROM index_state WHERE vault_id = %(v)s) AS model_id) s
        """,
        {"v": vault_id, "m": model_id},
    ).fetchone()
    return int(row["n"]) if row else 0


def store_embeddings(
    conn: Conn,
    vault_id: int,
    model_id: str,
    hashes: Sequence[str],
    vectors: np.ndarray,
) -> int:
    """Cache vectors by content and hand them to every chunk of the vault with that content."""
    from .vector_cache import store_vectors

    store_vectors(conn, model_id, hashes, vectors)
    cur2 = conn.execute(
        """
        UPDATE memory_primary p
           SET embedding = c.embedding, model_id = c.model_id, updated_at = now()
          FROM embedding_cache c
         WHERE p.vault_id = %(v)s AND c.model_id = %(m)s AND c.content_hash = p.content_hash
           AND c.written_by = vaultmem_current_role()
           AND p.content_hash = ANY(%(h)s) AND p.embedding IS NULL
           AND EXISTS (SELECT 1 FROM index_state s WHERE s.vault_id = %(v)s AND s.model_id = %(m)s)
        """,
        {"v": vault_id, "m": model_id, "h": list(hashes)},
    )
    return cur2.rowcount


def skipped(conn: Conn, vault_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT path, code, reason, blob_sha FROM memory_skipped WHERE vault_id = %s ORDER BY path",
        (vault_id,),
    ).fetchall()
    return [dict(r) for r in rows]
