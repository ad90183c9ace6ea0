"""Git hooks: installed safely, fire a background catch-up, never block or fail a commit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.indexing import snapshot
from support.reliability import wait_for

from vaultmem.cli import cli
from vaultmem.index import git_hooks
from vaultmem.store import db

ROOT = Path(__file__).resolve().parent.parent


def test_shipped_hook_scripts_are_the_installed_block() -> None:
    for name in git_hooks.HOOKS:
        path = ROOT / "git-hooks" / name
        assert path.read_text() == git_hooks.shipped_script(name), name
        assert os.access(path, os.X_OK)


def test_install_chains_the_users_hook_is_idempotent_and_uninstall_restores(vault) -> None:
    existing = vault.root / ".git" / "hooks" / "post-commit"
    existing.write_text("#!/bin/sh\necho mine\n")
    existing.chmod(0o755)
    vault.register()
    git_hooks.install(vault.root)
    first = {h: (vault.root / ".git/hooks" / h).read_text() for h in git_hooks.HOOKS}
    chained = vault.root / ".git" / "hooks" / "post-commit.vaultmem-user"
    assert chained.read_text() == "#!/bin/sh\necho mine\n"  # untouched, moved aside
    assert git_hooks.DISPATCHER_MARK in first["post-commit"]
    git_hooks.install(vault.root)
    assert {h: (vault.root / ".git/hooks" / h).read_text() for h in git_hooks.HOOKS} == first
    states = git_hooks.status(vault.root)
    assert all(s.installed and s.interpreter_ok for s in states)
    assert [s.name for s in states if s.other_content] == ["post-commit"]
    git_hooks.uninstall(vault.root)
    assert existing.read_text() == "#!/bin/sh\necho mine\n" and not chained.exists()
    assert not (vault.root / ".git" / "hooks" / "post-merge").exists()


def test_a_hooks_path_inside_the_work_tree_needs_force(vault) -> None:
    vault.git("config", "core.hooksPath", "my-hooks")
    r = CliRunner().invoke(cli, ["hooks", "install", "--vault", str(vault.root)])
    assert r.exit_code == 2 and "--force" in r.output and "my-hooks" in r.output
    assert not (vault.root / "my-hooks").exists()
    r = CliRunner().invoke(cli, ["hooks", "install", "--force", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    assert (vault.root / "my-hooks" / "post-commit").exists()
    assert CliRunner().invoke(cli, ["hooks", "status", "--vault", str(vault.root)]).exit_code == 0


def test_install_honours_a_hooks_path_outside_the_work_tree(vault, tmp_path) -> None:
    shared = tmp_path / "shared-hooks"
    vault.git("config", "core.hooksPath", str(shared))
    r = CliRunner().invoke(cli, ["hooks", "install", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    assert (shared / "post-commit").exists()


def test_a_commit_is_indexed_in_the_background_by_the_hook(conn, vault) -> None:
    vault.register()
    git_hooks.install(vault.root)
    vault.write("a.md", "# A\n\nhooked note\n")
    vault.commit()  # returns at once: bench/hook_latency.py measures by how much
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


def _indexed_to(conn, root, head) -> bool:
    v = db.find_vault(conn, root)
    if v is None:
        return False
    row = conn.execute("SELECT watermark FROM index_state WHERE vault_id = %s", (v.id,)).fetchone()
    conn.commit()
    return bool(row) and row["watermark"] == head


PYTHON_HOOK = """#!{python}
import sys, pathlib
pathlib.Path(sys.argv[0]).with_name("ran-" + pathlib.Path(sys.argv[0]).name).write_text(
    " ".join(sys.argv[1:]) + "|" + sys.stdin.read())
