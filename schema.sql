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
    chunker         text,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- How the vault's notes were cut into chunks (markdown.chunker_signature); a different one
-- (an upgrade, a new VAULTMEM_MAX_CHUNK_CHARS) makes the next run re-chunk every note.
ALTER TABLE index_state ADD COLUMN IF NOT EXISTS chunker text;

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

-- BM25 statistics for full-text ranking (search/candidates.py): a chunk's length in tokens (a
-- generated column, so every writer gets it right), and per vault the number of chunks, their total
-- length and each lexeme's document frequency. Triggers keep the statistics exact on every insert
-- and delete (cascades included), so a query reads N, avgdl and df with a few index lookups instead
-- of counting posting lists. Positions are capped by to_tsvector (256 per lexeme), so are counts.
CREATE OR REPLACE FUNCTION vaultmem_token_count(v tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT coalesce(sum(greatest(cardinality(u.positions), 1)), 0)::integer
          FROM unnest(v) AS u $$;
ALTER TABLE memory_primary ADD COLUMN IF NOT EXISTS n_tokens integer
    GENERATED ALWAYS AS (vaultmem_token_count(lexemes)) STORED;

CREATE TABLE IF NOT EXISTS memory_lexical_stats (
    vault_id    integer PRIMARY KEY REFERENCES vaults(id) ON DELETE CASCADE,
    chunks      bigint NOT NULL DEFAULT 0,
    tokens      bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS memory_lexicon (
    vault_id    integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    lexeme      text NOT NULL,
    df          integer NOT NULL,  -- chunks of the vault containing the lexeme (always > 0)
    PRIMARY KEY (vault_id, lexeme)
);

CREATE OR REPLACE FUNCTION vaultmem_lexical_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_lexical_stats AS s (vault_id, chunks, tokens)
        SELECT vault_id, count(*), sum(n_tokens) FROM new_rows GROUP BY 1 ORDER BY 1
        ON CONFLICT (vault_id) DO UPDATE
            SET chunks = s.chunks + EXCLUDED.chunks, tokens = s.tokens + EXCLUDED.tokens;
    INSERT INTO memory_lexicon AS l (vault_id, lexeme, df)
        SELECT r.vault_id, u.lexeme, count(*)
        FROM new_rows r CROSS JOIN LATERAL unnest(tsvector_to_array(r.lexemes)) AS u(lexeme)
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (vault_id, lexeme) DO UPDATE SET df = l.df + EXCLUDED.df;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION vaultmem_lexical_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_lexical_stats AS s
        SET chunks = s.chunks - d.chunks, tokens = s.tokens - d.tokens
        FROM (SELECT vault_id, count(*) AS chunks, sum(n_tokens) AS tokens
              FROM old_rows GROUP BY 1) AS d
        WHERE s.vault_id = d.vault_id;
    UPDATE memory_lexicon AS l SET df = l.df - d.n
        FROM (SELECT r.vault_id, u.lexeme, count(*) AS n
              FROM old_rows r CROSS JOIN LATERAL unnest(tsvector_to_array(r.lexemes)) AS u(lexeme)
              GROUP BY 1, 2) AS d
        WHERE l.vault_id = d.vault_id AND l.lexeme = d.lexeme;
    -- A lexeme no chunk holds any more is removed, not kept at df = 0: it may be the last trace
    -- of a secret that was deleted or quarantined.
    DELETE FROM memory_lexicon AS l
        USING (SELECT DISTINCT r.vault_id, u.lexeme
               FROM old_rows r CROSS JOIN LATERAL unnest(tsvector_to_array(r.lexemes)) AS u(lexeme))
              AS d
        WHERE l.vault_id = d.vault_id AND l.lexeme = d.lexeme AND l.df <= 0;
    RETURN NULL;
END $$;

-- vaultmem never rewrites lexemes in place (a changed chunk is deleted and inserted), but an
-- UPDATE that does is still counted: one row at a time, only when the lexemes column is set.
CREATE OR REPLACE FUNCTION vaultmem_lexical_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_lexical_stats
        SET chunks = chunks - 1, tokens = tokens - OLD.n_tokens WHERE vault_id = OLD.vault_id;
    UPDATE memory_lexicon SET df = df - 1
        WHERE vault_id = OLD.vault_id AND lexeme = ANY (tsvector_to_array(OLD.lexemes));
    DELETE FROM memory_lexicon
        WHERE vault_id = OLD.vault_id AND lexeme = ANY (tsvector_to_array(OLD.lexemes)) AND df <= 0;
    INSERT INTO memory_lexical_stats AS s (vault_id, chunks, tokens)
        VALUES (NEW.vault_id, 1, NEW.n_tokens)
        ON CONFLICT (vault_id) DO UPDATE SET chunks = s.chunks + 1, tokens = s.tokens + NEW.n_tokens;
    INSERT INTO memory_lexicon AS l (vault_id, lexeme, df)
        SELECT NEW.vault_id, u.lexeme, 1 FROM unnest(tsvector_to_array(NEW.lexemes)) AS u(lexeme)
        ORDER BY 2
        ON CONFLICT (vault_id, lexeme) DO UPDATE SET df = l.df + 1;
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER memory_primary_lexical_added AFTER INSERT ON memory_primary
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION vaultmem_lexical_added();
CREATE OR REPLACE TRIGGER memory_primary_lexical_removed AFTER DELETE ON memory_primary
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION vaultmem_lexical_removed();
CREATE OR REPLACE TRIGGER memory_primary_lexical_changed
    AFTER UPDATE OF lexemes, vault_id ON memory_primary
    FOR EACH ROW EXECUTE FUNCTION vaultmem_lexical_changed();
-- Vector indexes are HNSW (vector_cosine_ops), one partial expression index per model, created
-- by vaultmem when a model is first used, because the dimension is only known then.

-- Embeddings by content, so a rename, a revert or an unchanged chunk never costs a new call.
-- Rows no chunk refers to are pruned by `vaultmem rebuild` and `vaultmem gc`, and at once when
-- a note is quarantined (its old vectors are of text now known to be sensitive).
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
-- with the reason, so `status` and `verify` can show every skip. `code` is triage's SkipCode
-- (a value scripts can branch on); `reason` the sentence shown to people.
CREATE TABLE IF NOT EXISTS memory_skipped (
    vault_id    integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    path        text NOT NULL,
    blob_sha    text,
    reason      text NOT NULL,
    code        text,
    skipped_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, path)
);
ALTER TABLE memory_skipped ADD COLUMN IF NOT EXISTS code text;
