"""Property: after any sequence of git operations, catch-up leaves the index equal to a fresh build.

A hypothesis state machine drives add / modify / delete / rename / move between folders /
commit / amend / reset --hard / merge on a real repository, catches up through the real ingester
and compares the whole index (paths, chunk texts, embeddings, quarantine, skips) with a fresh
full build of HEAD in a clone, and checks `verify --deep` reports no drift.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import psycopg
from conftest import Vault
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support.indexing import fresh_build_snapshot, index, snapshot

from vaultmem.config import load_settings
from vaultmem.index.verify import verify
from vaultmem.store import db

CATCH_UPS: list[int] = []
NAMES = ["a.md", "b.md", "notes/c.md", "notes/deep/d.md", "日记.md", "with space.md", "-dash.md"]
WORDS = st.sampled_from(["alpha", "beta", "gamma", "delta", "密码学", "notes", "git", "vault"])
BODIES = st.lists(WORDS, min_size=1, max_size=40).map(
    lambda ws: "# Title\n\n" + " ".join(ws) + "\n\n## Section\n\n" + " ".join(reversed(ws)) + "\n"
)


class GitIndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="vm-prop-"))
        (self.tmp / "vault").mkdir()
        self.vault = Vault(self.tmp / "vault")
        self.vault.write("seed.md", "# Seed\n\nfirst note\n")
        self.vault.commit("seed")
        self.dirty = False

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _files(self) -> list[str]:
        out = self.vault.git("ls-files", "-z")
        return sorted(p for p in out.split("\0") if p)

    @rule(name=st.sampled_from(NAMES), body=BODIES)
    def write(self, name: str, body: str) -> None:
        self.vault.write(name, body)
        self.dirty = True

    @precondition(lambda self: len(self._files()) > 1)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        self.vault.delete(data.draw(st.sampled_from(self._files())))
        self.dirty = True

    @rule(data=st.data(), new=st.sampled_from(NAMES + ["moved/x.md", "other/y.md"]))
    def rename(self, data: st.DataObject, new: str) -> None:
        old = data.draw(st.sampled_from(self._files()))
        if old == new or (self.vault.root / new).exists():
            return
        self.vault.rename(old, new)
        self.dirty = True

    @rule()
    def commit(self) -> None:
        self.vault.commit()
        self.dirty = False

    @rule(body=BODIES)
    def amend(self, body: str) -> None:
        self.vault.write("amended.md", body)
        self.vault.git("add", "-A")
        self.vault.git("commit", "-q", "--amend", "--no-verify", "-m", "amended")
        self.dirty = False

    @precondition(lambda self: len(self.vault.git("rev-list", "HEAD").split()) > 1)
    @rule()
    def reset_hard(self) -> None:
        self.vault.git("reset", "-q", "--hard", "HEAD~1")
        self.dirty = False

    @rule(body=BODIES)
    def merge(self, body: str) -> None:
        self.vault.commit()
        self.vault.git("checkout", "-q", "-b", "side")
        self.vault.write("side.md", body)
        self.vault.commit("side")
        self.vault.git("checkout", "-q", "main")
        self.vault.write("main-only.md", body[::-1])
        self.vault.commit("main")
        self.vault.git("merge", "-q", "--no-edit", "-X", "theirs", "side")
        self.vault.git("branch", "-q", "-D", "side")
        self.dirty = False

    @rule()
    def catch_up(self) -> None:
        event("catch-up")
        CATCH_UPS.append(1)
        index(self.vault.root)
        url = load_settings(self.vault.root).database_url
        assert url
        with db.connect_url(url) as conn:
            ours = snapshot(conn, self.vault.root)
            fresh = fresh_build_snapshot(conn, self.vault.root, self.tmp)
        assert ours == fresh
        report = verify(load_settings(self.vault.root), self.vault.root, deep=True)
        assert not report.drift, report.to_dict()

    @invariant()
    def never_crashes(self) -> None:
        pass


def test_catch_up_always_equals_a_fresh_build(db_url: str, conn: psycopg.Connection) -> None:
    run_state_machine_as_test(
        GitIndexMachine,
        settings=settings(
            max_examples=8,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    # The comparison must really have run, many times, not just the git operations.
    assert len(CATCH_UPS) >= 10, len(CATCH_UPS)
