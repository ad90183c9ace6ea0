"""A catch-up's cost follows the change, not the vault: the plan shapes behind bench/scale.py.

Timing belongs to the bench; these tests read PostgreSQL's own counters
(pg_stat_user_tables.seq_scan) around one catch-up, whose backend flushes them when it closes.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from conftest import Vault
from support.indexing import fresh_build_snapshot, index, snapshot

from vaultmem.config import load_settings
from vaultmem.embed import HashEmbedder
from vaultmem.index import ingest
from vaultmem.store import db, vector_cache

WATCHED = ("memory_lexicon", "memory_primary", "embedding_cache")


def _counters(conn: psycopg.Connection) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, seq_scan, seq_tup_read + coalesce(idx_tup_fetch, 0) AS rows_read,"
        " n_tup_ins + n_tup_upd + n_tup_del AS writes"
        " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        ([*WATCHED, "memory_notes"],),
    ).fetchall()
    out = {r["relname"]: int(r["seq_scan"]) for r in rows}
    out |= {r["relname"] + " rows": int(r["rows_read"]) for r in rows}
    out["notes written"] = next(int(r["writes"]) for r in rows if r["relname"] == "memory_notes")
    return out


def _cost_of(conn: psycopg.Connection, run) -> dict[str, int]:  # noqa: ANN001
    """Sequential scans of the watched tables by `run` (a catch-up in its own connection),
    and rows it read from them: waits for its statistics, which its backend reports on exit
    together with its writes to memory_notes."""
    before = _counters(conn)
    run()
    for _ in range(400):
        after = _counters(conn)
        if after["notes written"] > before["notes written"]:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the catch-up's statistics never arrived")
    keys = [*WATCHED, *(t + " rows" for t in WATCHED)]
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}


def _prose(i: int, words: int = 60) -> str:
    return " ".join(f"w{(i * 7919 + k * 104729) % 50021}" for k in range(words))


def _small_commit(vault, n: int) -> None:  # noqa: ANN001
    vault.write(f"notes/n{n:03d}.md", f"# Note {n}\n\nRewritten today: the rollout moved.\n")
    vault.write(f"notes/new{n}.md", "# New\n\nA note added with the edit.\n")
    vault.delete(f"notes/n{n + 1:03d}.md")
    vault.commit("a small commit")


@pytest.mark.parametrize("embed", [True, False], ids=["text and vectors", "text only"])
def test_a_small_commits_catch_up_reads_the_same_rows_in_a_vault_six_times_larger(
    conn, vault, monkeypatch, embed
) -> None:
    # With sequential scans priced out, the planner takes one only where no index could serve
    # the statement; and the rows a catch-up reads of a small commit must not grow with the
    # vault. Before, the cache fill and the backlog count read every chunk of the vault; and
    # in a text-only vault, the model's dimension (`embedding IS NOT NULL LIMIT 1`, asked once
    # per catch-up) read every chunk looking for a vector.
    def notes(first: int, last: int) -> None:
        for i in range(first, last):
            vault.write(
                f"notes/n{i:03d}.md", f"# Note {i}\n\n{_prose(i)}\n\n## More\n\n{_prose(i + 1)}\n"
            )

    def backlog() -> int:
        row = conn.execute(
            "SELECT count(*) AS n FROM memory_primary p JOIN vaults v ON v.id = p.vault_id"
            " WHERE v.root = %s AND p.embedding IS NULL",
            (str(vault.root),),
        ).fetchone()
        conn.commit()
        return int(row["n"])

    notes(0, 40)
    vault.commit("forty notes")
    index(vault.root, embed=embed)  # vectors: the hash test embedder's
    monkeypatch.setenv("PGOPTIONS", "-c enable_seqscan=off")
    _small_commit(vault, 7)
    small = _cost_of(conn, lambda: index(vault.root, embed=embed))
    small_backlog = backlog()

    notes(40, 240)
    vault.commit("two hundred more")
    index(vault.root, embed=embed)
    _small_commit(vault, 17)
    large = _cost_of(conn, lambda: index(vault.root, embed=embed))
    large_backlog = backlog()

    assert {t: small[t] + large[t] for t in WATCHED} == {t: 0 for t in WATCHED}
    # Text only, the summary counts the backlog (every chunk: what `init` says the vectors
    # still need), one index entry each; nothing else may read more in the larger vault.
    grown = large_backlog - small_backlog
    assert (grown == 0) if embed else (grown > 300)
    for t in WATCHED:
        allowed = small[t + " rows"] + 10 + (grown if t == "memory_primary" else 0)
        assert large[t + " rows"] <= allowed, (t, small, large)


def _reads_of_chunks(conn: psycopg.Connection) -> tuple[int, int]:
    """Sequential and index scans of memory_primary in this connection's transaction so far."""
    row = conn.execute(
        "SELECT seq_scan, coalesce(idx_scan, 0) AS idx FROM pg_stat_xact_user_tables"
        " WHERE relname = 'memory_primary'"
    ).fetchone()
    return int(row["seq_scan"]), int(row["idx"])


