"""Candidates: the one SQL statement that fetches a query's vector and full-text candidate lists,
and running it (`fetch_candidates`).

One query fetches both candidate lists (vector: ORDER BY distance over the model's partial
HNSW index with iterative scans so filters still fill the list, or over every row of a vault
that is a small share of the table, `exact_scan`; lexical: an OR tsquery of the
CJK-aware tokens from `index.lexical`, ranked by Okapi BM25 computed in SQL from per-vault
statistics) with their ranks, the chunk text and the note's metadata. Fusion, de-duplication
per note and the relevance gate then run in Python (`fusion`, `relevance`) on at most a few
hundred rows.

Design decision: these statements are search's own SQL and stay in this room, not in the
store room with vaultmem's other reads and writes: they are the retrieval algorithm (BM25,
candidate budgets, HNSW settings), measured and tuned together with fusion and the gate, and
they read only what the store's schema and triggers maintain (memory_primary, memory_notes,
memory_lexicon, memory_lexical_stats) and the planner's row estimate of memory_primary.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from ..embed import generic
from .modes import Mode
from .profiles import Fusion, fusion_or_default
from .prompt import index_is_stemmed, search_terms, tsquery_text

if TYPE_CHECKING:
    import psycopg

    from ..embed import Embedder


def _filters(path_prefix: str | None, tag: str | None) -> sql.Composable:
    parts: list[sql.Composable] = []
    if path_prefix:
        parts.append(sql.SQL(" AND starts_with(p.path, %(prefix)s)"))
    if tag:
        parts.append(
            sql.SQL(
                " AND EXISTS (SELECT 1 FROM memory_notes t WHERE t.vault_id = p.vault_id"
                " AND t.path = p.path AND t.tags @> ARRAY[%(tag)s]::text[])"
            )
        )
    return sql.Composed(parts)


def _nearest_cte(
    name: str,
    rank: str,
    column: str,
    model_column: str,
    param: str,
    model_id: str,
    dim: int,
    filters: sql.Composable,
    exact: bool = False,
    limit: str = "n",
) -> sql.Composable:
    """A nearest-neighbour candidate list: the vault's chunks by the cosine distance of their
    `column` vector (from `model_id`, whose partial HNSW index serves the ORDER BY; iterative
    scans fill the list past the vault's filter) to the query vector `param`, ranked as `rank`
    in the CTE `{name}_ranked`, at most the parameter `limit` of them. `exact` (`exact_scan`):
    every row of the vault compared instead, in an ORDER BY the index cannot serve."""
    # Literal model id and dimension: the planner must see the partial index's exact predicate
    # and expression to use it, which a bind parameter would hide in a generic plan.
    vec = sql.SQL("p.{col}::vector({dim})").format(col=sql.Identifier(column), dim=sql.Literal(dim))
    qv = sql.SQL("%({param})s::vector({dim})").format(param=sql.SQL(param), dim=sql.Literal(dim))
    return sql.SQL(
        """
        {name} AS MATERIALIZED (
            SELECT p.path, p.chunk_index, {vec} <=> {qv} AS distance
            FROM memory_primary p
            WHERE p.{model_column} = {model} AND p.vault_id = %(vault)s{filters}
            ORDER BY {order}
            LIMIT %({limit})s
        ),
        {ranked} AS (
            SELECT path, chunk_index, distance,
                   row_number() OVER (ORDER BY distance, path, chunk_index) AS {rank}
            FROM {name}
        )"""
    ).format(
        name=sql.Identifier(name),
        ranked=sql.Identifier(f"{name}_ranked"),
        rank=sql.Identifier(rank),
        vec=vec,
        qv=qv,
        order=sql.SQL("({vec} <=> {qv}) + 0" if exact else "{vec} <=> {qv}").format(vec=vec, qv=qv),
        model_column=sql.Identifier(model_column),
        model=sql.Literal(model_id),
        filters=filters,
        limit=sql.SQL(limit),
    )


def _vector_cte(
    model_id: str, dim: int, filters: sql.Composable, exact: bool = False
) -> sql.Composable:
    # The embedding model's list.
    return _nearest_cte(
        "vec", "vrank", "embedding", "model_id", "qvec", model_id, dim, filters, exact
    )


def _agnostic_cte(
    model_id: str, dim: int, filters: sql.Composable, exact: bool = False
) -> sql.Composable:
    # The second opinion's list (`second_opinion`), over the chunks' second-opinion vectors
    # and that model's partial HNSW index (`db.ensure_agnostic_index`), `agnostic_n` long.
    return _nearest_cte(
        "agn",
        "urank",
        "agnostic",
        "agnostic_model_id",
        "avec",
        model_id,
        dim,
        filters,
        exact,
        limit="un",
    )


# Whether a nearest-neighbour list compares every row of the vault rather than walking the
# model's HNSW index. The index holds every vault's rows: for a vault that is a small share of
# the table an iterative index scan visits about n / share rows to find n of its own, each a
# graph step costing several times a row compared in a plain scan of the vault's rows. So the
# scan is exact when chunks x share (chunks^2 / rows in the table) is at most EXACT_SCAN_WORK:
# a vault alone in its database up to 400 chunks; a vault of 2,000 among 16,000 rows, whose
# candidate statement then takes 13.9 ms p50 instead of 19.3 (bench/row_layout.py --others 6).
# Decided before the statement from the vault's BM25 statistics and the table's planner
# estimate, and remembered per connection for EXACT_SCAN_TTL seconds (a long-lived process
# asks once a minute): both plans in one statement, one gated off at run time, made a single
# vault's search slower to plan than the choice saved.
EXACT_SCAN_WORK = 400.0
EXACT_SCAN_TTL = 60.0
_exact_seen: weakref.WeakKeyDictionary[Any, dict[int, tuple[float, bool]]] = (
    weakref.WeakKeyDictionary()
)


def exact_scan(conn: psycopg.Connection[Any], vault_id: int) -> bool:
    """Whether the vault's nearest-neighbour lists compare its every row (see EXACT_SCAN_WORK)."""
    seen = _exact_seen.setdefault(conn, {})
    now = time.monotonic()
    found = seen.get(vault_id)
    if found is not None and now - found[0] < EXACT_SCAN_TTL:
        return found[1]
    row = conn.execute(
        "SELECT coalesce((SELECT chunks FROM memory_lexical_stats WHERE vault_id = %s), 0)"
        "::float8 AS chunks, (SELECT reltuples FROM pg_class"
        " WHERE oid = 'memory_primary'::regclass)::float8 AS total",
        (vault_id,),
    ).fetchone()
    values = list(row.values()) if isinstance(row, dict) else list(row or (0.0, 0.0))
    chunks, total = float(values[0] or 0.0), float(values[1] or 0.0)
    exact = chunks * chunks / max(total, chunks, 1.0) <= EXACT_SCAN_WORK
    seen[vault_id] = (now, exact)
    return exact


def _no_list(name: str, score: str, rank: str) -> sql.Composable:
    """An empty candidate list with a list's columns: the statement's joins stay the same
    whichever lists a search has."""
    return sql.SQL(
        f"""
        {name} AS (
            SELECT NULL::text AS path, NULL::integer AS chunk_index,
                   NULL::float8 AS {score}, NULL::bigint AS {rank}
            WHERE false
        )"""
    )


_NO_VECTOR = _no_list("vec_ranked", "distance", "vrank")
_NO_AGNOSTIC = _no_list("agn_ranked", "distance", "urank")


# Okapi BM25 parameters (the usual defaults; Lucene and Elasticsearch use the same).
BM25_K1 = 1.2
BM25_B = 0.75
# Candidate budget: the rarest query terms generate lexical candidates while their document
# frequencies add up to at most this many chunks (the rarest term always does); commoner terms
# still score those candidates but add none of their own: a chunk matching only common, low-IDF
# terms rarely reaches the top. Scoring costs ~10 us per candidate, so this bounds one query on
# a large vault (in a small vault every term generates candidates). If even the rarest term is
# that common, at most BM25_SCAN_CAP of its chunks are scored. 400 rather than 1,000: no loss on
# SciFact-1500 or CMRC (hybrid nDCG@10 0.787 / 0.985), and warm p95 at 100k chunks 25 ms, not 40.
BM25_CANDIDATE_BUDGET = 400
BM25_SCAN_CAP = 600


def _lexical_cte(filters: sql.Composable) -> sql.Composable:
    # Okapi BM25 in SQL. N, avgdl and each term's document frequency come from the per-vault
    # statistics that triggers keep (schema.sql), so nothing here counts posting lists.
    # Candidates come from the GIN index (an OR of the selective terms); a term's frequency in a
    # chunk is its position count (ts_rank_cd of a one-term query with normalisation 0 is exactly
    # 0.1 per position, and cheaper than unnesting the tsvector); a chunk's length is n_tokens.
    return sql.SQL(
        """
        lstats AS MATERIALIZED (
            SELECT greatest(coalesce(max(s.chunks), 0), 1)::float8 AS n,
                   greatest(coalesce(max(s.tokens)::float8 / nullif(max(s.chunks), 0), 1), 1)
                       AS avgdl
            FROM memory_lexical_stats s WHERE s.vault_id = %(vault)s
        ),
        lterms AS MATERIALIZED (
            SELECT t.lexeme, t.quoted, to_tsquery('simple', t.quoted) AS tq,
                   ln(1 + (st.n - coalesce(l.df, 0) + 0.5) / (coalesce(l.df, 0) + 0.5)) AS idf,
                   row_number() OVER w AS df_order,
                   sum(coalesce(l.df, 0)) OVER w AS df_cumulative
            FROM unnest(%(lterms)s::text[], %(lquoted)s::text[]) AS t(lexeme, quoted)
            CROSS JOIN lstats st
            LEFT JOIN memory_lexicon l ON l.vault_id = %(vault)s AND l.lexeme = t.lexeme
            WINDOW w AS (ORDER BY coalesce(l.df, 0), t.lexeme ROWS UNBOUNDED PRECEDING)
        ),
        lquery AS MATERIALIZED (
            SELECT to_tsquery('simple', string_agg(quoted, ' | ')) AS tsq
            FROM lterms WHERE df_order = 1 OR df_cumulative <= {budget}
        ),
        lex AS MATERIALIZED (
            SELECT p.path, p.chunk_index,
                   (SELECT sum(t.idf * f.tf * {k1p1}
                               / (f.tf + {k1} * (1 - {b} + {b} * p.n_tokens / st.avgdl)))
                    FROM lterms t,
                    LATERAL (SELECT round(ts_rank_cd(d.lx, t.tq, 0) * 10) AS tf) f
                    WHERE f.tf > 0) AS lscore
            FROM (
                SELECT p.path, p.chunk_index, p.lexemes, p.n_tokens
                FROM memory_primary p
                WHERE p.vault_id = %(vault)s AND p.lexemes @@ (SELECT tsq FROM lquery){filters}
                LIMIT {cap}
            ) p,
            -- Detoast the tsvector once per chunk, not once per term.
            LATERAL (SELECT p.lexemes || ''::tsvector AS lx OFFSET 0) d,
            lstats st
            ORDER BY lscore DESC, p.path, p.chunk_index
            LIMIT %(n)s
        ),
        lex_ranked AS (
            SELECT path, chunk_index, lscore,
                   row_number() OVER (ORDER BY lscore DESC, path, chunk_index) AS lrank
            FROM lex
        )"""
    ).format(
        filters=filters,
        k1=sql.Literal(BM25_K1),
        k1p1=sql.Literal(BM25_K1 + 1),
        b=sql.Literal(BM25_B),
        budget=sql.Literal(BM25_CANDIDATE_BUDGET),
        cap=sql.Literal(BM25_SCAN_CAP),
    )


# The full-text list as a statement of its own (see fetch_candidates: it runs while the query
# is being embedded), and the candidate statement's CTE over its result, passed back as arrays.
_LEXICAL_ONLY = sql.SQL(
    """
    SELECT path, chunk_index, lscore, lrank FROM lex_ranked"""
)

_GIVEN_LEXICAL = sql.SQL(
    """
        lex_ranked AS (
            SELECT * FROM unnest(%(lpath)s::text[], %(lchunk)s::integer[],
                                 %(lscore)s::float8[], %(lrank)s::bigint[])
                AS l(path, chunk_index, lscore, lrank)
        )"""
)

_NO_LEXICAL = _no_list("lex_ranked", "lscore", "lrank")

# Besides each candidate's ranks, scores, text and note metadata: which evidence terms it holds,
# whether it has a vector from this model yet (a chunk still in the backlog cannot be a vector
# candidate, so its missing vector part says nothing), and once per query the vault's chunk
# count and each evidence term's document frequency (what the relevance gate weighs).
_SELECT = sql.SQL(
    """,
    evidence AS MATERIALIZED (
        SELECT (SELECT greatest(coalesce(max(s.chunks), 0), 1) FROM memory_lexical_stats s
                WHERE s.vault_id = %(vault)s) AS n_chunks,
               ARRAY(SELECT coalesce(l.df, 0)
                     FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(term, i)
                     LEFT JOIN memory_lexicon l ON l.vault_id = %(vault)s AND l.lexeme = t.term
                     ORDER BY t.i) AS term_df
    )
    SELECT c.path, c.chunk_index, c.vrank, 1 - c.distance AS vscore, c.lrank, c.lscore,
           c.urank, {ucos} AS ucos,
           p.heading, p.content, p.content_hash, p.line_map, n.title, n.commit_sha, n.tags,
           (p.embedding IS NOT NULL AND p.model_id = {model}) AS has_vector,
           ARRAY(SELECT DISTINCT t.term
                 FROM unnest(%(terms)s::text[], %(tquoted)s::tsquery[]) AS t(term, tq)
                 WHERE p.lexemes @@ t.tq) AS matched,
           e.n_chunks, e.term_df
    FROM (
        SELECT path, chunk_index, v.vrank, v.distance, l.lrank, l.lscore, a.urank
        FROM vec_ranked v FULL OUTER JOIN lex_ranked l USING (path, chunk_index)
                          FULL OUTER JOIN agn_ranked a USING (path, chunk_index)
    ) c
    JOIN memory_primary p
      ON p.vault_id = %(vault)s AND p.path = c.path AND p.chunk_index = c.chunk_index
    JOIN memory_notes n ON n.vault_id = %(vault)s AND n.path = c.path
    CROSS JOIN evidence e
    """
)
# With the second opinion: every candidate's cosine by it (NULL for a chunk not filled yet).
_UCOS = (
    "CASE WHEN p.agnostic_model_id = {model}"
    " THEN 1 - (p.agnostic::vector({dim}) <=> %(avec)s::vector({dim})) END"
)


# A "yes" from has_vectors, per connection, for this many seconds. A long-lived process (the
# warm service, MCP) would otherwise probe before every query; a stale "yes" costs only a
# query embedding, since the vector list then holds none of the vault's chunks and their vector
# parts are imputed from full text, as for any chunk still in the embedding backlog.
HAS_VECTORS_TTL = 60.0
_has_vectors_seen: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], float]] = (
    weakref.WeakKeyDictionary()
)


