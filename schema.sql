-- vaultmem schema: the single source of truth for the database layout.
--
-- Idempotent: every statement is safe to run again, so `vaultmem init` (and a fresh
-- docker-compose container, which mounts this file) can apply it at any time.
-- The Markdown in git is the source of truth; every row here can be rebuilt from it.
-- Upgrades from older layouts are plain Python functions in src/vaultmem/store/migrations.py.

CREATE EXTENSION IF NOT EXISTS vector;

-- One row per applied schema version (the highest is the current one).
CREATE TABLE IF NOT EXISTS vaultmem_schema (
    version     integer PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- Each vault (a git work tree) that shares this database. Every other table is keyed by
-- vault_id so several vaults never see each other's rows. A vault row belongs to an
-- installation and its path, or is a named shared vault (see "Many machines, many people").
CREATE TABLE IF NOT EXISTS vaults (
    id          serial PRIMARY KEY,
    root        text NOT NULL,
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
-- The second opinion's model whose vectors the vault's rows hold (search/second_opinion.py).
-- Like `model_id` for the embedding, a row's vector is always of the recorded model or NULL,
-- so the backlog is exactly the NULL rows: a partial index finds them without reading the
-- vault. A new model clears the old vectors once (store.claims.retire_agnostic).
ALTER TABLE index_state ADD COLUMN IF NOT EXISTS agnostic_model_id text;

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

-- The second opinion's vector of each chunk (search/second_opinion.py: a language-agnostic
-- model's, compared with the prompt's for cross-language evidence and its own candidate list),
-- NULL until the ingester or the warm service fills it, after the chunk's own vector. Kept on
-- the row, not only in the shared cache, so that a vault's list is one partial HNSW index scan
-- filtered by vault, as the embedding's is (from the cache the planner could only scan every
-- vector of the vault: ~8 ms a prompt per 1,000 chunks).
ALTER TABLE memory_primary ADD COLUMN IF NOT EXISTS agnostic vector;
ALTER TABLE memory_primary ADD COLUMN IF NOT EXISTS agnostic_model_id text;
-- The same model's vector of each of the chunk's lines (`embed.second_opinion.opinion_lines`),
-- a float16 row-major matrix (lines x dimension) in the lines' order, NULL until filled. The
-- model was trained on sentences: in a long chunk's one vector the line that answers drowns,
-- so a search reads the judged hits' lines too (search/second_opinion.py).
ALTER TABLE memory_primary ADD COLUMN IF NOT EXISTS agnostic_lines bytea;
-- The fill's backlog: a chunk without its vector or its lines' (the first version's index
-- found only the former).
DROP INDEX IF EXISTS memory_primary_agnostic_backlog;
CREATE INDEX IF NOT EXISTS memory_primary_opinion_backlog ON memory_primary (vault_id)
    WHERE agnostic IS NULL OR agnostic_lines IS NULL;

