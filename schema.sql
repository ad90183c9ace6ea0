-- vaultmem schema: the single source of truth for the database layout.
--
-- Idempotent: every statement is safe to run again, so `vaultmem init` (and a fresh
-- docker-compose container, which mounts this file) can apply it at any time.
-- The Markdown in git is the source of truth; every row here can be rebuilt from it.
-- Upgrades from older layouts are plain Python functions in src/vaultmem/migrations.py.

CREATE EXTENSION IF NOT EXISTS vector;

-- One row per applied schema version (the highest is the current one).
CREATE TABLE IF NOT EXISTS vaultmem_schema (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Each vault (a git work tree) that shares this database. Every other table is keyed by
-- vault_id so several vaults never see each other's rows.
CREATE TABLE IF NOT EXISTS vaults (
    id          serial PRIMARY KEY,
    root        text NOT NULL UNIQUE,
    name        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Where the index stands for each vault. The watermark is the last commit whose changes are
-- all applied; it only moves after everything up to it is committed to the database.
CREATE TABLE IF NOT EXISTS index_state (
    vault_id        integer PRIMARY KEY REFERENCES vaults(id) ON DELETE CASCADE,
    watermark       text,
    watermark_at    timestamptz,
    model_id        text,
    last_run        jsonb,
    rebuild_target  text,
    rebuild_started_at timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- One row per indexed note: what the index believes HEAD holds at that path.
CREATE TABLE IF NOT EXISTS memory_notes (
    vault_id      integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    path          text NOT NULL,
    blob_sha      text NOT NULL,
    commit_sha    text NOT NULL,
    title         text NOT NULL DEFAULT '',
    tags          text[] NOT NULL DEFAULT '{}',
    front_matter  jsonb NOT NULL DEFAULT '{}',
    warnings      text[] NOT NULL DEFAULT '{}',
    indexed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path)
);
CREATE INDEX IF NOT EXISTS memory_notes_tags ON memory_notes USING gin (tags);

-- The searchable rows: one per chunk of a note. `lexemes` makes a chunk findable by full-text
-- search the moment it is written; `embedding` is filled from the backlog afterwards (NULL until
-- then) and is only ever compared with vectors of the same `model_id`.
CREATE TABLE IF NOT EXISTS memory_primary (
    vault_id      integer NOT NULL,
    path          text NOT NULL,
    chunk_index   integer NOT NULL,
    heading       text NOT NULL DEFAULT '',
    content       text NOT NULL,
    content_hash  text NOT NULL,
    lexemes       tsvector NOT NULL,
    embedding     vector,
    model_id      text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path, chunk_index),
    FOREIGN KEY (vault_id, path) REFERENCES memory_notes (vault_id, path)
        ON DELETE CASCADE ON UPDATE CASCADE
);
CREATE INDEX IF NOT EXISTS memory_primary_lexemes ON memory_primary USING gin (lexemes);
CREATE INDEX IF NOT EXISTS memory_primary_hash ON memory_primary (content_hash);
-- Vector indexes are HNSW (vector_cosine_ops), one partial expression index per model, created
-- by vaultmem when a model is first used, because the dimension is only known then.

-- Embeddings by content, so a rename, a revert or an unchanged chunk never costs a new call.
CREATE TABLE IF NOT EXISTS embedding_cache (
    model_id      text NOT NULL,
    content_hash  text NOT NULL,
    embedding     vector NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_id, content_hash)
);

-- Files kept out of search because they look sensitive, with why. Never holds the secret text:
-- only rule ids, line numbers and categories.
CREATE TABLE IF NOT EXISTS memory_secure_audit (
    vault_id       integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    path           text NOT NULL,
    blob_sha       text NOT NULL,
    risk           text NOT NULL,
    rule_ids       text[] NOT NULL DEFAULT '{}',
    line_numbers   integer[] NOT NULL DEFAULT '{}',
    findings       jsonb NOT NULL DEFAULT '[]',
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path)
);

-- Reviewed false positives: bound to the blob a user looked at, so any edit is scanned again.
-- Kept apart from the derived tables so the decision survives a rebuild.
CREATE TABLE IF NOT EXISTS audit_allow (
    vault_id    integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    path        text NOT NULL,
    blob_sha    text NOT NULL,
    allowed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path)
);

-- Files at HEAD that could not be indexed (binary, too large, symlink, submodule, bad UTF-8),
-- with the reason, so `status` and `verify` can show every skip.
CREATE TABLE IF NOT EXISTS memory_skipped (
    vault_id    integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    path        text NOT NULL,
    blob_sha    text,
    reason      text NOT NULL,
    skipped_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path)
);