def has_vectors(conn: psycopg.Connection[Any], model_id: str, dim: int) -> bool:
    """Whether any chunk has a vector from `model_id` (an index probe, not a scan)."""
    seen = _has_vectors_seen.setdefault(conn, {})
    now = time.monotonic()
    if now - seen.get((model_id, dim), -math.inf) < HAS_VECTORS_TTL:
        return True
    probe = np.zeros(dim, dtype=np.float32)
    probe[0] = 1.0
    query = sql.SQL(
        "SELECT 1 FROM memory_primary WHERE model_id = {model} AND embedding IS NOT NULL"
        " ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) LIMIT 1"
    ).format(model=sql.Literal(model_id), dim=sql.Literal(dim))
    row = conn.execute(query, (probe,)).fetchone()
    if row is not None:
        seen[(model_id, dim)] = now
    return row is not None


def candidate_query(
    vault_id: int,
    *,
    qvec: np.ndarray | None,
    model_id: str,
    dim: int,
    terms: Sequence[str],
    n: int,
    path_prefix: str | None = None,
    tag: str | None = None,
    evidence_terms: Sequence[str] = (),
    lexical: Sequence[dict[str, Any]] | None = None,
    agnostic: AgnosticQuery | None = None,
    agnostic_n: int | None = None,
    exact: bool = False,
) -> tuple[sql.Composed, dict[str, Any]]:
    """The one statement that fetches both candidate lists with text and metadata.

    `matched` counts the `evidence_terms` each candidate contains (for the relevance gate).
    `lexical`: the full-text list already fetched (`lexical_query`), used as it is.
    `agnostic_n`: the second opinion's list that long (`Fusion.agnostic_candidates`); None: as
    long as the others (`n`).
    `exact`: the nearest-neighbour lists compare every row of the vault (`exact_scan`).
    """
    filters = _filters(path_prefix, tag)
    lex_cte: sql.Composable
    if lexical is not None:
        lex_cte = _GIVEN_LEXICAL
    else:
        lex_cte = _lexical_cte(filters) if terms else _NO_LEXICAL
    ctes = [
        _vector_cte(model_id, dim, filters, exact) if qvec is not None else _NO_VECTOR,
        lex_cte,
    ]
    if agnostic is not None:
        adim = sql.Literal(len(agnostic.vector))
        ctes.append(
            _agnostic_cte(agnostic.model_id, len(agnostic.vector), filters, exact)
            if agnostic.candidates
            else _NO_AGNOSTIC
        )
        ucos: sql.Composable = sql.SQL(_UCOS).format(dim=adim, model=sql.Literal(agnostic.model_id))
    else:
        ctes.append(_NO_AGNOSTIC)
        ucos = sql.SQL("NULL::float8")
    select = _SELECT.format(model=sql.Literal(model_id), ucos=ucos)
    query = sql.SQL("WITH") + sql.SQL(",").join(ctes) + select
    # `matched` tests each evidence term as a one-lexeme tsquery (a cast, so no text parser
    # splits it), a binary search in the row's sorted tsvector, where intersecting all its
    # lexemes with the terms took 1-3 ms longer a query at 100 candidates.
    params: dict[str, Any] = {
        "vault": vault_id,
        "n": n,
        "terms": list(evidence_terms),
        "tquoted": [tsquery_text([t]) for t in evidence_terms],
    }
    if qvec is not None:
        params["qvec"] = np.asarray(qvec, dtype=np.float32)
    if agnostic is not None:
        params["avec"] = np.asarray(agnostic.vector, dtype=np.float32)
        params["un"] = agnostic_n or n
    if lexical is not None:
        params["lpath"] = [r["path"] for r in lexical]
        params["lchunk"] = [r["chunk_index"] for r in lexical]
        params["lscore"] = [r["lscore"] for r in lexical]
        params["lrank"] = [r["lrank"] for r in lexical]
    elif terms:
        params.update(_lexical_params(terms))
    params.update(_filter_params(path_prefix, tag))
    return query, params