-- Each line of a chunk's text: its line in the file (0 for a line the chunker added), so a
-- delivered passage names the lines it holds and the agent can read around them with `get`.
-- NULL for chunks of an older chunker (re-chunked on the vault's next run).
ALTER TABLE memory_primary ADD COLUMN IF NOT EXISTS line_map integer[];

-- A chunk's vectors and text stay in its row. With PostgreSQL's default (move values out of
-- line once a row passes ~2 KB) a 384-dimension vector plus a 512-dimension one always went to
-- the TOAST table, so every candidate the search scored or returned cost a TOAST lookup per
-- vector (bench/row_layout.py: up to 10 % of the candidate statement, the most where the planner
-- scans a small vault's rows among other vaults' rather than walking the HNSW index). Only a
-- row above 8,160 bytes (the most a page allows) is moved out now. A row written before keeps
-- its layout until it is written again.
ALTER TABLE memory_primary SET (toast_tuple_target = 8160);

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

-- The statements run through EXECUTE so they are planned for the rows at hand on every call.
-- As static SQL they have no parameters, so PL/pgSQL would plan them once per session and keep
-- that plan: after a big note's delete (a hash join over the whole lexicon) every later one-note
-- delete of the session scanned the vault's lexicon too (bench/scale.py: 2.5x the cost per note
-- at 1k notes, 6.8x at 3k). Lexemes whose count reaches zero are deleted rather than updated,
-- so each lexicon row is written once.
CREATE OR REPLACE FUNCTION vaultmem_lexical_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE $q$
    UPDATE memory_lexical_stats AS s
        SET chunks = s.chunks - d.chunks, tokens = s.tokens - d.tokens
        FROM (SELECT vault_id, count(*) AS chunks, sum(n_tokens) AS tokens
              FROM old_rows GROUP BY 1) AS d
        WHERE s.vault_id = d.vault_id $q$;
    -- A lexeme no chunk holds any more is removed, not kept at df = 0: it may be the last trace
    -- of a secret that was deleted or quarantined.
    EXECUTE $q$
    WITH d AS MATERIALIZED (
        SELECT r.vault_id, u.lexeme, count(*) AS n
          FROM old_rows r CROSS JOIN LATERAL unnest(tsvector_to_array(r.lexemes)) AS u(lexeme)
         GROUP BY 1, 2),
    gone AS (
        DELETE FROM memory_lexicon AS l USING d
         WHERE l.vault_id = d.vault_id AND l.lexeme = d.lexeme AND l.df <= d.n)
    UPDATE memory_lexicon AS l SET df = l.df - d.n
      FROM d
     WHERE l.vault_id = d.vault_id AND l.lexeme = d.lexeme AND l.df > d.n $q$;
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
--
-- Each entry records the role that wrote it (`written_by`, schema version 9), and a vector is
-- used for a chunk only when its writer may write that chunk's vault (the vault's owner, or a
-- role granted the owner's role: the owner's own machines and the worker roles it trusts;
-- `vaultmem_trusts`). Anyone else's entry for the same text is another trust domain's and is
-- never read for this vault: a member who caches a wrong vector (of another topic, of another
-- dimension) for a text others also hold changes only what their own vaults use. So the
-- primary key holds the writer: one entry per text, model and trust domain.
CREATE OR REPLACE FUNCTION vaultmem_current_role() RETURNS oid
    LANGUAGE sql STABLE AS $$ SELECT oid FROM pg_roles WHERE rolname = current_user $$;
CREATE TABLE IF NOT EXISTS embedding_cache (
    model_id      text NOT NULL,
    content_hash  text NOT NULL,
    embedding     vector NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    written_by    oid NOT NULL DEFAULT vaultmem_current_role(),
    PRIMARY KEY (model_id, content_hash, written_by)
);
ALTER TABLE embedding_cache ADD COLUMN IF NOT EXISTS written_by oid NOT NULL
    DEFAULT vaultmem_current_role();
DO $$ BEGIN
    -- Before version 9 the key was (model_id, content_hash): the first writer's vector served
    -- every role (migrations.m009 deleted those entries, whose writers are unknown).
    IF NOT EXISTS (SELECT 1 FROM pg_constraint c JOIN pg_attribute a
                     ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
                   WHERE c.conrelid = 'embedding_cache'::regclass AND c.contype = 'p'
                     AND a.attname = 'written_by') THEN
        ALTER TABLE embedding_cache DROP CONSTRAINT IF EXISTS embedding_cache_pkey;
        ALTER TABLE embedding_cache ADD PRIMARY KEY (model_id, content_hash, written_by);
    END IF;
END $$;
-- Is a vector written by `writer` fit for a chunk of a vault owned by `owner`? Only when the
-- writer may write that vault itself (a role with no such right could have put anything there).
-- A role dropped since has no rights: NULL, never true.
CREATE OR REPLACE FUNCTION vaultmem_trusts(writer oid, owner oid) RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT coalesce(EXISTS (SELECT 1 FROM pg_roles WHERE oid = writer)
                    AND EXISTS (SELECT 1 FROM pg_roles WHERE oid = owner)
                    AND pg_has_role(writer, owner, 'USAGE'), false) $$;

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

