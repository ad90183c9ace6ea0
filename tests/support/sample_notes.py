"""A small mixed English / Chinese vault written straight into the tables (no git, no ingest):
the rows search reads, for tests of ranking, rendering and the agent's delivery."""

from __future__ import annotations

import hashlib

import numpy as np
import psycopg

from vaultmem.embed import HashEmbedder
from vaultmem.index.lexical import lexeme_text

COMMIT = "0123456789abcdef0123456789abcdef01234567"

NOTES: dict[str, dict] = {
    "ops/postgres-backup.md": {
        "title": "Postgres backups",
        "tags": ["ops", "postgres"],
        "chunks": [
            ("Backups", "Nightly pg_dump backups of the postgres database go to the NAS."),
            ("Restore", "To restore a backup run pg_restore with --clean into an empty database."),
        ],
    },
    "ops/nginx.md": {
        "title": "Nginx reverse proxy",
        "tags": ["ops"],
        "chunks": [("Config", "The nginx reverse proxy terminates TLS and forwards to gunicorn.")],
    },
    "projects/vaultmem/design.md": {
        "title": "vaultmem design",
        "tags": ["project"],
        "chunks": [
            ("Search", "Hybrid search fuses vector similarity with full text search using RRF."),
            ("Search > Chinese", "Chinese text is split into character bigrams for search."),
            ("Budget", "The context block has a budget of 2500 characters shared across hits."),
        ],
    },
    "journal/2024-05-01.md": {
        "title": "Journal",
        "tags": ["journal"],
        "chunks": [("", "Went hiking in the mountains; the weather was great.")],
    },
    "zh/向量索引.md": {
        "title": "向量索引故障排除",
        "tags": ["zh", "ops"],
        "chunks": [
            ("修復", "向量索引壞了的時候，先停止寫入，再重建 HNSW 索引，最後檢查查詢延遲。"),
        ],
    },
    "zh/排程.md": {
        "title": "排程腳本",
        "tags": ["zh"],
        "chunks": [("", "排程器的 PATH 比互動 shell 少很多，所以排程跑的時候指令找不到。")],
    },
}


def add_note(
    conn: psycopg.Connection,
    vault_id: int,
    path: str,
    *,
    title: str,
    tags: list[str],
    chunks: list[tuple[str, str]],
    embedder: HashEmbedder | None,
) -> None:
    blob = hashlib.sha1(path.encode()).hexdigest()
    conn.execute(
        "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title, tags)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (vault_id, path, blob, COMMIT, title, tags),
    )
    vectors = embedder.embed_documents([t for _, t in chunks]) if embedder else None
    for i, (heading, text) in enumerate(chunks):
        conn.execute(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
            " content_hash, lexemes, embedding, model_id)"
            " VALUES (%s, %s, %s, %s, %s, %s, to_tsvector('simple', %s), %s, %s)",
            (
                vault_id,
                path,
                i,
                heading,
                text,
                hashlib.sha256(text.encode()).hexdigest(),
                lexeme_text(f"{title}\n{heading}\n{text}"),
                None if vectors is None else np.asarray(vectors[i], dtype=np.float32),
                None if embedder is None else embedder.model_id,
            ),
        )


def a_hit(path: str = "ops/backup.md", **fields: object) -> object:
    """A search hit as fusion makes one (`search.Hit`), for tests of the gate and rendering
    that need no database: a full-text match of one term, no vector; `fields` override."""
    from vaultmem.search import Hit

    values: dict[str, object] = dict(
        path=path,
        chunk_index=0,
        heading="",
        text="t",
        title="",
        commit_sha=COMMIT,
        tags=(),
        score=1.0,
        fused=1.0,
        vector_rank=None,
        vector_score=None,
        lexical_rank=1,
        lexical_score=1.0,
        lexical_imputed=False,
        vector_imputed=False,
        matched_terms=1,
        lexical_evidence=3.0,
        matched=frozenset({"restor"}),
        note_script="latin",
    )
    values.update(fields)
    return Hit(**values)  # type: ignore[arg-type]
