"""Agent writes through git (issue 30): one file committed through a private index, never the
user's work; compare-and-swap on the ref and on the content; refusals mid-operation."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from vaultmem.index.gitwrite import AGENT_EMAIL, WriteRefused, blob_at_head, commit_file


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "vault"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.name", "User")
    git(r, "config", "user.email", "user@example.com")
    (r / "a.md").write_text("# A\n\nuser note\n")
    (r / "b.md").write_text("# B\n\nanother\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    return r


def snapshot(repo: Path) -> tuple[str, dict[str, str], str]:
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.parts and "agent" not in p.parts
    }
    return git(repo, "status", "--porcelain"), files, git(repo, "diff", "--cached")


def test_agent_file_is_committed_alone_and_user_work_is_untouched(repo: Path) -> None:
    (repo / "a.md").write_text("# A\n\nunstaged edit\n")
    (repo / "b.md").write_text("# B\n\nstaged edit\n")
    git(repo, "add", "b.md")
    (repo / "new.md").write_text("untracked\n")
    before = snapshot(repo)
    w = commit_file(repo, "agent/fact.md", b"# Fact\n\nx\n", expect_blob=None, message="remember")
    assert snapshot(repo) == before
    assert git(repo, "show", "--name-only", "--format=%ae%n%B", "HEAD").split() == [
        AGENT_EMAIL,
        "remember",
        "Vaultmem-Agent:",
        "remember",
        "agent/fact.md",
    ]
    assert (repo / "agent/fact.md").read_bytes() == b"# Fact\n\nx\n"
    assert git(repo, "status", "--porcelain", "--", "agent") == ""
    assert blob_at_head(repo, "agent/fact.md") == w.blob


def test_update_needs_the_blob_last_read(repo: Path) -> None:
    w = commit_file(repo, "agent/n.md", b"one\n", expect_blob=None, message="m")
    with pytest.raises(WriteRefused, match="changed since"):
        commit_file(repo, "agent/n.md", b"two\n", expect_blob=None, message="m")
    with pytest.raises(WriteRefused, match="changed since"):
        commit_file(repo, "agent/n.md", b"two\n", expect_blob="0" * 40, message="m")
    w2 = commit_file(repo, "agent/n.md", b"two\n", expect_blob=w.blob, message="m")
    assert w2.previous_blob == w.blob


def test_path_with_uncommitted_edits_is_refused(repo: Path) -> None:
    before = git(repo, "rev-parse", "HEAD")
    (repo / "a.md").write_text("mine\n")
    blob = blob_at_head(repo, "a.md")
    with pytest.raises(WriteRefused, match="uncommitted"):
        commit_file(repo, "a.md", b"agent\n", expect_blob=blob, message="m")
    assert (repo / "a.md").read_text() == "mine\n"
    assert git(repo, "rev-parse", "HEAD") == before


def test_detached_head_is_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(WriteRefused, match="detached"):
        commit_file(repo, "agent/x.md", b"x\n", expect_blob=None, message="m")


def test_merge_and_rebase_are_refused(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "a.md").write_text("side\n")
    git(repo, "commit", "-qam", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "a.md").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    subprocess.run(["git", "-C", str(repo), "merge", "side"], capture_output=True)
    with pytest.raises(WriteRefused, match="merge"):
        commit_file(repo, "agent/x.md", b"x\n", expect_blob=None, message="m")
    git(repo, "merge", "--abort")
    subprocess.run(["git", "-C", str(repo), "rebase", "side"], capture_output=True)
    with pytest.raises(WriteRefused, match="rebase"):
        commit_file(repo, "agent/x.md", b"x\n", expect_blob=None, message="m")


def test_symlinked_folder_is_refused(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (repo / "agent").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(WriteRefused, match="symbolic link"):
        commit_file(repo, "agent/x.md", b"x\n", expect_blob=None, message="m")
    assert not (tmp_path / "elsewhere" / "x.md").exists()


def test_two_processes_both_land(repo: Path) -> None:
    script = (
        "import sys; from pathlib import Path; from vaultmem.index.gitwrite import commit_file\n"
        "for i in range(5):\n"
        "    commit_file(Path(sys.argv[1]), f'agent/{sys.argv[2]}-{i}.md', b'x', "
        "expect_blob=None, message=f'{sys.argv[2]}-{i}')\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(repo), n]) for n in ("p", "q")]
    assert [p.wait() for p in procs] == [0, 0]
    subjects = git(repo, "log", "--format=%s").split()
    for n in ("p", "q"):
        mine = [s for s in subjects if s.startswith(n + "-")]
        assert mine == [f"{n}-{i}" for i in reversed(range(5))]
    assert git(repo, "status", "--porcelain") == ""


SECRET_MEMORIES = [
    (
        "aws",
        "The deploy key is AKIAZ7Q2WPLM4XK9RTVB with secret q8Vd2LkP0sXr7NbT4yHc9JmW3eZu6FgA1oQiK5nE",
    ),
    ("password-en", "Remember the staging login.\npassword: hunter2-Staging-2024!"),
    ("password-zh", "记住数据库登录信息。\n密码: Zh0ngWen-Mima-2024!"),
    ("aws-zh", "部署密钥是 AKIAZ7Q2WPLM4XK9RTVB，私钥 q8Vd2LkP0sXr7NbT4yHc9JmW3eZu6FgA1oQiK5nE"),
]


@pytest.mark.parametrize(("name", "text"), SECRET_MEMORIES)
def test_secret_bearing_memory_leaves_no_file_or_commit(repo: Path, name: str, text: str) -> None:
    from vaultmem.agent.write import MemoryRefused, remember

    before = git(repo, "rev-parse", "HEAD")
    with pytest.raises(MemoryRefused) as info:
        remember(repo, f"secret {name}", text, environ={})
    assert "hunter2" not in str(info.value) and "AKIAZ7Q2" not in str(info.value)
    assert "Mima" not in str(info.value)
    assert git(repo, "rev-parse", "HEAD") == before
    assert not (repo / "agent").exists()


def test_same_title_updates_and_append_adds_a_dated_entry(repo: Path) -> None:
    from vaultmem.agent.write import Provenance, remember

    w = remember(
        repo,
        "Build Gotcha",
        "use make -j2",
        tags=["build"],
        environ={},
        provenance=Provenance("s1", "/proj"),
    )
    assert w.path == "agent/build-gotcha.md"
    text = (repo / w.path).read_text()
    assert "author: agent" in text and "session: s1" in text and "project: /proj" in text
    with pytest.raises(WriteRefused):
        remember(repo, "Build Gotcha", "other", environ={})
    w2 = remember(repo, "Build Gotcha", "also ccache", append=True, environ={})
    assert w2.path == w.path
    assert "use make -j2" in (repo / w.path).read_text()
    assert "also ccache" in (repo / w.path).read_text()
    w3 = remember(repo, "build gotcha", "replaced", expect_blob=w2.blob, environ={})
    assert "replaced" in (repo / w3.path).read_text()
    assert remember(repo, "x", "y", environ={"VAULTMEM_AGENT_FOLDER": "mem"}).path == "mem/x.md"


def test_cli_remember_is_committed_and_indexed(conn, vault, monkeypatch) -> None:  # noqa: ANN001
    import os

    from click.testing import CliRunner
    from support.indexing import index

    from vaultmem import vaults
    from vaultmem.cli import cli

    vault.write("README.md", "vault\n")
    vault.commit()
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    index(vault.root, embed=False)
    monkeypatch.chdir(vault.root)
    result = CliRunner().invoke(
        cli, ["remember", "Flaky Test Fix", "--file", "-", "--json"], input="pin the seed\n"
    )
    assert result.exit_code == 0, result.output
    index(vault.root, embed=False)
    rows = conn.execute(
        "SELECT path FROM memory_notes WHERE path = 'agent/flaky-test-fix.md'"
    ).fetchall()
    assert rows


def test_cli_remember_is_logged_without_text(conn, vault, monkeypatch) -> None:  # noqa: ANN001
    import os

    from click.testing import CliRunner
    from support.indexing import index

    from vaultmem import vaults
    from vaultmem.agent import injections
    from vaultmem.cli import cli
    from vaultmem.config import user_home

    vault.write("README.md", "vault\n")
    vault.commit()
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    index(vault.root, embed=False)
    monkeypatch.chdir(vault.root)
    ok = CliRunner().invoke(cli, ["remember", "Logged", "--file", "-"], input="quokka facts\n")
    assert ok.exit_code == 0, ok.output
    leaked = CliRunner().invoke(
        cli, ["remember", "Leak", "--file", "-"], input="password: Qu0kka-Staging-77!\n"
    )
    assert leaked.exit_code != 0 and "Qu0kka" not in leaked.output
    entries = [e for e in injections.read(user_home()) if e.source == "cli-remember"]
    assert [list(e.paths) for e in entries] == [["agent/logged.md"]]
    log_text = (injections.log_path(user_home())).read_text()
    assert "quokka" not in log_text and "Qu0kka" not in log_text
    assert not (vault.root / "agent" / "leak.md").exists()