-- === Many machines, many people (schema version 8) ==========================================
-- A vault row belongs to an installation (a vaultmem home on one machine, `installation.py`)
-- and its path, or is a *shared* vault: a team's repository indexed once, under a name, for
-- every role it is granted to. `owner` is the role that registered it: it (and the members of
-- it) may write the vault's rows; others read a shared vault only through `vault_readers`.
-- Rows from before have no installation until the first installation that opens them claims
-- them (store.db.register_vault).
ALTER TABLE vaults ADD COLUMN IF NOT EXISTS installation uuid;
ALTER TABLE vaults ADD COLUMN IF NOT EXISTS shared boolean NOT NULL DEFAULT false;
ALTER TABLE vaults ADD COLUMN IF NOT EXISTS owner oid NOT NULL DEFAULT current_user::text::regrole::oid;
DO $$ BEGIN
    -- Before version 8 a path named one vault for every machine: `UNIQUE (root)` goes.
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = 'vaults'::regclass AND conname = 'vaults_root_key') THEN
        ALTER TABLE vaults DROP CONSTRAINT vaults_root_key;
    END IF;
END $$;
CREATE UNIQUE INDEX IF NOT EXISTS vaults_local_root
    ON vaults ((coalesce(installation, '00000000-0000-0000-0000-000000000000'::uuid)), root)
    WHERE NOT shared;
CREATE UNIQUE INDEX IF NOT EXISTS vaults_shared_name ON vaults (name) WHERE shared;

-- Who may read a shared vault besides its owner: a role, or a group role whose members all may.
CREATE TABLE IF NOT EXISTS vault_readers (
    vault_id    integer NOT NULL REFERENCES vaults(id) ON DELETE CASCADE,
    reader      oid NOT NULL,
    granted_by  oid NOT NULL DEFAULT current_user::text::regrole::oid,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vault_id, reader)
);

