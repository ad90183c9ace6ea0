"""Git-driven incremental ingestion: events, watermark, reconcile, rename reuse, rebuild, verify."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from support.indexing import fresh_build_snapshot, index, snapshot

from vaultmem import store
from vaultmem.cli import cli
from vaultmem.config import load_settings
from vaultmem.index import ingest, lexical
from vaultmem.index.verify import verify
from vaultmem.search import search
from vaultmem.store import db

LONG = "\n\n".join(f"## Part {i}\n\n" + f"Paragraph {i} about topic {i}. " * 30 for i in range(8))


def chunks(conn, root: Path) -> dict[str, list[str]]:
    snap = snapshot(conn, root)
    out: dict[str, list[str]] = {}
    for path, _, _, content, *_ in snap["chunks"]:
        out.setdefault(path, []).append(content)
    return out


def test_first_ingest_indexes_every_note_and_sets_the_watermark(conn, vault) -> None:
    vault.write("a.md", "# Alpha\n\nFirst note about sourdough.\n")
    vault.write("dir/b.md", "---\ntags: [Bread, x]\n---\n# Beta\n\nSecond note.\n")
    vault.write("image.png", b"\x89PNG\0\0")
    head = vault.commit()
    result = index(vault.root)
    assert result.mode == "reconcile"
    assert (result.added, result.ignored) == (2, 1)
    st = store.state(conn, db.find_vault(conn, vault.root).id)
    assert st.watermark == head
    snap = snapshot(conn, vault.root)
    assert [n[0] for n in snap["notes"]] == ["a.md", "dir/b.md"]
    assert snap["notes"][1][2:] == ("Beta", ["bread", "x"])
    assert all(c[6] is not None for c in snap["chunks"])  # embedded (hash model)
    assert not verify(load_settings(vault.root), vault.root, deep=True).drift


def test_modify_delete_rename_leave_nothing_stale(conn, vault, tmp_path) -> None:
    vault.write("a.md", "# A\n\nold text about apples\n")
    vault.write("b.md", "# B\n\nbananas\n")
    vault.write("c.md", LONG)
    vault.commit()
    index(vault.root)
    vault.write("a.md", "# A\n\nnew text about apricots\n")
    vault.delete("b.md")
    vault.rename("c.md", "moved/c.md")
    vault.commit()
    result = index(vault.root)
    assert result.mode == "incremental"
    assert (result.updated, result.deleted, result.renamed) == (1, 1, 1)
    assert result.embedded == 1  # only a.md's new chunk; the rename reused every vector
    got = chunks(conn, vault.root)
    assert set(got) == {"a.md", "moved/c.md"}
    assert "apricots" in got["a.md"][0] and not any("apples" in t for t in got["a.md"])
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)


def test_a_git_mv_is_counted_as_one_rename_and_nothing_else(conn, vault) -> None:
    vault.write("a.md", "# A\n\nabout apples\n")
    vault.write("b.md", LONG)
    vault.commit()
    index(vault.root)
    vault.rename("a.md", "fruit/a.md")
    vault.commit()
    result = index(vault.root)
    assert result.counts() == {
        "added": 0, "updated": 0, "unchanged": 0, "deleted": 0, "renamed": 1,
        "quarantined": 0, "skipped": 0,
    }  # fmt: skip
    assert "0 added, 0 updated, 0 unchanged, 0 deleted, 1 renamed" in result.summary()
    # renamed and edited in one commit: one rename, one update
    vault.rename("b.md", "fruit/b.md")
    vault.write("fruit/b.md", LONG.replace("Paragraph 5 about topic 5.", "Paragraph 5 is new.", 1))
    vault.commit()
    moved_and_edited = index(vault.root)
    assert (moved_and_edited.added, moved_and_edited.updated, moved_and_edited.renamed) == (0, 1, 1)


def test_a_text_only_pass_says_how_many_chunks_await_vectors(conn, vault) -> None:
    vault.write("a.md", "# A\n\nabout apples\n")
    vault.write("b.md", "# B\n\nabout bananas\n")
    vault.commit()
    result = index(vault.root, embed=False)
    assert result.backlog == 2 and "2 awaiting embeddings" in result.summary()


def test_one_line_edit_in_a_long_note_embeds_only_the_changed_chunk(conn, vault) -> None:
    vault.write("long.md", LONG)
    vault.commit()
    first = index(vault.root)
    assert first.embedded > 3
    vault.write("long.md", LONG.replace("Paragraph 5 about topic 5.", "Paragraph 5 is new.", 1))
    vault.commit()
    second = index(vault.root)
    assert second.updated == 1 and second.embedded == 1


def test_uncommitted_edits_never_reach_the_index(conn, vault) -> None:
    vault.write("a.md", "# A\n\ncommitted words\n")
    vault.commit()
    vault.write("a.md", "# A\n\nuncommitted scribbles\n")
    vault.write("new.md", "draft")
    index(vault.root)
    got = chunks(conn, vault.root)
    assert set(got) == {"a.md"} and "committed words" in got["a.md"][0]


def test_amend_and_reset_fall_back_to_reconcile_and_converge(conn, vault, tmp_path) -> None:
    vault.write("a.md", "# A\n\none\n")
    vault.commit()
    vault.write("b.md", "# B\n\ntwo\n")
    vault.commit()
    index(vault.root)
    vault.git("reset", "-q", "--hard", "HEAD~1")
    vault.write("c.md", "# C\n\nthree\n")
    vault.git("add", "-A")
    vault.git("commit", "-q", "--amend", "-m", "amended")
    result = index(vault.root)
    assert result.mode == "reconcile"
    assert result.embedded == 1  # c.md only: a.md is unchanged by blob
    assert set(chunks(conn, vault.root)) == {"a.md", "c.md"}
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)


def test_merge_commits_are_caught_up(conn, vault, tmp_path) -> None:
    vault.write("base.md", "# Base\n")
    vault.commit()
    index(vault.root)
    vault.git("checkout", "-q", "-b", "side")
    vault.write("side.md", "# Side\n\nfrom the side branch\n")
    vault.commit("side")
    vault.git("checkout", "-q", "main")
    vault.write("main.md", "# Main\n")
    vault.commit("main")
    vault.git("merge", "-q", "--no-edit", "side")
    index(vault.root)
    assert set(chunks(conn, vault.root)) == {"base.md", "side.md", "main.md"}
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)


def test_unindexable_files_are_skipped_with_reasons(conn, vault) -> None:
    vault.write("bin.md", b"abc\0def")
    vault.write("latin1.md", "caf\xe9".encode("latin-1"))
    vault.write("empty.md", "")
    (vault.root / "link.md").symlink_to("empty.md")
    vault.commit()
    result = index(vault.root)
    assert set(result.skip_reasons) == {"bin.md", "latin1.md", "link.md"}
    assert "binary" in result.skip_reasons["bin.md"]
    assert "UTF-8" in result.skip_reasons["latin1.md"]
    assert "symbolic link" in result.skip_reasons["link.md"]
    report = verify(load_settings(vault.root), vault.root)
    assert not report.drift
    assert {s["path"] for s in report.skipped} == {"bin.md", "latin1.md", "link.md"}


def test_verify_reports_drift_and_ingest_repairs_it(conn, vault) -> None:
    vault.write("a.md", "# A\n")
    vault.write("b.md", "# B\n")
    vault.commit()
    index(vault.root)
    vid = db.find_vault(conn, vault.root).id
    conn.execute("DELETE FROM memory_notes WHERE vault_id = %s AND path = 'a.md'", (vid,))
    conn.execute(
        "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha) VALUES (%s, 'ghost.md', 'x', 'y')",
        (vid,),
    )
    conn.commit()
    result = CliRunner().invoke(cli, ["verify", "--vault", str(vault.root), "--json"])
    assert result.exit_code == 8
    data = json.loads(result.stdout)
    assert data["missing"] == ["a.md"] and data["ghosts"] == ["ghost.md"]
    ingest.rebuild(load_settings(vault.root), vault.root)
    assert CliRunner().invoke(cli, ["verify", "--vault", str(vault.root)]).exit_code == 0


def test_rebuild_resumes_without_redoing_finished_notes(conn, vault) -> None:
    for i in range(120):
        vault.write(f"n{i:03}.md", f"# Note {i}\n\ncontent {i}\n")
    vault.commit()
    settings = load_settings(vault.root)
    index(vault.root)
    calls = {"n": 0}

    def crash_after_first_batch(phase: str, done: int, total: int) -> None:
        calls["n"] += 1
        if phase == "index" and done >= ingest.BATCH_FILES:
            raise KeyboardInterrupt

    try:
        ingest.rebuild(settings, vault.root, progress=crash_after_first_batch)
    except KeyboardInterrupt:
        pass
    st = store.state(conn, db.find_vault(conn, vault.root).id)
    conn.commit()
    assert st.rebuild_target is not None
    seen: list[int] = []
    result = ingest.rebuild(settings, vault.root, progress=lambda p, d, t: seen.append(t))
    assert result.unchanged >= ingest.BATCH_FILES  # the finished batch was not redone
    assert seen and seen[0] <= 120 - ingest.BATCH_FILES
    assert not verify(settings, vault.root, deep=True).drift


def test_changes_file_applies_a_saved_diff_tree(conn, vault) -> None:
    vault.write("a.md", "# A\n\nalpha\n")
    vault.commit()
    index(vault.root)
    vault.write("b.md", "# B\n\nbeta\n")
    vault.delete("a.md")
    vault.commit()
    raw = vault.git("diff-tree", "-r", "-z", "-M", "HEAD~1", "HEAD")
    f = vault.root.parent / "changes.bin"
    f.write_bytes(raw.encode("utf-8", "surrogateescape"))
    vault.register()
    result = CliRunner().invoke(
        cli, ["ingest", "--vault", str(vault.root), "--changes-file", str(f)]
    )
    assert result.exit_code == 0, result.output
    assert set(chunks(conn, vault.root)) == {"b.md"}


def test_ingest_cli_prints_counts_and_json(conn, vault) -> None:
    vault.write("a.md", "# A\n")
    vault.commit()
    r = CliRunner().invoke(cli, ["ingest", "--vault", str(vault.root)])
    assert r.exit_code == 2 and "vaultmem init" in r.output  # not registered: not indexed
    vault.register()
    r = CliRunner().invoke(cli, ["ingest", "--vault", str(vault.root)])
    assert r.exit_code == 0 and "1 added" in r.stdout
    vault.write("b.md", "# B\n")
    vault.commit()
    r = CliRunner().invoke(cli, ["ingest", "--vault", str(vault.root), "--json"])
    data = json.loads(r.stdout)
    assert data["added"] == 1 and data["mode"] == "incremental"


def test_a_change_of_chunking_re_chunks_every_note_on_the_next_run(
    conn, vault, tmp_path, monkeypatch
) -> None:
    """A new VAULTMEM_MAX_CHUNK_CHARS (or a new chunker after an upgrade) with no new commit."""
    vault.write("long.md", LONG)
    vault.write("short.md", "# Short\n\nA few words.\n")
    vault.commit()
    index(vault.root)
    vid = db.find_vault(conn, vault.root).id
    before = chunks(conn, vault.root)

    monkeypatch.setenv("VAULTMEM_MAX_CHUNK_CHARS", "400")
    report = verify(load_settings(vault.root), vault.root)  # stale until the run, even shallow
    assert report.drift and report.rechunk_due
    out = CliRunner().invoke(cli, ["status"]).stdout
    assert "run `vaultmem ingest` to re-chunk" in out and "(up to date)" not in out
    assert json.loads(CliRunner().invoke(cli, ["status", "--json"]).stdout)["vaults"][0][
        "rechunk_due"
    ]
    result = index(vault.root)
    assert result.mode == "rebuild" and result.to_commit == vault.head()
    assert result.embedded == len(chunks(conn, vault.root)["long.md"])  # short.md: from cache
    assert len(chunks(conn, vault.root)["long.md"]) > len(before["long.md"])
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
    assert not verify(load_settings(vault.root), vault.root, deep=True).drift
    assert index(vault.root).mode != "rebuild"  # once

    # A database indexed before the chunker was recorded (NULL): re-chunked once, and since
    # nothing changed, not one chunk is embedded again.
    conn.execute("UPDATE index_state SET chunker = NULL WHERE vault_id = %s", (vid,))
    conn.commit()
    again = index(vault.root)
    assert again.mode == "rebuild" and again.embedded == 0
    assert store.state(conn, vid).chunker is not None


def test_an_index_from_before_stemming_answers_word_forms_until_it_is_re_chunked(
    conn, vault
) -> None:
    """After an upgrade the stored lexemes are surface words ("mutations") until the next run;
    queries meanwhile must not be stemmed ("mutat"), or every English word form would miss."""
    vault.write("brca.md", "# BRCA1\n\nMutations in BRCA1 raise the risk.\n")
    vault.write("other.md", "# Other\n\nNothing to see.\n")
    vault.commit()
    index(vault.root)
    vid = db.find_vault(conn, vault.root).id
    # What a pre-stemming vaultmem wrote: surface words, and a chunker signature without a stemmer.
    for row in conn.execute(
        "SELECT p.path, p.chunk_index, n.title, p.heading, p.content FROM memory_primary p"
        " JOIN memory_notes n USING (vault_id, path) WHERE p.vault_id = %s",
        (vid,),
    ).fetchall():
        surface = " ".join(lexical.words(f"{row['title']}\n{row['heading']}\n{row['content']}"))
        conn.execute(
            "UPDATE memory_primary SET lexemes = to_tsvector('simple', %s)"
            " WHERE vault_id = %s AND path = %s AND chunk_index = %s",
            (surface, vid, row["path"], row["chunk_index"]),
        )
    conn.execute("UPDATE index_state SET chunker = 'v2:1500' WHERE vault_id = %s", (vid,))
    conn.commit()

    def found(q: str) -> list[str]:
        return [h.path for h in search(conn, vid, q, None, mode="lexical")]

    assert found("mutations") == ["brca.md"]  # the surface word, as stored
    assert index(vault.root).mode == "rebuild"
    assert found("mutations") == ["brca.md"] and found("mutated") == ["brca.md"]  # stemmed now