def test_the_models_dimension_comes_from_its_vector_index_not_from_the_chunks(conn, vault) -> None:
    # Every catch-up that embeds asks the model's dimension. Read from the chunks (`embedding
    # IS NOT NULL LIMIT 1`), the planner's choice at 5,000+ notes was a sequential scan of
    # memory_primary, stopping at the first vector: per catch-up, and past every other
    # vault's rows first in a shared database. The model's HNSW index fixes the dimension.
    for i in range(4):
        vault.write(f"n{i}.md", f"# N{i}\n\n{_prose(i)}\n")
    vault.commit("four notes")
    index(vault.root)
    v = db.find_vault(conn, vault.root)
    assert v is not None
    model = HashEmbedder().model_id
    held = conn.execute(
        "SELECT DISTINCT vector_dims(embedding) AS d FROM memory_primary WHERE vault_id = %s",
        (v.id,),
    ).fetchall()
    conn.commit()
    assert [r["d"] for r in held] == [HashEmbedder().dimension]

    with conn.transaction():
        before = _reads_of_chunks(conn)
        assert vector_cache.index_dimension(conn, model) == HashEmbedder().dimension
        assert _reads_of_chunks(conn) == before  # not one read of the chunks' table

    # Without the index (a model's first run, a text-only vault) there is none, and nothing
    # is read to find that out either (the old query read the whole vault when it held no
    # vector).
    with conn.transaction():
        conn.execute(f"DROP INDEX {db.hnsw_index_name(model)}")
        before = _reads_of_chunks(conn)
        assert vector_cache.index_dimension(conn, model) is None
        assert vector_cache.index_dimension(conn, "another:model") is None
        assert _reads_of_chunks(conn) == before
        raise psycopg.Rollback


def test_a_big_note_deleted_first_leaves_later_deletes_their_own_plan(conn, vault) -> None:
    # The lexicon trigger's statements were planned once per session: after a big note's
    # delete (a hash join over the whole lexicon, right for that one), every one-note delete
    # that followed in the catch-up scanned the whole lexicon as well.
    vault.write(
        "a/000-big.md",
        "# Big\n\n" + "\n\n".join(f"## Part {k}\n\n{_prose(k, 120)}" for k in range(150)) + "\n",
    )
    vault.write("z/wordlist.md", "# Many words\n\n" + " ".join(f"x{k}" for k in range(20000)))
    for i in range(8):
        vault.write(f"a/n{i}.md", f"# Small {i}\n\n{_prose(i + 500, 30)}\n")
    vault.commit("a big note, a long word list, eight small notes")
    index(vault.root, embed=False)
    conn.execute("ANALYZE")

    vault.git("rm", "-q", "-r", "a")
    vault.commit("delete the big note and the small ones")
    scans = _cost_of(conn, lambda: index(vault.root, embed=False))

    # The big note's delete may scan the lexicon (its two statements' cheapest plan, with
    # ~3,000 of the lexicon's words to change); no small note's may.
    assert scans["memory_lexicon"] <= 2


