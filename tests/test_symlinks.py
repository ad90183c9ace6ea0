"""No file vaultmem reads or writes for the user goes through a symbolic link.

The attack: a committed `.claude/settings.json` that links to `~/.docker/config.json`. Installing
the hook would read the registry credential through the link and write it into a regular file
that `git diff` shows. The same goes for every scope's settings file, `~/.claude.json`, the
vault registry, the injection log and the vault's state folder: a link is refused with one
line that says what to do, and neither it nor what it points to changes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from vaultmem import vaults
from vaultmem.agent import injections
from vaultmem.cli import cli
from vaultmem.config import user_home
from vaultmem.errors import SymlinkRefused
from vaultmem.files import atomic_write, read_regular
from vaultmem.index import statedir, writer_lock

CREDENTIAL = '{"auths": {"registry.example": {"auth": "dXNlcjpodW50ZXIy"}}}\n'


@pytest.fixture
def secret(tmp_path, monkeypatch) -> Path:
    """The user's home (HOME) with a file holding a credential, which nothing vaultmem does
    may read or change."""
    (tmp_path / "home" / ".docker").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "home" / ".docker" / "config.json"
    path.write_text(CREDENTIAL)
    return path


@pytest.fixture
def home(secret) -> Path:
    return secret.parent.parent


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def _refused(result, link: Path) -> None:
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "symbolic link" in errors[0] and str(link) in errors[0], errors
    assert result.output.strip().endswith(errors[0]) and "Traceback" not in result.output


@pytest.mark.parametrize("scope", ["shared", "project"])
def test_a_linked_project_settings_file_is_neither_read_nor_written(
    scope, project, secret, home, monkeypatch
) -> None:
    monkeypatch.chdir(project)
    (project / ".claude").mkdir()
    name = "settings.json" if scope == "shared" else "settings.local.json"
    link = project / ".claude" / name
    link.symlink_to(secret)
    result = CliRunner().invoke(cli, ["hooks", "install", "--claude", f"--{scope}", "--no-mcp"])
    _refused(result, link)
    assert link.is_symlink() and secret.read_text() == CREDENTIAL
    assert "registry.example" not in subprocess.run(
        ["git", "diff", "--no-index", "/dev/null", str(link)], capture_output=True, text=True
    ).stdout.replace(CREDENTIAL, "")  # the link still shows only as a link
    status = CliRunner().invoke(cli, ["hooks", "status", "--claude"])
    assert "symbolic link" in status.output and "dXNlcjpodW50ZXIy" not in status.output


def test_a_linked_claude_folder_in_a_project_is_not_followed(project, secret, home, monkeypatch):
    monkeypatch.chdir(project)
    (project / ".claude").symlink_to(secret.parent)
    result = CliRunner().invoke(cli, ["hooks", "install", "--claude", "--shared", "--no-mcp"])
    _refused(result, project / ".claude")
    assert sorted(p.name for p in secret.parent.iterdir()) == ["config.json"]


def test_linked_user_settings_and_claude_json_are_refused(project, secret, home, monkeypatch):
    monkeypatch.chdir(project)
    (home / ".claude").mkdir()
    settings = home / ".claude" / "settings.json"
    settings.symlink_to(secret)
    _refused(CliRunner().invoke(cli, ["hooks", "install", "--claude", "--user"]), settings)
    settings.unlink()
    claude_json = home / ".claude.json"
    claude_json.symlink_to(secret)
    result = CliRunner().invoke(cli, ["hooks", "install", "--claude", "--user"])
    _refused(result, claude_json)
    assert secret.read_text() == CREDENTIAL and claude_json.is_symlink()
    result = CliRunner().invoke(cli, ["hooks", "uninstall", "--claude", "--user"])
    _refused(result, claude_json)


def test_a_linked_registry_is_refused_and_the_way_out_is_named(tmp_path, secret) -> None:
    real = tmp_path / "dotfiles" / "config.toml"
    real.parent.mkdir()
    real.write_text('default = "x"\n')
    link = vaults.config_path()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real)
    result = CliRunner().invoke(cli, ["vaults", "list"])
    _refused(result, link)
    assert "VAULTMEM_CONFIG" in result.output
    repo = tmp_path / "notes"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    _refused(CliRunner().invoke(cli, ["vaults", "add", str(repo)]), link)
    assert real.read_text() == 'default = "x"\n' and link.is_symlink()


def test_the_injection_log_is_never_written_or_read_through_a_link(secret) -> None:
    log = injections.log_path(user_home())
    log.parent.mkdir(parents=True)
    log.symlink_to(secret)
    entry = injections.make("claude-hook", "v", "a prompt", ["a.md"], 10)
    injections.append(user_home(), entry)  # never raises: the injection goes on, unrecorded
    assert secret.read_text() == CREDENTIAL
    with pytest.raises(SymlinkRefused):
        injections.read(user_home())
    _refused(CliRunner().invoke(cli, ["log"]), log)
    log.unlink()
    log.parent.rmdir()
    (user_home() / "log").symlink_to(secret.parent)  # a linked folder: the same
    injections.append(user_home(), entry)
    assert sorted(p.name for p in secret.parent.iterdir()) == ["config.json"]


def test_the_vault_state_folder_and_its_files_are_never_followed(vault, secret) -> None:
    state = vault.root / ".git" / "vaultmem"
    state.mkdir()
    for name in ("ingest.log", "pending", "ingest.lock", "progress.json"):
        (state / name).symlink_to(secret)
    files = statedir.state_files(vault.root)
    with pytest.raises(SymlinkRefused):
        statedir.log_line(files, "a line")
    with pytest.raises(SymlinkRefused):
        files.mark_pending()
    with pytest.raises(SymlinkRefused):
        with writer_lock.hold_lock(files.lock, wait=False):
            pass
    assert statedir.read_progress(vault.root) is None
    statedir.ProgressFile(files).update(done=1, total=2, rate=None, final=True)
    assert secret.read_text() == CREDENTIAL
    for name in ("ingest.log", "pending", "ingest.lock", "progress.json"):
        (state / name).unlink()
    state.rmdir()
    state.symlink_to(secret.parent)
    with pytest.raises(SymlinkRefused):
        statedir.state_files(vault.root)


def test_a_commit_writes_nothing_through_a_linked_state_file(vault, secret) -> None:
    from vaultmem.index import git_hooks

    vault.register()
    git_hooks.install(vault.root)
    state = vault.root / ".git" / "vaultmem"
    state.mkdir(exist_ok=True)
    (state / "pending").unlink(missing_ok=True)
    (state / "pending").symlink_to(secret)
    vault.write("a.md", "# A\n")
    vault.commit()  # the hook runs; the commit succeeds
    assert secret.read_text() == CREDENTIAL


def test_atomic_write_refuses_a_link_and_keeps_a_regular_files_mode(tmp_path, secret) -> None:
    link = tmp_path / "state.json"
    link.symlink_to(secret)
    with pytest.raises(SymlinkRefused):
        atomic_write(link, "{}")
    assert link.is_symlink() and secret.read_text() == CREDENTIAL
    with pytest.raises(SymlinkRefused):
        read_regular(link)
    plain = tmp_path / "plain.json"
    plain.write_text("{}")
    plain.chmod(0o640)
    atomic_write(plain, json.dumps({"a": 1}))
    assert json.loads(plain.read_text()) == {"a": 1}
    assert plain.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        read_regular(fifo)  # never blocks on a FIFO planted in a file's place