-- One writer per vault, held by the database: a lease with an expiry, renewed and checked inside
-- every write transaction (store.leases), so it works through a pooler in transaction mode and a
-- crashed holder's lease simply runs out. Times are the server's, never a client's clock.
CREATE TABLE IF NOT EXISTS writer_leases (
    vault_id     integer PRIMARY KEY REFERENCES vaults(id) ON DELETE CASCADE,
    holder       text NOT NULL,
    hostname     text NOT NULL DEFAULT '',
    pid          integer,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- Embedding workers (`vaultmem worker`), for `vaultmem status`: who is draining the backlog
-- and how fast. Holds no note content; a row not seen for a while is a stopped worker.
CREATE TABLE IF NOT EXISTS embedding_workers (
    id          text PRIMARY KEY,
    hostname    text NOT NULL DEFAULT '',
    pid         integer,
    role        oid NOT NULL DEFAULT current_user::text::regrole::oid,
    models      text[] NOT NULL DEFAULT '{}',
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now(),
    stopped_at  timestamptz,
    embedded    bigint NOT NULL DEFAULT 0,  -- chunk texts sent to a model
    reused      bigint NOT NULL DEFAULT 0,  -- chunks filled from the shared cache instead
    batches     bigint NOT NULL DEFAULT 0,
    seconds     double precision NOT NULL DEFAULT 0  -- time spent in the model
);
-- The backlog a worker claims: chunks whose vector is missing or from another model than their
-- vault's, newest first (store.claims).
CREATE INDEX IF NOT EXISTS memory_primary_backlog ON memory_primary (vault_id, updated_at)
    WHERE embedding IS NULL;

-- Two helpers that must see past row-level security, so they run as the tables' owner
-- (SECURITY DEFINER, with the search path pinned to this schema): deleting cached vectors no
-- chunk of any vault holds (a role sees only its own chunks, so it could never tell that nobody
-- else's uses a vector; deleting only unreferenced rows is safe to offer every role), and a
-- vault's owner (what the grants' policies compare with, without recursing into `vaults`).
DO $$ BEGIN
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION vaultmem_prune_embedding_cache(hashes text[]) RETURNS bigint
            LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $body$
            WITH gone AS (
                DELETE FROM embedding_cache c
                 WHERE (hashes IS NULL OR c.content_hash = ANY (hashes))
                   AND NOT EXISTS (SELECT 1 FROM memory_primary p
                                    WHERE p.content_hash = c.content_hash)
                RETURNING 1)
            SELECT count(*) FROM gone $body$ $f$, current_schema());
    -- The word index's pending list merged into its tree (store.tables.flush_word_index):
    -- until then every full-text search reads the whole list, up to gin_pending_list_limit.
    -- Only the index's owner may merge it, and the writer that filled it must not need to be.
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION vaultmem_flush_word_index() RETURNS bigint
            LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = %I, pg_temp AS $body$
            SELECT gin_clean_pending_list(%L::regclass) $body$ $f$,
        current_schema(), quote_ident(current_schema()) || '.memory_primary_lexemes');
    -- Whether the calling role may write vault `v` (it owns it, or is a member of its owner):
    -- a yes or no about the caller, never another vault's owner (version 8's
    -- vaultmem_vault_owner returned the owner of any vault id, which enumerated them).
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION vaultmem_owns_vault(v integer) RETURNS boolean
            LANGUAGE sql STABLE SECURITY DEFINER SET search_path = %I, pg_temp AS $body$
            SELECT coalesce((SELECT pg_has_role(session_user, owner, 'USAGE')
                             FROM vaults WHERE id = v), false) $body$ $f$, current_schema());
    -- A model's HNSW index (store.db.ensure_vector_index): only a table's owner may create an
    -- index, and the first member to use a new model must not need to be one.
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION vaultmem_ensure_vector_index(index_name text, model text,
                                                                dimension integer)
            RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
            SET search_path = %I, pg_temp AS $body$
            BEGIN
                IF index_name !~ '^memory_primary_hnsw_[0-9a-f]{12}$'
                   OR dimension NOT BETWEEN 1 AND 2000 OR length(model) NOT BETWEEN 1 AND 200 THEN
                    RAISE EXCEPTION 'not a vaultmem vector index: %%', index_name;
                END IF;
                -- A member (not the tables' owner, who may create any index anyway) only for a
                -- model a vault it may write uses: none for models nobody indexes.
                IF NOT pg_has_role(session_user, (SELECT relowner FROM pg_class
                                                   WHERE oid = 'memory_primary'::regclass), 'USAGE')
                   AND NOT EXISTS (SELECT 1 FROM index_state s JOIN vaults v ON v.id = s.vault_id
                                    WHERE s.model_id = model
                                      AND pg_has_role(session_user, v.owner, 'USAGE')) THEN
                    RAISE EXCEPTION 'no vault of role %% uses model %%', session_user, model;
                END IF;
                EXECUTE format('CREATE INDEX IF NOT EXISTS %%I ON memory_primary USING hnsw '
                               '((embedding::vector(%%s)) vector_cosine_ops) WHERE model_id = %%L',
                               index_name, dimension, model);
            END $body$ $f$, current_schema());
    -- The same for the second opinion's vectors (`agnostic`, store.db.ensure_agnostic_index).
    EXECUTE format($f$
        CREATE OR REPLACE FUNCTION vaultmem_ensure_agnostic_index(index_name text, model text,
                                                                  dimension integer)
            RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
            SET search_path = %I, pg_temp AS $body$
            BEGIN
                IF index_name !~ '^memory_primary_agnostic_[0-9a-f]{12}$'
                   OR dimension NOT BETWEEN 1 AND 2000 OR length(model) NOT BETWEEN 1 AND 200 THEN
                    RAISE EXCEPTION 'not a vaultmem second opinion index: %%', index_name;
                END IF;
                -- A member only with a vault to fill, and a few models at most.
                IF NOT pg_has_role(session_user, (SELECT relowner FROM pg_class
                                                   WHERE oid = 'memory_primary'::regclass), 'USAGE')
                   AND (NOT EXISTS (SELECT 1 FROM vaults v
                                     WHERE pg_has_role(session_user, v.owner, 'USAGE'))
                        OR (SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()
                         AND indexname LIKE 'memory\_primary\_agnostic\_%%') >= 8) THEN
                    RAISE EXCEPTION 'role %% may not add a second opinion index', session_user;
                END IF;
                EXECUTE format('CREATE INDEX IF NOT EXISTS %%I ON memory_primary USING hnsw '
                               '((agnostic::vector(%%s)) vector_cosine_ops) '
                               'WHERE agnostic_model_id = %%L',
                               index_name, dimension, model);
            END $body$ $f$, current_schema());
END $$;