def test_the_lexicon_stays_exact_through_deletes_of_notes_sharing_words(
    conn, vault, tmp_path
) -> None:
    # Words whose count reaches zero are deleted and the others decremented, by one statement:
    # the lexicon must still equal a fresh build's, shared words included.
    for i in range(6):
        vault.write(
            f"n{i}.md", f"# N{i}\n\nshared words here {_prose(i % 2, 20)}\n\n## Two\n\nshared {i}\n"
        )
    vault.commit("six notes")
    index(vault.root, embed=False)
    vault.delete("n0.md")
    vault.delete("n3.md")
    vault.write("n4.md", "# N4\n\nnow different: shared once\n")
    vault.commit("two deletes and an edit")
    index(vault.root, embed=False)

    v = db.find_vault(conn, vault.root)
    assert v is not None
    lexicon = {
        r["lexeme"]: r["df"]
        for r in conn.execute(
            "SELECT lexeme, df FROM memory_lexicon WHERE vault_id = %s", (v.id,)
        ).fetchall()
    }
    counted = {
        r["lexeme"]: r["df"]
        for r in conn.execute(
            "SELECT u.lexeme, count(*) AS df FROM memory_primary p,"
            " unnest(tsvector_to_array(p.lexemes)) AS u(lexeme)"
            " WHERE p.vault_id = %s GROUP BY 1",
            (v.id,),
        ).fetchall()
    }
    assert lexicon == counted
    assert all(df > 0 for df in lexicon.values())
    assert snapshot(conn, vault.root)["notes"]


def test_a_new_embedding_model_re_embeds_every_chunk_and_switching_back_costs_no_call(
    conn, vault, monkeypatch
) -> None:
    # A chunk's vector is always of its vault's model or NULL (the backlog is exactly the NULL
    # rows), so a change of model clears the old vectors; the shared cache keeps them.
    for i in range(5):
        vault.write(f"n{i}.md", f"# N{i}\n\n{_prose(i)}\n")
    vault.commit("five notes")
    settings = load_settings(vault.root)
    first = ingest.catch_up(settings, vault.root, wait=True, embedder=HashEmbedder(64))
    assert first is not None and first.backlog == 0 and first.embedded > 0

    vault.write("n5.md", "# N5\n\nanother\n")
    vault.commit("one more")
    other = ingest.catch_up(settings, vault.root, wait=True, embedder=HashEmbedder(32))
    assert other is not None and other.backlog == 0
    v = db.find_vault(conn, vault.root)
    assert v is not None
    models = conn.execute(
        "SELECT model_id, count(*) AS n FROM memory_primary WHERE vault_id = %s GROUP BY 1",
        (v.id,),
    ).fetchall()
    assert [(r["model_id"], r["n"]) for r in models] == [("hash:v1-32", 6)]

    back = ingest.catch_up(settings, vault.root, wait=True, embedder=HashEmbedder(64))
    assert back is not None and back.backlog == 0
    assert back.embedded == 1  # only n5's text was never embedded by the first model
    assert {
        r["model_id"]
        for r in conn.execute(
            "SELECT model_id FROM memory_primary WHERE vault_id = %s", (v.id,)
        ).fetchall()
    } == {"hash:v1-64"}


def test_chunks_keep_their_line_numbers_and_text_when_written_in_one_statement(conn, vault) -> None:
    vault.write(
        "n.md", "# Title\n\nfirst paragraph\n\n## Part\n\nsecond, with 'quotes' and \"more\"\n"
    )
    vault.commit("one note")
    index(vault.root, embed=False)
    rows = conn.execute(
        "SELECT chunk_index, heading, content, line_map FROM memory_primary ORDER BY chunk_index"
    ).fetchall()
    assert rows and all(r["line_map"] and all(n >= 0 for n in r["line_map"]) for r in rows)
    assert any("'quotes' and \"more\"" in r["content"] for r in rows)
    assert [r["chunk_index"] for r in rows] == list(range(len(rows)))


def test_a_run_that_writes_many_rows_refreshes_the_planners_statistics(
    conn, vault, monkeypatch
) -> None:
    # Until autovacuum comes by, a table just built is planned as it was before (every vector
    # NULL, an empty lexicon): a run that wrote many rows analyzes the tables itself.
    def analyzed() -> set[str]:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE last_analyze IS NOT NULL"
            " AND relname = ANY(%s)",
            (list(WATCHED),),
        ).fetchall()
        return {r["relname"] for r in rows}

    for i in range(3):
        vault.write(f"n{i}.md", f"# N{i}\n\n{_prose(i)}\n")
    vault.commit("three notes")
    monkeypatch.setattr(ingest, "ANALYZE_AFTER_ROWS", 10_000)
    index(vault.root)
    assert analyzed() == set()  # a small run leaves it to autovacuum
    monkeypatch.setattr(ingest, "ANALYZE_AFTER_ROWS", 3)
    vault.write(
        "n3.md", f"# N3\n\n{_prose(3)}\n\n## Two\n\n{_prose(4)}\n\n## Three\n\n{_prose(5)}\n"
    )
    vault.commit("a fourth")
    index(vault.root)
    # Its statistics arrive when its backend reports them (on exit, after the run).
    for _ in range(400):
        if analyzed() == set(WATCHED):
            break
        time.sleep(0.05)
    assert analyzed() == set(WATCHED)


