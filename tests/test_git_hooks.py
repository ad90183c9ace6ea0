"""Git hooks: installed safely, fire a background catch-up, never block or fail a commit."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from click.testing import CliRunner
from indexing import snapshot

from vaultmem import db, git_hooks
from vaultmem.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_shipped_hook_scripts_are_the_installed_block() -> None:
    for name in git_hooks.HOOKS:
        path = ROOT / "git-hooks" / name
        assert path.read_text() == git_hooks.shipped_script(), name
        assert os.access(path, os.X_OK)


def test_install_appends_is_idempotent_and_uninstall_restores(vault) -> None:
    existing = vault.root / ".git" / "hooks" / "post-commit"
    existing.write_text("#!/bin/sh\necho mine\n")
    existing.chmod(0o755)
    vault.register()
    git_hooks.install(vault.root)
    first = {h: (vault.root / ".git/hooks" / h).read_text() for h in git_hooks.HOOKS}
    assert first["post-commit"].startswith("#!/bin/sh\necho mine\n")
    vault.register()
    git_hooks.install(vault.root)
    assert {h: (vault.root / ".git/hooks" / h).read_text() for h in git_hooks.HOOKS} == first
    assert all(s.installed and s.interpreter_ok for s in git_hooks.status(vault.root))
    git_hooks.uninstall(vault.root)
    assert existing.read_text() == "#!/bin/sh\necho mine\n"
    assert not (vault.root / ".git" / "hooks" / "post-merge").exists()


def test_install_honours_core_hooks_path(vault) -> None:
    vault.git("config", "core.hooksPath", "my-hooks")
    r = CliRunner().invoke(cli, ["hooks", "install", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    assert (vault.root / "my-hooks" / "post-commit").exists()
    assert CliRunner().invoke(cli, ["hooks", "status", "--vault", str(vault.root)]).exit_code == 0


def test_a_commit_is_indexed_in_the_background_by_the_hook(conn, vault) -> None:
    vault.register()
    git_hooks.install(vault.root)
    vault.write("a.md", "# A\n\nhooked note\n")
    started = time.monotonic()
    vault.commit()
    assert time.monotonic() - started < 5
    head = vault.head()

    def indexed() -> bool:
        v = db.find_vault(conn, vault.root)
        if v is None:
            return False
        row = conn.execute(
            "SELECT watermark FROM index_state WHERE vault_id = %s", (v.id,)
        ).fetchone()
        conn.commit()
        return bool(row) and row["watermark"] == head

    assert wait_for(indexed), (vault.root / ".git/vaultmem/ingest.log").read_text()
    assert [n[0] for n in snapshot(conn, vault.root)["notes"]] == ["a.md"]
    log = vault.root / ".git" / "vaultmem" / "ingest.log"
    # The line is written once the run (embedding included) is over: after the watermark moved.
    assert wait_for(lambda: " ok " in log.read_text()), log.read_text()
    assert not (vault.root / "ingest.log").exists()  # nothing in the work tree


def test_commit_succeeds_when_the_database_is_down(vault, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VAULTMEM_DATABASE_URL", f"postgresql://x@/x?host={tmp_path}&port=9")
    vault.register()
    git_hooks.install(vault.root)
    vault.write("a.md", "# A\n")
    vault.commit()  # raises if the commit failed
    log = vault.root / ".git" / "vaultmem" / "ingest.log"
    assert wait_for(lambda: log.exists() and "error" in log.read_text(), 30)
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and "cannot reach the database" in lines[0]


def test_a_broken_vaultmem_never_fails_the_commit(vault) -> None:
    git_hooks.install(vault.root, command="/nonexistent/python -m vaultmem")
    vault.write("a.md", "# A\n")
    out = subprocess.run(["git", "commit", "-qam", "x"], cwd=vault.root, capture_output=True)
    vault.git("add", "-A")
    out = subprocess.run(["git", "commit", "-qm", "x"], cwd=vault.root, capture_output=True)
    assert out.returncode == 0, out.stderr