"""


@pytest.mark.parametrize(
    ("name", "script"),
    [
        ("post-checkout", PYTHON_HOOK.format(python=sys.executable)),
        # Git LFS style: the block appended after it would never run
        ("post-commit", '#!/bin/sh\necho lfs >> "$(dirname $0)/ran"\nexit 0\n'),
        # husky / pre-commit style
        (
            "post-merge",
            '#!/usr/bin/env bash\nexec sh -c \'echo husky >> "$0/ran"\' "$(dirname $0)"\n',
        ),
    ],
)
def test_the_users_hook_and_vaultmem_both_run_whatever_the_hook_is(
    conn, vault, name, script
) -> None:
    hooks = vault.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / name).write_text(script)
    (hooks / name).chmod(0o755)
    vault.write("a.md", "# A\n")
    vault.commit()
    vault.register()
    git_hooks.install(vault.root)
    assert all(s.installed for s in git_hooks.status(vault.root))
    vault.write("b.md", "# B\n\nsecond\n")
    vault.commit()
    if name == "post-checkout":
        out = subprocess.run(["git", "checkout", "-q", "-b", "topic"], cwd=vault.root)
        assert out.returncode == 0
        assert (hooks / f"ran-{name}{git_hooks.USER_SUFFIX}").read_text().startswith(vault.head())
    elif name == "post-commit":
        assert wait_for(lambda: (hooks / "ran").exists())
    else:
        vault.git("checkout", "-q", "-b", "side")
        vault.write("c.md", "# C\n")
        vault.commit()
        vault.git("checkout", "-q", "main")
        vault.git("merge", "-q", "--no-ff", "-m", "merge", "side")
        assert wait_for(lambda: (hooks / "ran").exists() and "husky" in (hooks / "ran").read_text())
    assert wait_for(lambda: _indexed_to(conn, vault.root, vault.head())), (
        vault.root / ".git/vaultmem/ingest.log"
    ).read_text()


def test_status_reports_a_block_that_can_never_run(vault) -> None:
    hooks = vault.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    block = git_hooks.render_block(git_hooks.installed_command())
    (hooks / "post-commit").write_text('#!/bin/sh\ngit lfs post-commit "$@"\nexit 0\n' + block)
    (hooks / "post-merge").write_text("#!/usr/bin/env python3\nprint('x')\n" + block)
    for h in ("post-commit", "post-merge"):
        (hooks / h).chmod(0o755)
    states = {s.name: s for s in git_hooks.status(vault.root)}
    assert not states["post-commit"].installed
    assert "unreachable after `exit 0`" in (states["post-commit"].problem or "")
    assert "not a shell script" in (states["post-merge"].problem or "")
    r = CliRunner().invoke(cli, ["hooks", "status", "--vault", str(vault.root)])
    assert r.exit_code == 1 and "NOT RUN: unreachable after `exit 0`" in r.output
    vault.register()
    git_hooks.install(vault.root)  # converts them into chained hooks
    assert all(s.installed for s in git_hooks.status(vault.root))
    user = (hooks / "post-commit.vaultmem-user").read_text()
    assert git_hooks.BEGIN not in user and "git lfs post-commit" in user


def test_hooks_install_catches_up_what_was_committed_while_hooks_were_off(conn, vault) -> None:
    vault.write("a.md", "# A\n\nwritten while the hooks were off\n")
    vault.commit()
    r = CliRunner().invoke(cli, ["hooks", "install", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    assert "catching up in the background" in r.output
    assert wait_for(lambda: _indexed_to(conn, vault.root, vault.head())), (
        vault.root / ".git/vaultmem/ingest.log"
    ).read_text()


def test_a_reset_is_caught_up_by_the_reference_transaction_hook(conn, vault) -> None:
    vault.register()
    git_hooks.install(vault.root)
    vault.write("a.md", "# A\n")
    vault.commit()
    vault.write("gone.md", "# Gone\n\nthis note is reset away\n")
    vault.commit()
    assert wait_for(lambda: _indexed_to(conn, vault.root, vault.head()))
    vault.git("reset", "-q", "--hard", "HEAD~1")
    assert wait_for(lambda: _indexed_to(conn, vault.root, vault.head()), 30), (
        vault.root / ".git/vaultmem/ingest.log"
    ).read_text()
    assert [n[0] for n in snapshot(conn, vault.root)["notes"]] == ["a.md"]


def test_the_dispatcher_keeps_the_users_exit_status_arguments_and_input(vault) -> None:
    hooks = vault.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "post-rewrite").write_text(
        '#!/bin/sh\nprintf "%s|" "$*" > "$(dirname $0)/seen"; cat >> "$(dirname $0)/seen"\nexit 5\n'
    )
    (hooks / "post-rewrite").chmod(0o755)
    vault.register()
    git_hooks.install(vault.root)
    proc = subprocess.run(
        [str(hooks / "post-rewrite"), "amend"],
        cwd=vault.root,
        input=b"aaa bbb\nccc ddd\n",
        capture_output=True,
    )
    assert proc.returncode == 5
    assert (hooks / "seen").read_text() == "amend|aaa bbb\nccc ddd\n"


def test_a_hooks_background_ingest_leaves_no_bundled_server_behind(vault) -> None:
    """A test's git hooks start a detached ingest that outlives the test; in a home where
    nobody started the bundled server, it must not start one (conftest marks each test's home
    as stopped by the user; its teardown stops whatever a test did start)."""
    from vaultmem.config import default_home
    from vaultmem.store import server

    vault.write("a.md", "# A\n")
    vault.commit()
    vault.register()  # no database named: the bundled one in this test's home
    r = CliRunner().invoke(cli, ["hooks", "install", "--vault", str(vault.root)])
    assert r.exit_code == 0 and "catching up in the background" in r.output, r.output
    log = vault.root / ".git" / "vaultmem" / "ingest.log"
    assert wait_for(lambda: log.exists() and log.read_text().strip() != "", 120)
    home = default_home(dict(os.environ))
    assert not server.status(home).running, log.read_text()
    assert "vaultmem db start" in log.read_text()  # it says how to start it instead