def _row_writes(conn: psycopg.Connection) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd, n_tup_del AS del"
        " FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        (["memory_primary", "memory_lexicon", "memory_notes"],),
    ).fetchall()
    return {f"{r['relname']} {k}": int(r[k]) for r in rows for k in ("ins", "upd", "del")}


def _writes_of(conn: psycopg.Connection, run) -> dict[str, int]:  # noqa: ANN001
    """Rows `run` (a catch-up in its own connection) inserted, updated and deleted in the
    chunks, the lexicon and the notes, once its backend has reported them (on exit)."""
    before = _row_writes(conn)
    run()
    for _ in range(400):
        after = _row_writes(conn)
        if after["memory_notes upd"] + after["memory_notes ins"] > (
            before["memory_notes upd"] + before["memory_notes ins"]
        ):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the catch-up's statistics never arrived")
    return {k: after[k] - before[k] for k in after}


def _sections(texts: list[str]) -> str:
    return (
        "# Long note\n\n" + "\n\n".join(f"## Part {k}\n\n{t}" for k, t in enumerate(texts)) + "\n"
    )


def test_an_edit_to_one_section_rewrites_that_chunk_only(conn, vault, tmp_path) -> None:
    # Rewriting all of a note's chunks for an edit to one cost, per chunk, its words' lexicon
    # rows (removed and added back) and a vector-index insert for the vector the cache gave
    # back: work that grows with the vault (bench/scale.py --profile-catchup). Unchanged chunks
    # are kept, vectors and all; the ones below the edit only have their line numbers moved.
    parts = [_prose(k, 150) for k in range(8)]
    vault.write("long.md", _sections(parts))
    vault.write("other.md", "# Other\n\nunrelated words\n")
    vault.commit("a note of eight sections")
    index(vault.root)
    v = db.find_vault(conn, vault.root)
    assert v is not None

    def chunks() -> dict[int, dict]:
        rows = conn.execute(
            "SELECT chunk_index, content_hash, line_map, embedding::text AS e, created_at"
            " FROM memory_primary WHERE vault_id = %s AND path = 'long.md'",
            (v.id,),
        ).fetchall()
        conn.commit()
        return {r["chunk_index"]: r for r in rows}

    before = chunks()
    assert len(before) >= 6
    parts[2] += "\n\nA new line in the third part.\n\nAnd another, moving the parts below it."
    vault.write("long.md", _sections(parts))
    vault.commit("edit the third part")
    writes = _writes_of(conn, lambda: index(vault.root))

    after = chunks()
    changed = [i for i in after if after[i]["content_hash"] != before[i]["content_hash"]]
    assert len(changed) == 1
    assert writes["memory_primary del"] == 1 and writes["memory_primary ins"] == 1
    # The new chunk's vector, and the moved chunks' line numbers; nothing else.
    moved = [i for i in after if i > changed[0]]
    assert writes["memory_primary upd"] == 1 + len(moved)
    # Only the changed chunk's words (150 and the heading's, before and after) move in the
    # lexicon; every chunk's did before.
    lexicon = writes["memory_lexicon ins"] + writes["memory_lexicon upd"]
    assert lexicon + writes["memory_lexicon del"] <= 2 * 170, writes
    kept = [i for i in after if i != changed[0]]
    assert all(after[i]["created_at"] == before[i]["created_at"] for i in kept)
    assert all(after[i]["e"] == before[i]["e"] for i in kept)
    assert all(after[i]["line_map"] != before[i]["line_map"] for i in moved)

    # And the index is the one a fresh build makes, line numbers included.
    fresh = fresh_build_snapshot(conn, vault.root, tmp_path, wait=True)
    assert snapshot(conn, vault.root)["chunks"] == fresh["chunks"]
    clone = next(tmp_path.glob("fresh-*"))
    lines = (
        "SELECT chunk_index, line_map FROM memory_primary p JOIN vaults v ON v.id = p.vault_id"
        " WHERE v.root = %s AND path = 'long.md' ORDER BY 1"
    )
    assert (
        conn.execute(lines, (str(vault.root),)).fetchall()
        == conn.execute(lines, (str(clone),)).fetchall()
    )


