"""Agent writes that can never cost the user a file or a commit (issue 43): a target git would
not show (ignored, untracked, skip-worktree, assume-unchanged), a folder that is a file, and a
user's commit in progress (index.lock held) are refused before anything moves; HEAD, the index
and every file stay byte-identical after each refusal. Through `vaultmem remember`."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem import vaults
from vaultmem.cli import cli


def new_vault(r: Path) -> Path:
    """A registered vault (agent writes go only to those) that ignores drafts/."""
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / ".gitignore").write_text("drafts/\n")
    (r / "a.md").write_text("# A\n\nuser note\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    vaults.register(r)
    return r


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = new_vault(tmp_path / "vault")
    monkeypatch.chdir(r)
    return r


def state(repo: Path) -> tuple[str, str, dict[str, str]]:
    """HEAD, the index (as git lists it, with stat flags) and every file's bytes."""
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return git(repo, "rev-parse", "HEAD"), git(repo, "ls-files", "-s", "-v"), files


def remember(repo: Path, title: str, *args: str) -> object:
    return CliRunner().invoke(
        cli, ["remember", title, "--vault", str(repo), *args, "--file", "-"], input="agent text\n"
    )


def test_an_ignored_file_is_never_overwritten(repo: Path) -> None:
    (repo / "drafts").mkdir()
    (repo / "drafts/plan.md").write_text("my private plan\n")
    before = state(repo)
    r = remember(repo, "plan", "--folder", "drafts")
    assert r.exit_code == 9 and "ignored" in r.output and "Traceback" not in r.output
    assert state(repo) == before
    assert (repo / "drafts/plan.md").read_text() == "my private plan\n"


def test_an_untracked_file_where_the_folder_would_be_moves_nothing(repo: Path) -> None:
    (repo / "notes").write_text("an untracked file named like the folder\n")
    before = state(repo)
    r = remember(repo, "locked note", "--folder", "notes")
    assert r.exit_code == 9 and "is a file where the note's folder would be" in r.output
    assert state(repo) == before


@pytest.mark.parametrize("mark", ["--skip-worktree", "--assume-unchanged"])
def test_a_file_git_is_told_not_to_look_at_is_refused(repo: Path, mark: str) -> None:
    r = remember(repo, "kept")
    assert r.exit_code == 0, r.output
    path = repo / "agent/kept.md"
    git(repo, "update-index", mark, "agent/kept.md")
    path.write_text("the user's edit, hidden from git status\n")
    before = state(repo)
    blob = git(repo, "rev-parse", "HEAD:agent/kept.md").strip()
    r = remember(repo, "kept", "--expect-blob", blob)
    assert r.exit_code == 9 and mark.lstrip("-") in r.output
    assert state(repo) == before


def test_a_commit_in_progress_makes_the_write_refuse_with_nothing_moved(repo: Path) -> None:
    lock = repo / ".git/index.lock"
    lock.write_bytes(b"")  # a user's `git commit` with its editor open holds this
    try:
        before = state(repo)
        r = remember(repo, "locked note")
        assert r.exit_code == 9 and "index.lock" in r.output
        assert state(repo) == before and not (repo / "agent").exists()
    finally:
        lock.unlink()
    # ...and the user's next commit deletes nothing of the agent's: there is nothing of it.
    git(repo, "commit", "-q", "--allow-empty", "-m", "user")
    assert git(repo, "status", "--porcelain") == ""


def test_an_agent_note_is_created_with_the_users_umask(repo: Path) -> None:
    old = os.umask(0o022)
    try:
        r = remember(repo, "shared note")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE((repo / "agent/shared-note.md").stat().st_mode) == 0o644
    assert git(repo, "status", "--porcelain") == ""


def test_remember_never_writes_into_an_unregistered_repository(repo: Path, tmp_path: Path) -> None:
    code = tmp_path / "code-project"
    code.mkdir()
    git(code, "init", "-q", "-b", "main")
    (code / "NOTES.md").write_text("x\n")
    git(code, "add", ".")
    git(code, "commit", "-q", "-m", "code")
    before = state(code)
    r = CliRunner().invoke(
        cli, ["remember", "t", "--vault", str(code), "--file", "-"], input="agent text\n"
    )
    assert r.exit_code != 0 and "not a registered vault" in r.output
    assert state(code) == before
    os.chdir(code)  # the current directory's repository is not a vault either
    r = CliRunner().invoke(cli, ["remember", "t", "--file", "-"], input="agent text\n")
    assert r.exit_code == 0, r.output
    assert state(code) == before and (repo / "agent/t.md").is_file()  # the default vault


