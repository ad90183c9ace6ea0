"""`vaultmem inbox` (issue 30): the agent's notes since the user last looked, read from git
history (agent author or `Vaultmem-Agent:` trailer), against real repositories; `inbox done`
keeps what was seen in the user's vaultmem home, never in the repository."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from vaultmem.agent.inbox import inbox
from vaultmem.agent.write import Provenance, remember
from vaultmem.cli import cli
from vaultmem.config import user_home


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = tmp_path / "vault"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "mine.md").write_text("# Mine\n\nuser note\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    monkeypatch.chdir(r)
    return r


def listed(args: list[str] | None = None) -> list[dict]:
    result = CliRunner().invoke(cli, ["inbox", "--json", *(args or [])])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_lists_agent_notes_with_title_session_and_commit(repo: Path) -> None:
    w = remember(
        repo, "Flaky test fix", "pin the seed", environ={}, provenance=Provenance("s-9", "/p")
    )
    (repo / "user.md").write_text("# User\n")
    git(repo, "add", "user.md")
    git(repo, "commit", "-q", "-m", "user work")
    items = listed()
    assert [(i["path"], i["title"], i["session"], i["commit"]) for i in items] == [
        ("agent/flaky-test-fix.md", "Flaky test fix", "s-9", w.commit)
    ]
    assert items[0]["project"] == "/p" and items[0]["date"][:4].isdigit()
    human = CliRunner().invoke(cli, ["inbox"])
    assert human.exit_code == 0 and "agent/flaky-test-fix.md" in human.stdout


def test_done_marks_seen_outside_the_repo_and_new_writes_show_again(repo: Path) -> None:
    remember(repo, "One", "first", environ={})
    status_before = git(repo, "status", "--porcelain")
    done = CliRunner().invoke(cli, ["inbox", "done"])
    assert done.exit_code == 0, done.output
    assert "1 note(s)" in done.stdout
    assert listed() == []
    assert git(repo, "status", "--porcelain") == status_before  # nothing written in the repo
    assert (user_home() / "inbox-seen.json").exists()
    w2 = remember(repo, "Two", "second", environ={})
    w3 = remember(repo, "One", "more", append=True, environ={})
    items = listed()
    assert [(i["path"], i["commit"], i["writes"]) for i in items] == [
        ("agent/one.md", w3.commit, 1),
        ("agent/two.md", w2.commit, 1),
    ]
    # --through: a write that lands after the listing stays in the inbox
    CliRunner().invoke(cli, ["inbox", "done", "--through", w2.commit])
    assert [i["path"] for i in listed()] == ["agent/one.md"]


def test_removed_or_reverted_notes_leave_the_inbox(repo: Path) -> None:
    a = remember(repo, "Keep", "k", environ={})
    b = remember(repo, "Drop", "d", environ={})
    git(repo, "rm", "-q", b.path)
    git(repo, "commit", "-q", "-m", "discard")
    remember(repo, "Revert me", "r", environ={})
    git(repo, "revert", "--no-edit", "HEAD")
    assert [i["path"] for i in listed()] == [a.path]


def test_trailer_alone_or_agent_author_alone_counts(repo: Path) -> None:
    (repo / "t.md").write_text("---\ntitle: By trailer\n---\nx\n")
    git(repo, "add", "t.md")
    git(repo, "commit", "-q", "-m", "note\n\nVaultmem-Agent: distill")
    (repo / "u.md").write_text("# By author\n")
    git(repo, "add", "u.md")
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "commit",
            "-q",
            "-m",
            "note",
            "--author",
            "vaultmem agent <agent@vaultmem.invalid>",
        ],
        check=True,
    )
    (repo / "v.md").write_text("# User's\n")
    git(repo, "add", "v.md")
    git(repo, "commit", "-q", "-m", "mentions Vaultmem-Agent: in the body only")
    assert [(i.path, i.title) for i in inbox(repo, user_home())] == [
        ("u.md", "u"),
        ("t.md", "By trailer"),
    ]


def test_rewritten_history_falls_back_to_the_time_of_marking(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
    remember(repo, "Old", "o", environ={})
    (repo / "user.md").write_text("# User\n")
    git(repo, "add", "user.md")
    git(repo, "commit", "-q", "-m", "user work")
    monkeypatch.delenv("GIT_COMMITTER_DATE")
    assert CliRunner().invoke(cli, ["inbox", "done"]).exit_code == 0
    git(repo, "commit", "-q", "--amend", "-m", "rewritten")  # the marked HEAD is gone
    assert listed() == []
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2030-01-01T00:00:00Z")
    remember(repo, "New", "n", environ={})
    assert [i["path"] for i in listed()] == ["agent/new.md"]


def test_a_bad_through_commit_is_one_line(repo: Path) -> None:
    result = CliRunner().invoke(cli, ["inbox", "done", "--through", "nope"])
    assert result.exit_code == 7 and result.stderr.count("\n") == 1


def test_diffs_give_each_listed_commit_its_own_change(repo: Path) -> None:
    from vaultmem.agent.inbox import diffs

    one = remember(repo, "One", "the first text", environ={})
    two = remember(repo, "Two", "the second text", environ={})
    items = inbox(repo, user_home())
    got = diffs(repo, items)
    assert set(got) == {one.commit, two.commit}
    assert "+the first text" in got[one.commit] and "second" not in got[one.commit]
    assert "+the second text" in got[two.commit] and "first" not in got[two.commit]
    assert diffs(repo, []) == {}