def test_a_title_change_rewrites_every_chunk_of_the_note(conn, vault) -> None:
    # The title is in every chunk's words: no chunk may be kept with the old title's lexemes.
    vault.write("n.md", _sections([_prose(k, 20) for k in range(4)]))
    vault.commit("four parts")
    index(vault.root, embed=False)
    vault.write("n.md", _sections([_prose(k, 20) for k in range(4)]).replace("Long", "Quux"))
    vault.commit("a new title")
    writes = _writes_of(conn, lambda: index(vault.root, embed=False))
    n = conn.execute("SELECT count(*) AS n FROM memory_primary WHERE path = 'n.md'").fetchone()["n"]
    assert writes["memory_primary del"] == writes["memory_primary ins"] == n
    assert (
        conn.execute(
            "SELECT count(*) AS n FROM memory_primary"
            " WHERE path = 'n.md' AND lexemes @@ to_tsquery('simple', 'quux')"
        ).fetchone()["n"]
        == n
    )


def _lexicon_and_count(conn: psycopg.Connection, vault_id: int) -> tuple[dict, dict]:
    """A vault's word counts as the triggers keep them, and as its chunks hold them."""
    kept = conn.execute(
        "SELECT lexeme, df FROM memory_lexicon WHERE vault_id = %s", (vault_id,)
    ).fetchall()
    counted = conn.execute(
        "SELECT u.lexeme, count(*) AS df FROM memory_primary p,"
        " unnest(tsvector_to_array(p.lexemes)) AS u(lexeme) WHERE p.vault_id = %s GROUP BY 1",
        (vault_id,),
    ).fetchall()
    conn.commit()
    return {r["lexeme"]: r["df"] for r in kept}, {r["lexeme"]: r["df"] for r in counted}


def test_a_purge_removes_a_vaults_words_and_leaves_anothers_counts_exact(
    conn, vault, tmp_path
) -> None:
    # A purge goes by cascade, a statement per note, each counting its words down: the other
    # vault's counts, shared words included, must stay exact through it and after it. (One
    # statement per table was tried: 6.3 s against 4.6 s at 20,000 notes, the trigger's
    # transition table then holding every chunk of the vault.)
    (tmp_path / "other").mkdir()
    other = Vault(tmp_path / "other")
    for v in (vault, other):
        for i in range(5):
            v.write(f"n{i}.md", f"# N{i}\n\nshared words {_prose(i, 30)}\n")
        v.commit("five notes")
        index(v.root, embed=False)
    gone = db.find_vault(conn, vault.root)
    kept = db.find_vault(conn, other.root)
    assert gone is not None and kept is not None

    db.delete_vault(conn, vault.root)
    conn.commit()
    for table in ("memory_notes", "memory_primary", "memory_lexicon", "memory_lexical_stats"):
        left = conn.execute(f"SELECT count(*) AS n FROM {table} WHERE vault_id = %s", (gone.id,))
        assert left.fetchone()["n"] == 0, table
    lexicon, counted = _lexicon_and_count(conn, kept.id)
    assert lexicon == counted and "share" in lexicon

    other.delete("n0.md")
    other.delete("n1.md")
    other.commit("two deletes")
    index(other.root, embed=False)
    lexicon, counted = _lexicon_and_count(conn, kept.id)
    assert lexicon == counted and lexicon["share"] == 3
    stats = conn.execute(
        "SELECT chunks FROM memory_lexical_stats WHERE vault_id = %s", (kept.id,)
    ).fetchone()
    assert stats["chunks"] == 3


def test_a_catch_up_merges_the_words_it_wrote_into_the_full_text_index(conn, vault) -> None:
    # Every full-text search reads the GIN index's whole pending list (up to 4 MB: 2-3 ms a
    # search, bench/scale.py): the writer merges what it wrote before it ends.
    vault.write("a.md", "# A\n\n" + _prose(1, 200) + "\n")
    vault.commit("a note")
    index(vault.root, embed=False)
    left = conn.execute("SELECT gin_clean_pending_list('memory_primary_lexemes') AS n")
    assert left.fetchone()["n"] == 0
    conn.commit()
    vault.write("a.md", "# A\n\n" + _prose(2, 200) + "\n")
    vault.commit("an edit")
    index(vault.root, embed=False)
    left = conn.execute("SELECT gin_clean_pending_list('memory_primary_lexemes') AS n")
    assert left.fetchone()["n"] == 0