@pytest.mark.parametrize("title", ["Rollback policy\x01", "two\nlines", "bad \udcff bytes"])
def test_a_title_that_is_not_plain_text_gets_one_sentence_and_nothing_written(
    repo: Path, title: str
) -> None:
    before = state(repo)
    r = remember(repo, title, "--folder", "notes")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and "title" in r.output
    assert state(repo) == before
    r = remember(repo, "fine", "--folder", "notes", "--tag", "ops\x01")
    assert r.exit_code == 2 and "tag" in r.output and state(repo) == before


def test_provenance_survives_any_session_or_project_text() -> None:
    from datetime import UTC, datetime

    from vaultmem.agent.provenance import note_source
    from vaultmem.agent.write import Provenance, compose
    from vaultmem.index.markdown import front_matter

    odd = 'x\x01 "q" : [y] # z\u2028'
    data = compose(
        "Rollback policy",
        "text",
        ["ops"],
        Provenance(odd, odd),
        existing=None,
        append=False,
        now=datetime(2026, 12, 5, tzinfo=UTC),
    )
    fm = front_matter(data.decode())
    assert fm["author"] == "agent" and fm["session"] == odd and fm["tags"] == ["ops"]
    assert note_source("notes/rollback-policy.md", fm, "agent").agent


def test_a_write_tries_again_when_head_moves_under_it(repo: Path, monkeypatch) -> None:  # noqa: ANN001
    from vaultmem.index import gitwrite

    real = gitwrite._path_is_dirty
    moved: list[str] = []

    def user_commits_meanwhile(root: Path, path: str) -> bool:
        # The user's own commit lands between the write's reading HEAD and swapping it.
        if not moved:
            (repo / "mine.md").write_text("user's note\n")
            git(repo, "add", "mine.md")
            git(repo, "commit", "-q", "-m", "user commit")
            moved.append(git(repo, "rev-parse", "HEAD").strip())
        return real(root, path)

    monkeypatch.setattr(gitwrite, "_path_is_dirty", user_commits_meanwhile)
    r = remember(repo, "raced")
    assert r.exit_code == 0, r.output
    assert git(repo, "rev-parse", "HEAD~1").strip() == moved[0]  # on top of the user's commit
    assert git(repo, "log", "--format=%s", "-2").split("\n")[:2] == [
        "remember: raced",
        "user commit",
    ]
    assert git(repo, "status", "--porcelain") == ""


def _hook(repo: Path, name: str, script: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)


def test_the_users_pre_commit_hook_sees_and_can_refuse_the_agents_commit(repo: Path) -> None:
    _hook(
        repo,
        "pre-commit",
        'git diff --cached --name-only >> "$(git rev-parse --git-dir)/seen"\n'
        'if git diff --cached | grep -q forbidden; then echo "scanner: forbidden word"; exit 1; fi\n',
    )
    r = remember(repo, "fine")
    assert r.exit_code == 0, r.output
    assert "agent/fine.md" in (repo / ".git/seen").read_text()  # it ran on the agent's change
    before = state(repo)
    r = CliRunner().invoke(
        cli, ["remember", "bad", "--vault", str(repo), "--file", "-"], input="forbidden text\n"
    )
    assert r.exit_code == 9 and "pre-commit hook refused" in r.output and "scanner" in r.output
    assert state(repo) == before


def test_the_users_commit_msg_hook_runs_on_the_agents_message(repo: Path) -> None:
    _hook(repo, "commit-msg", 'echo "Reviewed-by: hook" >> "$1"\n')
    r = remember(repo, "noted")
    assert r.exit_code == 0, r.output
    assert "Reviewed-by: hook" in git(repo, "log", "-1", "--format=%B")
    _hook(repo, "commit-msg", "echo 'ticket id missing' >&2; exit 1\n")
    before = state(repo)
    r = remember(repo, "second")
    assert r.exit_code == 9 and "ticket id missing" in r.output and state(repo) == before


@pytest.fixture
def gnupg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A GnuPG home of the test's own; its agent is stopped afterwards, failure or not."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(home))
    try:
        yield home
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], capture_output=True, check=False)


