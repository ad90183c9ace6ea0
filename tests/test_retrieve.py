"""`search.retrieve`, what every reader hands out: the gate's kept hits that HEAD still holds, the
gate's verdicts for --explain, and the prompt analysed once per prompt."""

from __future__ import annotations

import pytest
from conftest import Vault
from support.indexing import index
from support.reliability import wait_for

from vaultmem.agent.context import build_context
from vaultmem.config import load_settings
from vaultmem.embed import get_embedder
from vaultmem.search import Drop, Mode, Prompt, Request, Retrieval, retrieve
from vaultmem.store import db


def indexed_rollback_notes(conn, vault: Vault) -> db.Vault:
    vault.write("a.md", "# Alpha\n\nalpha rollback of the payments service\n")
    vault.commit()
    vault.write("b.md", "# Beta\n\nbeta rollback of the payments service\n")
    vault.commit()
    vault.register()
    index(vault.root)
    found = db.find_vault(conn, vault.root)
    assert found is not None
    return found


def run(conn, v: db.Vault, prompt: str | Prompt, **options) -> Retrieval:
    embedder = get_embedder(load_settings(v.root))
    return retrieve(conn, v, Request(prompt, **options), embedder)


def watermark(conn, v: db.Vault) -> str | None:
    row = conn.execute("SELECT watermark FROM index_state WHERE vault_id = %s", (v.id,)).fetchone()
    conn.commit()
    return row["watermark"] if row else None


def test_a_hit_whose_note_head_no_longer_holds_is_not_handed_out(conn, vault: Vault) -> None:
    v = indexed_rollback_notes(conn, vault)
    both = run(conn, v, "payments rollback")
    assert sorted(h.path for h in both.hits) == ["a.md", "b.md"]
    vault.git("reset", "-q", "--hard", "HEAD~1")  # no hooks installed: the index is behind
    after = run(conn, v, "payments rollback")
    assert [h.path for h in after.hits] == ["a.md"]
    # The gate still kept b.md: it is HEAD, not relevance, that leaves it out, so --explain
    # does not list it among the dropped either.
    assert {x.hit.path for x in after.verdicts if x.kept} == {"a.md", "b.md"}
    assert "b.md" not in {h.path for h, _ in after.dropped}
    # ...and the reader started the catch-up a git hook would have (waited for: no process
    # outlives the test).
    assert wait_for(lambda: watermark(conn, v) == vault.head())
    assert [h.path for h in run(conn, v, "payments rollback").hits] == ["a.md"]


def test_what_the_gate_drops_for_relevance_is_listed_and_beyond_k_is_not(conn, vault) -> None:
    v = indexed_rollback_notes(conn, vault)
    one = run(conn, v, "payments rollback", mode=Mode.LEXICAL)
    cut = run(conn, v, "payments rollback", mode=Mode.LEXICAL, k=1)
    assert len(one.hits) == 2 and len(cut.hits) == 1
    assert [x.drop for x in cut.verdicts] == [None, Drop.BEYOND_K]
    assert cut.dropped == ()
    strict = run(conn, v, "payments rollback", mode=Mode.LEXICAL, min_score=2.0)
    assert strict.hits == ()
    assert [drop for _, drop in strict.dropped] == [Drop.BELOW_MIN_SCORE] * 2


def test_a_content_free_prompt_retrieves_nothing(conn, vault: Vault) -> None:
    v = indexed_rollback_notes(conn, vault)
    assert run(conn, v, "ok continue") == Retrieval(hits=(), verdicts=())
    # A Prompt carries its decision: it is not taken again.
    assert run(conn, v, Prompt("payments rollback", content_free=True)).hits == ()


def test_a_bad_mode_is_refused_naming_the_choices(conn, vault: Vault) -> None:
    v = indexed_rollback_notes(conn, vault)
    with pytest.raises(ValueError, match="mode must be one of hybrid, vector, lexical, got 'x'"):
        run(conn, v, "payments rollback", mode="x")


def test_the_hook_path_analyses_each_prompt_once(conn, vault: Vault, monkeypatch) -> None:
    from vaultmem.search import prompt as analysis

    v = indexed_rollback_notes(conn, vault)
    calls: list[str] = []
    real = analysis.is_content_free

    def counted(text: str) -> bool:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(analysis, "is_content_free", counted)
    settings = load_settings(v.root)
    found = build_context(settings, "payments rollback", vault_root=v.root, include_memory=False)
    assert found.paths and calls == ["payments rollback"]
