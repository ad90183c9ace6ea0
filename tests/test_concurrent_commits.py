"""Concurrency: 50 commits in a tight loop with the real hooks firing, and a rebuild mid-way.

Every commit starts a detached `vaultmem ingest --from-hook`; most find the writer lock held and
hand over through the pending mark. A `vaultmem rebuild` starts after commit 25 and queues for the
lock. Once everything settles (watermark == HEAD, nothing pending, lock free) the index must
equal a fresh build, with no lock errors anywhere and no commit lost.
"""

from __future__ import annotations

import random
import statistics
import subprocess
import time

from support.indexing import fresh_build_snapshot, index, snapshot
from support.reliability import (
    hook_log,
    index_state,
    invariants,
    note_text,
    percentile,
    spawn,
    wait_settled,
)

from vaultmem.config import load_settings
from vaultmem.index import git_hooks
from vaultmem.index.verify import verify

COMMITS = 50
REBUILD_AT = 25


def test_fifty_rapid_commits_with_hooks_and_a_rebuild_lose_nothing(conn, vault, tmp_path):
    rng = random.Random(7)
    for i in range(40):
        vault.write(f"base/n{i:03}.md", note_text(rng, f"Base {i}"))
    vault.commit("base")
    index(vault.root)
    vault.register()
    git_hooks.install(vault.root)

    durations: list[float] = []
    rebuild = None
    alive = [f"base/n{i:03}.md" for i in range(40)]
    for c in range(COMMITS):
        kind = c % 4
        if kind == 0 or len(alive) < 5:
            path = f"new/c{c:03}.md"
            vault.write(path, note_text(rng, f"Commit {c}", sections=2))
            alive.append(path)
        elif kind == 1:
            vault.write(rng.choice(alive), note_text(rng, f"Edited in {c}", sections=2))
        elif kind == 2:
            vault.delete(alive.pop(rng.randrange(len(alive))))
        else:
            old = alive.pop(rng.randrange(len(alive)))
            alive.append(f"moved/c{c:03}.md")
            vault.rename(old, alive[-1])
        vault.git("add", "-A")
        started = time.monotonic()
        out = subprocess.run(["git", "commit", "-qm", f"c{c}"], cwd=vault.root, capture_output=True)
        durations.append(time.monotonic() - started)
        assert out.returncode == 0, out.stderr
        if c == REBUILD_AT:
            rebuild = spawn("rebuild", "--vault", str(vault.root))

    assert rebuild is not None
    out, err = rebuild.communicate(timeout=180)
    assert rebuild.returncode == 0, err
    assert "rebuild" in out and "Error" not in err
    assert wait_settled(conn, vault.root, timeout=180), hook_log(vault.root)[-5:]

    log = hook_log(vault.root)
    assert log, "no hook ever ran"
    bad = [line for line in log if " ok " not in line]
    assert not bad, bad  # no lock errors, no database errors: every hook that ran succeeded
    state = index_state(conn, vault.root)
    assert state["watermark"] == vault.head() and state["backlog"] == 0
    assert state["rebuild_target"] is None
    assert invariants(conn, vault.root) == []
    assert sorted(n[0] for n in snapshot(conn, vault.root)["notes"]) == sorted(alive)
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
    assert not verify(load_settings(vault.root), vault.root, deep=True).drift
    print(
        f"\nconcurrency: {COMMITS} commits + 1 rebuild, {len(log)} hook runs did the work; "
        f"commit p50 {statistics.median(durations) * 1000:.0f} ms, "
        f"p95 {percentile(durations, 0.95) * 1000:.0f} ms; 0 lost"
    )
