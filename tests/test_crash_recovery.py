"""Crash: SIGKILL the real ingester (and rebuild) at random points of a large catch-up.

Kill delays are spread over the measured duration of an uninterrupted run, so they land while
files are being written (mid-batch, mid-transaction), between batches, and while vectors are
being stored. After every kill the index must be structurally sound; the next run must converge
to exactly what a fresh build of HEAD holds, with `verify --deep` finding no drift.

The long variant (20 kills, commits landing between crashes) runs with `pytest -m slow`.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.indexing import fresh_build_snapshot, index, snapshot
from support.reliability import index_state, invariants, note_text, vaultmem

from vaultmem import vaults
from vaultmem.config import load_settings
from vaultmem.index.verify import verify

# Small embedding batches: many one-transaction embedding steps for a kill to land in.
EMBED_ENV = {"VAULTMEM_EMBEDDING_BATCH_SIZE": "16"}


def _change_many(vault, rng: random.Random, start: int, new: int) -> None:
    """One commit per kind of change, over the notes that exist: add, edit, delete, rename."""
    existing = sorted(p.relative_to(vault.root).as_posix() for p in vault.root.rglob("*.md"))
    for i in range(start, start + new):
        vault.write(f"f{i % 7}/n{i:05}.md", note_text(rng, f"Note {i}"))
    vault.commit(f"add {new}")
    rng.shuffle(existing)
    k = max(1, len(existing) // 6)
    edit, delete, rename = existing[:k], existing[k : 2 * k], existing[2 * k : 3 * k]
    for path in edit:
        vault.write(path, note_text(rng, f"Edited {path}"))
    vault.commit("edit")
    for path in delete:
        vault.delete(path)
    vault.commit("delete")
    for j, path in enumerate(rename):
        vault.rename(path, f"moved/{start}/{j % 5}/{Path(path).name}")
    vault.commit("rename and move")


def _timed(*args: str) -> float:
    started = time.monotonic()
    out = vaultmem(*args, env=EMBED_ENV)
    assert out.returncode == 0, out.stderr
    return time.monotonic() - started


def _run_killed(args: tuple[str, ...], delay: float) -> int:
    """Start the real CLI, SIGKILL it after `delay` s; its return code (-9 if it was killed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **EMBED_ENV},
    )
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode in (0, -signal.SIGKILL), err
    return proc.returncode