def _filter_params(path_prefix: str | None, tag: str | None) -> dict[str, Any]:
    """The parameters `_filters` refers to."""
    return {
        **({"prefix": path_prefix} if path_prefix else {}),
        **({"tag": tag} if tag else {}),
    }


def _lexical_params(terms: Sequence[str]) -> dict[str, Any]:
    return {
        "tsq": tsquery_text(terms),
        "lterms": list(terms),
        "lquoted": [tsquery_text([t]) for t in terms],
    }


def lexical_query(
    vault_id: int,
    *,
    terms: Sequence[str],
    n: int,
    path_prefix: str | None = None,
    tag: str | None = None,
) -> tuple[sql.Composed, dict[str, Any]]:
    """The full-text candidate list alone (path, chunk_index, lscore, lrank), exactly as the
    candidate statement computes it; `candidate_query(lexical=rows)` takes its rows back."""
    query = sql.SQL("WITH") + _lexical_cte(_filters(path_prefix, tag)) + _LEXICAL_ONLY
    params = {"vault": vault_id, "n": n, **_lexical_params(terms)}
    params.update(_filter_params(path_prefix, tag))
    return query, params


def _candidates(
    conn: psycopg.Connection[Any],
    query: sql.Composed,
    params: dict[str, Any],
    *,
    vector: bool,
    n: int,
) -> list[dict[str, Any]]:
    # One network round trip: the settings, the query and the commit go out as one pipeline.
    # iterative_scan lets the HNSW scan continue past vault/path/tag filters until the LIMIT
    # is met; relaxed order is fine because vec_ranked re-sorts by exact distance.
    with conn.pipeline():
        with conn.transaction():
            if vector:
                ef = sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(n, 40)))
                conn.execute(ef)
                conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            cur = conn.execute(query, params)
    # Connections from db.connect use dict rows; build dicts whatever the row factory.
    names = [c.name for c in cur.description or ()]
    return [r if isinstance(r, dict) else dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@dataclass(frozen=True)
class AgnosticQuery:
    """The second opinion's view of a query (`second_opinion`): its model and query vector.
    The candidate statement then adds that model's list (over the chunks' second-opinion
    vectors) and every candidate's cosine by it (`ucos`)."""

    model_id: str
    vector: Any  # numpy vector, unit length
    # Whether its own candidate list is fetched (a profile that weighs it); without, only each
    # candidate's cosine by it comes along (read from the candidate's row).
    candidates: bool = True
    # The prompt's cosine by this model to the closest generic coding request (`embed.generic`)
    generic_similarity: float | None = None


@dataclass(frozen=True)
class Candidates:
    """Everything one query's SQL round trip returned, before fusion and the gate."""

    query: str
    terms: list[str]  # the query's full-text terms (evidence even when they do not retrieve)
    rows: list[dict[str, Any]]
    use_vector: bool
    use_lexical: bool
    generic_similarity: float | None = None  # cosine to the closest generic coding request
    # The second opinion was asked: the rows carry its cosines (`ucos`, NULL where a chunk's
    # vector is not filled yet), and its own list (`urank`) when that was asked too.
    use_agnostic: bool = False
    # The second opinion's cosine of the prompt to the closest generic coding request
    agnostic_generic: float | None = None


def fetch_candidates(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: Mode = Mode.HYBRID,
    candidates: int | None = None,
    fusion: Fusion | None = None,
    agnostic: AgnosticQuery | None = None,
) -> Candidates:
    """Embed the query (if the vault has vectors from this embedder) and run the one statement.

    `agnostic` (the second opinion's query vector) adds its candidate list and cosines to a
    search that has vectors (hybrid or vector mode).

    With a query vector and a profile (`fusion`, else the embedder's) that uses the generic
    coding requests (`Fusion.generic_requests`), the query's similarity to them comes along."""
    mode = Mode.of(mode)
    if path_prefix:
        path_prefix = path_prefix.lstrip("/").removeprefix("./")
    if tag:
        tag = tag.strip().lstrip("#").strip().lower()
    # The same candidate lists for k = 5 (what the hook injects) and k = 10 (what nDCG@10 is
    # measured on), so the gate decides on the same evidence in both.
    n = candidates or max(50, k * 5)
    was_idle = conn.info.transaction_status == TransactionStatus.IDLE
    all_terms = search_terms(query, stem=index_is_stemmed(conn, vault_id))
    terms = all_terms if mode.uses_lexical else []
    qvec = None
    lexical = None
    exact = False
    if mode.uses_vector and embedder is not None:
        if has_vectors(conn, embedder.model_id, embedder.dimension):
            exact = exact_scan(conn, vault_id)
            if terms and embedder.prefetching:
                # The vector is being computed in another thread (embed.Prefetched): fetch the
                # full-text list meanwhile and hand it to the candidate statement. Measured at
                # 10k notes: 4-5 ms less per warm query on 2 idle cores.
                lex_statement, lex_params = lexical_query(
                    vault_id, terms=terms, n=n, path_prefix=path_prefix, tag=tag
                )
                with conn.cursor(row_factory=dict_row) as cur:
                    lexical = cur.execute(lex_statement, lex_params).fetchall()
            qvec = embedder.embed_query(query)
    if was_idle:
        conn.commit()  # like db.py's readers: leave an idle connection idle
    if qvec is None and not terms:
        return Candidates(query, all_terms, [], False, False)
    profile = fusion_or_default(fusion, embedder)
    statement, params = candidate_query(
        vault_id,
        qvec=qvec,
        model_id=embedder.model_id if embedder is not None else "",
        dim=embedder.dimension if embedder is not None else 0,
        terms=terms,
        n=n,
        path_prefix=path_prefix,
        tag=tag,
        evidence_terms=all_terms,
        lexical=lexical,
        agnostic=agnostic if qvec is not None else None,
        agnostic_n=profile.agnostic_candidates,
        exact=exact,
    )
    rows = _candidates(conn, statement, params, vector=qvec is not None, n=n)
    similar = None
    if qvec is not None and embedder is not None:
        if profile.generic_requests:
            similar = generic.similarity(embedder, qvec)
    return Candidates(
        query,
        all_terms,
        rows,
        qvec is not None,
        bool(terms),
        similar,
        use_agnostic=qvec is not None and agnostic is not None,
        agnostic_generic=(
            agnostic.generic_similarity if qvec is not None and agnostic is not None else None
        ),
    )