def test_with_commit_gpgsign_the_agents_commit_is_signed_or_refused(
    repo: Path, gnupg: Path
) -> None:
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "Vault User <user@example.com>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    git(repo, "config", "user.signingkey", "user@example.com")
    git(repo, "config", "commit.gpgsign", "true")
    r = remember(repo, "signed note")
    assert r.exit_code == 0, r.output
    assert git(repo, "log", "-1", "--format=%G?").strip() in {"G", "U"}  # a good signature
    # Signing that cannot work: refused, naming the setting, nothing moved.
    git(repo, "config", "gpg.program", "false")
    before = state(repo)
    r = remember(repo, "unsigned note")
    assert r.exit_code == 9 and "commit.gpgsign" in r.output and state(repo) == before


# --- property: a random mix of the user's work and agent writes ----------------------------------

USER_OPS = st.sampled_from(
    ["edit", "stage", "commit", "ignored", "untracked", "lock", "unlock", "skip"]
)
AGENT_OPS = st.tuples(
    st.sampled_from(["plan", "notes", "a", "kept"]), st.sampled_from([None, "drafts", "notes"])
)


def _user_files(repo: Path) -> dict[str, str]:
    """Every file of the user's (not the agent's notes) with its bytes' digest."""
    return {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file()
        and ".git" not in p.relative_to(repo).parts
        and p.relative_to(repo).parts[0] != "agent"
    }


def _user_index(repo: Path) -> list[str]:
    return [line for line in git(repo, "ls-files", "-s").splitlines() if "\tagent/" not in line]


@settings(max_examples=10, deadline=None)
@given(ops=st.lists(st.one_of(USER_OPS, AGENT_OPS), min_size=4, max_size=12))
def test_agent_writes_never_change_a_byte_of_the_users_work(tmp_path_factory, ops) -> None:  # noqa: ANN001
    repo = new_vault(tmp_path_factory.mktemp("prop") / "vault")
    lock = repo / ".git/index.lock"
    n = 0
    for op in ops:
        n += 1
        if op == "edit":
            with (repo / "a.md").open("a") as fh:
                fh.write(f"edit {n}\n")
        elif op == "stage" and not lock.exists():
            git(repo, "add", "a.md")
        elif op == "commit" and not lock.exists():
            git(repo, "commit", "-q", "--allow-empty", "-m", f"user {n}")
        elif op == "ignored":
            (repo / "drafts").mkdir(exist_ok=True)
            (repo / "drafts/plan.md").write_text(f"private {n}\n")
        elif op == "untracked" and not (repo / "notes").is_dir():
            (repo / "notes").write_text(f"untracked {n}\n")  # a file where a folder may go
        elif op == "lock":
            lock.write_bytes(b"")
        elif op == "unlock":
            lock.unlink(missing_ok=True)
        elif op == "skip" and not lock.exists() and (repo / "agent/kept.md").exists():
            git(repo, "update-index", "--skip-worktree", "agent/kept.md")
        elif isinstance(op, tuple):
            title, folder = op
            before = (git(repo, "rev-parse", "HEAD").strip(), _user_files(repo), _user_index(repo))
            args = ["--folder", folder] if folder else []
            blob = subprocess.run(
                [
                    "git",
                    "-C",
                    str(repo),
                    "rev-parse",
                    "-q",
                    "--verify",
                    f"HEAD:{folder or 'agent'}/{title}.md",
                ],
                capture_output=True,
                text=True,
            ).stdout.strip()
            args += ["--expect-blob", blob] if blob else []
            r = remember(repo, title, *args)
            head = git(repo, "rev-parse", "HEAD").strip()
            assert r.exit_code in (0, 9, 1), r.output
            assert "Traceback" not in r.output
            # Nothing of the user's changed, whatever happened; HEAD moved only on success,
            # and then on top of the user's last commit.
            assert _user_files(repo) == before[1] or (r.exit_code == 0 and folder)
            if r.exit_code == 0 and folder:
                changed = {
                    k
                    for k in set(before[1]) | set(_user_files(repo))
                    if before[1].get(k) != _user_files(repo).get(k)
                }
                assert changed <= {f"{folder}/{title}.md"}  # only the note it wrote
            assert (head != before[0]) == (r.exit_code == 0)
            if r.exit_code == 0:
                assert git(repo, "rev-parse", "HEAD~1").strip() == before[0]
            else:
                assert _user_index(repo) == before[2]
    lock.unlink(missing_ok=True)