def crash_scenario(
    conn, vault, tmp_path: Path, *, base: int, new: int, kills: int, seed: int, churn: bool
) -> dict[str, int]:
    rng = random.Random(seed)
    for i in range(base):
        vault.write(f"f{i % 7}/n{i:05}.md", note_text(rng, f"Note {i}"))
    vault.commit("base")
    index(vault.root)
    _change_many(vault, rng, base, new)

    # Measure an uninterrupted run once, on a clone: the kills are spread over that duration.
    clone = tmp_path / "calibration"
    subprocess.run(["git", "clone", "-q", str(vault.root), str(clone)], check=True)
    vaults.register(clone)
    vaults.register(vault.root)
    t_ingest = _timed("ingest", "--vault", str(clone))

    root = str(vault.root)
    interrupted = 0
    for k in range(kills):
        rebuild = k % 3 == 2  # every third crash interrupts a rebuild instead
        span = t_ingest * (0.6 if rebuild else 1.0)  # a rebuild re-embeds nothing: shorter
        # Stratified: kill k lands in its own slice of the run, at a random point within it.
        delay = 0.2 + span * (k + rng.random()) / kills
        args = ("rebuild" if rebuild else "ingest", "--vault", root)
        if _run_killed(args, delay) == -signal.SIGKILL:
            interrupted += 1
        problems = invariants(conn, vault.root)
        assert not problems, f"after kill {k} ({args[0]} at {delay:.2f} s): {problems}"
        if churn and k % 5 == 4:
            _change_many(vault, rng, base + new * (k + 2), new // 4)
    # Later runs have less left to do, so some kills land after the end: that is fine.
    assert interrupted >= max(1, kills // 4), f"only {interrupted} of {kills} kills interrupted"

    final = vaultmem("ingest", "--vault", root)
    assert final.returncode == 0, final.stderr
    state = index_state(conn, vault.root)
    assert state["watermark"] == vault.head()
    assert state["rebuild_target"] is None  # an interrupted rebuild was finished
    assert state["backlog"] == 0
    assert invariants(conn, vault.root) == []
    assert snapshot(conn, vault.root) == fresh_build_snapshot(conn, vault.root, tmp_path)
    report = verify(load_settings(vault.root), vault.root, deep=True)
    assert not report.drift, report.to_dict()
    notes = len(snapshot(conn, vault.root)["notes"])
    print(
        f"\ncrash: {kills} kills ({interrupted} mid-run) + 1 final run; "
        f"{notes} notes converged, 0 lost; an uninterrupted run takes {t_ingest:.1f} s"
    )
    return {"kills": kills, "interrupted": interrupted, "notes": notes}


def test_sigkill_during_a_large_catch_up_converges_to_a_fresh_build(conn, vault, tmp_path):
    crash_scenario(conn, vault, tmp_path, base=40, new=160, kills=3, seed=5, churn=False)


@pytest.mark.slow
def test_twenty_sigkills_with_commits_landing_between_crashes_converge(conn, vault, tmp_path):
    crash_scenario(conn, vault, tmp_path, base=200, new=400, kills=20, seed=11, churn=True)


def _lease_held_by(conn, vault_id: int, hostname: str, pid: int, space: str | None = None) -> None:
    """The vault's lease as a writer left it: held by `pid` on `hostname` for another hour, in
    process space `space` (this process's by default: `vault_lease.process_space`)."""
    from vaultmem.store import vault_lease

    space = vault_lease.process_space() if space is None else space
    conn.execute(
        "INSERT INTO writer_leases (vault_id, holder, hostname, pid, expires_at)"
        " VALUES (%s, %s, %s, %s, now() + interval '1 hour')"
        " ON CONFLICT (vault_id) DO UPDATE SET holder = EXCLUDED.holder,"
        " hostname = EXCLUDED.hostname, pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at",
        (vault_id, f"{hostname}:{pid}:{space}:test", hostname, pid),
    )
    conn.commit()


def test_a_killed_writers_lease_is_taken_over_at_once_and_a_running_ones_is_not(conn, vault):
    from vaultmem.store import db
    from vaultmem.store.vault_lease import VaultLease, WriterBusy

    v = db.register_vault(conn, vault.root)
    here = socket.gethostname()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # exited and reaped: its pid names no process
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        # A writer on this machine that was killed: the next one does not wait for its expiry.
        _lease_held_by(conn, v.id, here, gone.pid)
        lease = VaultLease(conn, v, 60)
        lease.acquire(wait=0)
        assert lease.held
        holder = conn.execute(
            "SELECT holder FROM writer_leases WHERE vault_id = %s", (v.id,)
        ).fetchone()["holder"]
        conn.commit()
        assert holder == lease.who.token
        lease.release()
        # A writer still running here keeps its lease; so does one of another machine, even
        # one with the same name (two laptops both called "MacBook-Pro"), or one from before a
        # reboot: its pid means nothing here.
        for space, pid in ((None, alive.pid), ("another-boot.1", gone.pid), ("", gone.pid)):
            _lease_held_by(conn, v.id, here, pid, space)
            with pytest.raises(WriterBusy):
                VaultLease(conn, v, 60).acquire(wait=0)
    finally:
        alive.kill()
        alive.wait()


def test_a_writer_waiting_for_another_machines_lease_says_so_once(conn, vault, caplog):
    from vaultmem.store import db
    from vaultmem.store.vault_lease import VaultLease

    v = db.register_vault(conn, vault.root)
    _lease_held_by(conn, v.id, "another-machine", 4242, "another-boot.1")
    conn.execute(
        "UPDATE writer_leases SET expires_at = now() + interval '1 second' WHERE vault_id = %s",
        (v.id,),
    )
    conn.commit()
    with caplog.at_level("WARNING", logger="vaultmem.store.vault_lease"):
        lease = VaultLease(conn, v, 60)
        lease.acquire(wait=60)  # polls until that lease runs out
    assert lease.held
    said = [r.getMessage() for r in caplog.records if r.name == "vaultmem.store.vault_lease"]
    assert len(said) == 1
    assert "another-machine, pid 4242" in said[0] and "runs out within" in said[0]
    lease.release()


def test_only_a_holder_token_of_this_process_space_is_judged_by_its_pid():
    from vaultmem.store import vault_lease

    here = vault_lease.process_space()
    assert here  # Linux: the boot id and the pid namespace
    assert vault_lease.in_this_space(vault_lease.holder().token)
    assert not vault_lease.in_this_space(
        "laptop:4242:0123456789ab"
    )  # a token of before this change
    assert not vault_lease.in_this_space(f"laptop:4242:{here}x:0123456789ab")
    assert not vault_lease.in_this_space("laptop:4242::0123456789ab")