-- An earlier development version kept the second opinion's index on the shared cache.
DROP FUNCTION IF EXISTS vaultmem_ensure_cache_index(text, text, integer);
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT indexname FROM pg_indexes
              WHERE schemaname = current_schema() AND tablename = 'embedding_cache'
                AND indexname LIKE 'embedding\_cache\_hnsw\_%' LOOP
        EXECUTE format('DROP INDEX %I', r.indexname);
    END LOOP;
END $$;

-- May the current role write rows owned by `owner`? It is the owner, or a member of it.
CREATE OR REPLACE FUNCTION vaultmem_may_write(owner oid) RETURNS boolean
    LANGUAGE sql STABLE AS $$ SELECT pg_has_role(current_user, owner, 'USAGE') $$;

-- Roles and row-level security. The role that owns these tables (the one that ran the schema:
-- the bundled server's superuser, or your database's owner) reads and writes everything, as
-- before. Every other role needs `vaultmem_member` (GRANT vaultmem_member TO alice) and then
-- reads only the vaults it owns and the shared vaults granted to it (or to a role it is a
-- member of), and writes only its own. Creating the group role needs CREATEROLE; without it the
-- rest still applies and an administrator creates it (README, "Several machines and teams").
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'vaultmem_member') THEN
        CREATE ROLE vaultmem_member NOLOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege OR duplicate_object THEN
    RAISE NOTICE 'vaultmem_member was not created: %', SQLERRM;
END $$;

-- The policies, created once (a guard per table, so applying the file again takes no lock).
DO $$
DECLARE
    t text;
    readable constant text := 'vault_id IN (SELECT id FROM vaults)';
    writable constant text :=
        'vault_id IN (SELECT id FROM vaults v WHERE vaultmem_may_write(v.owner))';
    has_member constant boolean :=
        EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'vaultmem_member');
BEGIN
    -- A vault: read by its owner, and when shared by each role granted (and its members).
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                   AND tablename = 'vaults' AND policyname = 'vaults_read') THEN
        CREATE POLICY vaults_read ON vaults FOR SELECT USING (
            vaultmem_may_write(owner)
            OR (shared AND EXISTS (SELECT 1 FROM vault_readers r WHERE r.vault_id = vaults.id
                                   AND pg_has_role(current_user, r.reader, 'MEMBER'))));
        CREATE POLICY vaults_write ON vaults FOR ALL
            USING (vaultmem_may_write(owner)) WITH CHECK (vaultmem_may_write(owner));
    END IF;
    -- Its readers: seen by the vault's owner and by each reader; granted by the owner.
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                   AND tablename = 'vault_readers' AND policyname = 'vault_readers_seen') THEN
        DROP POLICY IF EXISTS vault_readers_read ON vault_readers;   -- version 8's
        DROP POLICY IF EXISTS vault_readers_write ON vault_readers;
        CREATE POLICY vault_readers_seen ON vault_readers FOR SELECT USING (
            pg_has_role(current_user, reader, 'MEMBER') OR vaultmem_owns_vault(vault_id));
        CREATE POLICY vault_readers_granted ON vault_readers FOR ALL
            USING (vaultmem_owns_vault(vault_id)) WITH CHECK (vaultmem_owns_vault(vault_id));
    END IF;
    DROP FUNCTION IF EXISTS vaultmem_vault_owner(integer);
    -- Every table of a vault's index follows its vault.
    FOREACH t IN ARRAY ARRAY['index_state', 'memory_notes', 'memory_primary',
                             'memory_lexical_stats', 'memory_lexicon', 'memory_secure_audit',
                             'audit_allow', 'memory_skipped', 'writer_leases'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                       AND tablename = t AND policyname = t || '_read') THEN
            EXECUTE format('CREATE POLICY %I ON %I FOR SELECT USING (%s)',
                           t || '_read', t, readable);
            EXECUTE format('CREATE POLICY %I ON %I FOR ALL USING (%s) WITH CHECK (%s)',
                           t || '_write', t, writable, writable);
        END IF;
    END LOOP;
    -- A cached vector is seen by a role that sees a chunk of that very text in a vault whose
    -- owner trusts the entry's writer (so neither another member's vector nor the fact that
    -- another member holds a text is shown); added by a role that holds such a chunk, in its
    -- own name, for a vault it may write; changed and deleted by its writer, or by a role the writer acts for (`vaultmem
    -- gc --cache`). Version 9 replaced the policies of version 8 (any holder of a text saw
    -- every entry for it).
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                   AND tablename = 'embedding_cache'
                   AND policyname = 'embedding_cache_trusted') THEN
        DROP POLICY IF EXISTS embedding_cache_read ON embedding_cache;
        DROP POLICY IF EXISTS embedding_cache_write ON embedding_cache;
        CREATE POLICY embedding_cache_trusted ON embedding_cache FOR SELECT USING (
            EXISTS (SELECT 1 FROM memory_primary p JOIN vaults v ON v.id = p.vault_id
                     WHERE p.content_hash = embedding_cache.content_hash
                       AND vaultmem_trusts(embedding_cache.written_by, v.owner)));
        CREATE POLICY embedding_cache_add ON embedding_cache FOR INSERT WITH CHECK (
            written_by = vaultmem_current_role()
            AND EXISTS (SELECT 1 FROM memory_primary p JOIN vaults v ON v.id = p.vault_id
                         WHERE p.content_hash = embedding_cache.content_hash
                           AND vaultmem_may_write(v.owner)));
        CREATE POLICY embedding_cache_fix ON embedding_cache FOR UPDATE
            USING (written_by = vaultmem_current_role())
            WITH CHECK (written_by = vaultmem_current_role());
        CREATE POLICY embedding_cache_purge ON embedding_cache FOR DELETE
            USING (vaultmem_trusts(written_by, vaultmem_current_role()));
    END IF;
    -- A worker's row (its host name, pid and counts) is its role's to see and write, and the
    -- tables' owner's (`vaultmem status`); version 8 showed every member everyone's.
    IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = current_schema()
                   AND tablename = 'embedding_workers'
                   AND policyname = 'embedding_workers_own') THEN
        DROP POLICY IF EXISTS embedding_workers_read ON embedding_workers;
        DROP POLICY IF EXISTS embedding_workers_write ON embedding_workers;
        CREATE POLICY embedding_workers_own ON embedding_workers FOR ALL
            USING (vaultmem_may_write(role)) WITH CHECK (vaultmem_may_write(role));
    END IF;
    FOREACH t IN ARRAY ARRAY['vaults', 'vault_readers', 'index_state', 'memory_notes',
                             'memory_primary', 'memory_lexical_stats', 'memory_lexicon',
                             'memory_secure_audit', 'audit_allow', 'memory_skipped',
                             'writer_leases', 'embedding_cache', 'embedding_workers'] LOOP
        IF NOT (SELECT relrowsecurity FROM pg_class WHERE oid = t::regclass) THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        END IF;
        IF has_member AND NOT has_table_privilege('vaultmem_member', t, 'DELETE') THEN
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO vaultmem_member', t);
        END IF;
    END LOOP;
    IF has_member AND NOT has_table_privilege('vaultmem_member', 'vaultmem_schema', 'SELECT') THEN
        GRANT SELECT ON vaultmem_schema TO vaultmem_member;
        GRANT USAGE ON SEQUENCE vaults_id_seq TO vaultmem_member;
    END IF;
END $$;

-- The functions that run as the tables' owner (SECURITY DEFINER) are not PUBLIC's: only
-- vaultmem_member's (and the owner's), each checking its arguments and its caller itself.
DO $$
DECLARE
    f text;
    has_member constant boolean :=
        EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'vaultmem_member');
BEGIN
    FOREACH f IN ARRAY ARRAY['vaultmem_prune_embedding_cache(text[])',
                             'vaultmem_flush_word_index()',
                             'vaultmem_owns_vault(integer)',
                             'vaultmem_ensure_vector_index(text,text,integer)',
                             'vaultmem_ensure_agnostic_index(text,text,integer)'] LOOP
        IF has_function_privilege('public', f, 'EXECUTE') THEN
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        END IF;
        IF has_member AND NOT has_function_privilege('vaultmem_member', f, 'EXECUTE') THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO vaultmem_member', f);
        END IF;
    END LOOP;
END $$;
