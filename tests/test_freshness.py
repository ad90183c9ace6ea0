"""The index is never silently behind: HEAD moves no hook sees, odd file names, missing blobs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Vault
from support.indexing import index, snapshot
from support.reliability import wait_for

from vaultmem import vaults
from vaultmem.cli import cli
from vaultmem.config import load_settings
from vaultmem.index import freshness, gitdiff
from vaultmem.index.verify import verify
from vaultmem.store import db


def watermark(conn, root: Path) -> str | None:
    v = db.find_vault(conn, root)
    assert v is not None
    row = conn.execute("SELECT watermark FROM index_state WHERE vault_id = %s", (v.id,)).fetchone()
    conn.commit()
    return row["watermark"] if row else None


def hook(prompt: str, cwd: Path) -> str:
    data = {"session_id": uuid.uuid4().hex, "cwd": str(cwd), "prompt": prompt}
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "claude-hook", "--no-memory"],
        input=json.dumps(data).encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0
    return proc.stdout.decode()


def test_a_reset_no_hook_saw_never_hands_out_a_note_head_no_longer_holds(conn, vault) -> None:
    vault.write("kept.md", "# Payments rollback\n\nroll back payments with `pay rollback`\n")
    vault.commit()
    vault.write("gone.md", "# Payments rollback v2\n\nroll back payments with `pay2 undo`\n")
    vault.commit()
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    index(vault.root)
    before = hook("how do I roll back payments", vault.root)
    assert "gone.md" in before and "kept.md" in before
    vault.git("reset", "-q", "--hard", "HEAD~1")  # no hooks installed: nothing else noticed
    after = hook("how do I roll back payments", vault.root)
    assert "gone.md" not in after and "kept.md" in after
    # ...and the reader started the catch-up a hook would have
    assert wait_for(lambda: watermark(conn, vault.root) == vault.head()), (
        vault.root / ".git/vaultmem/ingest.log"
    ).read_text()
    assert [n[0] for n in snapshot(conn, vault.root)["notes"]] == ["kept.md"]


def test_the_query_command_drops_stale_hits_too(conn, vault) -> None:
    vault.write("a.md", "# Alpha\n\nalpha rollback\n")
    vault.commit()
    vault.write("b.md", "# Beta\n\nbeta rollback\n")
    vault.commit()
    vault.register()
    index(vault.root)
    vault.git("reset", "-q", "--hard", "HEAD~1")
    r = CliRunner().invoke(cli, ["query", "rollback", "--json", "--vault", str(vault.root)])
    assert r.exit_code == 0, r.output
    assert [h["path"] for h in json.loads(r.output)] == ["a.md"]


def test_head_is_read_without_git_in_every_ref_layout(vault, tmp_path) -> None:
    vault.write("a.md", "# A\n")
    first = vault.commit()
    assert freshness.read_head(vault.root) == first
    vault.git("pack-refs", "--all")
    assert freshness.read_head(vault.root) == first
    vault.write("b.md", "# B\n")
    second = vault.commit()
    assert freshness.read_head(vault.root) == second  # loose ref over the packed one
    vault.git("checkout", "-q", "--detach", first)
    assert freshness.read_head(vault.root) == first
    vault.git("checkout", "-q", "main")
    tree = tmp_path / "linked"
    vault.git("worktree", "add", "-q", "-b", "wt", str(tree), first)
    assert freshness.read_head(tree) == first
    assert freshness.head_moved(vault.root, second) is None
    assert freshness.head_moved(vault.root, first) == second


def test_a_vault_without_commits_has_not_moved_and_git_is_not_asked(
    vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultmem.index import gitdiff

    def no_git(*args: object, **kw: object) -> None:
        raise AssertionError("git was run")

    monkeypatch.setattr(gitdiff, "head_commit", no_git)
    assert freshness.head_moved(vault.root, None) is None


def _odd_vault(vault: Vault) -> bytes:
    bad = b"caf\xe9.md"
    (vault.root / os.fsdecode(bad)).write_bytes(b"# Cafe\n\nnot utf-8 name\n")
    vault.write("line\nbreak.md", "# Newline\n\na name with a newline\n")
    vault.write("ctrl\x1b[31m.md", "# Escape\n\na name with an escape sequence\n")
    vault.write("ok.md", "# OK\n\na plain note\n")
    vault.commit()
    return bad


def test_a_name_that_is_not_utf8_is_skipped_and_the_rest_keeps_indexing(conn, vault) -> None:
    _odd_vault(vault)
    vault.register()
    result = index(vault.root)
    notes = [n[0] for n in snapshot(conn, vault.root)["notes"]]
    assert sorted(notes) == sorted(["line\nbreak.md", "ctrl\x1b[31m.md", "ok.md"])
    assert result.skip_reasons == {
        "caf\\xe9.md": "file name is not valid UTF-8 (caf\\xe9.md): rename it to index it"
    }
    report = verify(load_settings(vault.root), vault.root, deep=True)
    assert not report.drift
    assert [s["path"] for s in report.skipped] == ["caf\\xe9.md"]
    for args in (
        ["status"],
        ["status", "--json"],
        ["verify", "--vault", str(vault.root)],
        ["verify", "--json", "--vault", str(vault.root)],
        ["ingest", "--vault", str(vault.root)],
        ["rebuild", "--vault", str(vault.root)],
        ["rebuild", "--json", "--vault", str(vault.root)],
    ):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 0, (args, r.output)
        assert r.exception is None
        assert "Traceback" not in r.output


def test_a_rename_of_a_name_that_is_not_utf8_is_handled(conn, vault) -> None:
    bad = _odd_vault(vault)
    vault.register()
    index(vault.root)
    os.rename(vault.root / os.fsdecode(bad), vault.root / "cafe.md")
    vault.commit()
    index(vault.root)
    (vault.root / "cafe.md").rename(vault.root / os.fsdecode(b"caf\xe9-2.md"))
    vault.commit()
    index(vault.root)
    notes = {n[0] for n in snapshot(conn, vault.root)["notes"]}
    assert "cafe.md" not in notes and "ok.md" in notes


def _object_file(root: Path, sha: str) -> Path:
    return root / ".git" / "objects" / sha[:2] / sha[2:]


def test_a_missing_attachment_blob_does_not_stop_the_catch_up(conn, vault) -> None:
    vault.write("video.mp4", os.urandom(4096))
    vault.write("a.md", "# A\n\nfirst\n")
    vault.commit()
    vault.register()
    index(vault.root)
    old_video = vault.git("rev-parse", "HEAD:video.mp4").strip()
    # a rename with an edit: rename detection over all files would have to read the old blob
    (vault.root / "video.mp4").unlink()
    vault.write("clips/video-v2.mp4", os.urandom(4096))
    vault.write("b.md", "# B\n\nsecond\n")
    vault.commit()
    _object_file(vault.root, old_video).unlink()  # as in a partial clone or a damaged pack
    result = index(vault.root)
    assert result.mode == "incremental" and result.errors == []
    assert watermark(conn, vault.root) == vault.head()
    assert {n[0] for n in snapshot(conn, vault.root)["notes"]} == {"a.md", "b.md"}


def test_a_note_whose_blob_is_missing_is_skipped_and_retried(conn, vault, tmp_path) -> None:
    vault.write("a.md", "# A\n\nfirst\n")
    vault.commit()
    vault.register()
    index(vault.root)
    vault.write("b.md", "# B\n\nthe blob of this note goes missing\n")
    vault.commit()
    blob = vault.git("rev-parse", "HEAD:b.md").strip()
    kept = tmp_path / "kept-object"
    shutil.move(_object_file(vault.root, blob), kept)
    result = index(vault.root)
    assert result.skip_reasons == {"b.md": "content not readable from the repository"}
    assert watermark(conn, vault.root) == vault.head()
    skipped = snapshot(conn, vault.root)["skipped"]
    assert skipped == [("b.md", blob, "content not readable from the repository")]
    shutil.move(kept, _object_file(vault.root, blob))  # the object is back (fetched, repaired)
    result = index(vault.root)  # no new commit: the next run retries it anyway
    assert result.added == 1
    assert {n[0] for n in snapshot(conn, vault.root)["notes"]} == {"a.md", "b.md"}
    assert snapshot(conn, vault.root)["skipped"] == []


def test_diffs_limit_rename_detection_to_note_files(vault) -> None:
    vault.write("a.md", "# A\n\nsome text that stays the same\n")
    vault.write("pic.png", b"\x89PNG" + os.urandom(64))
    old = vault.commit()
    vault.rename("a.md", "notes/a.md")
    vault.rename("pic.png", "img/pic.png")
    new = vault.commit()
    changes = gitdiff.diff_commits(vault.root, old, new, note_extensions=(".md",))
    kinds = sorted((c.status, c.path, c.old_path) for c in changes)
    assert kinds == [
        ("A", "img/pic.png", None),
        ("D", "pic.png", None),
        ("R", "notes/a.md", "a.md"),
    ]


@pytest.mark.parametrize("ext", [".MD", ".Markdown"])
def test_note_extensions_match_in_any_case(vault, ext) -> None:
    old = vault.commit("empty")
    vault.write(f"x{ext}", "# X\n")
    new = vault.commit()
    changes = gitdiff.diff_commits(vault.root, old, new, note_extensions=(".md", ".markdown"))
    assert [c.path for c in changes] == [f"x{ext}"]


def _vaultmem_piped(args: str, cwd: Path) -> tuple[int, str]:
    """`vaultmem ARGS | head -1` in a shell: vaultmem's own exit status and its stderr."""
    script = (
        f'{sys.executable} -m vaultmem {args} 2>err | head -1 >/dev/null; echo "${{PIPESTATUS[0]}}"'
    )
    out = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True)
    return int(out.stdout.strip()), (cwd / "err").read_text()


def test_a_closed_pipe_ends_quietly_with_the_commands_own_status(conn, vault, tmp_path) -> None:
    for i in range(40):
        vault.write(f"n{i}.md", f"# N{i}\n")
    vault.write("bin.md", b"\0")
    vault.commit()
    vault.register()
    index(vault.root)
    code, err = _vaultmem_piped("status", tmp_path)
    assert code == 0 and err == ""
    vault.write("late.md", "# Late\n")
    vault.commit()  # drift: not indexed yet
    code, err = _vaultmem_piped(f"verify --vault {vault.root}", tmp_path)
    assert code == 8 and "Broken pipe" not in err and "Error" not in err


def test_status_shows_a_running_drainers_rate_progress_and_time_left(conn, vault) -> None:
    from vaultmem.index import statedir

    vault.write("a.md", "# A\n\nalpha\n")
    vault.commit()
    vault.register()
    index(vault.root, embed=False)
    tracker = statedir.ProgressFile(statedir.state_files(vault.root))
    tracker.update(done=100, total=400, rate=2.5, final=False)
    r = CliRunner().invoke(cli, ["status"])
    assert r.exit_code == 0, r.output
    assert f"embedding now (pid {os.getpid()}): 100 of 400 done, 2.5 chunks/s" in r.output
    data = json.loads(CliRunner().invoke(cli, ["status", "--json"]).output)
    assert data["vaults"][0]["embedding_progress"]["done"] == 100
    tracker.finish()
    r = CliRunner().invoke(cli, ["status"])
    assert "no drainer is running: `vaultmem ingest`" in r.output


def test_status_says_an_ingest_is_running_before_it_reports_progress(conn, vault) -> None:
    """A hook's `ingest --from-hook` holds the writer lock through its text pass before any
    embedding progress exists: status must not say that nothing is running."""
    from vaultmem.index import statedir, writer_lock

    vault.write("a.md", "# A\n\nalpha\n")
    vault.commit()
    vault.register()
    index(vault.root, embed=False)
    with writer_lock.writer(statedir.state_files(vault.root), wait=False) as w:
        assert w is not None  # held, as a running ingest holds it
        r = CliRunner().invoke(cli, ["status"])
        data = json.loads(CliRunner().invoke(cli, ["status", "--json"]).output)
    assert r.exit_code == 0, r.output
    assert "no drainer is running" not in r.output and "an ingest is running" in r.output
    assert data["vaults"][0]["ingest_running"] is True


def test_init_indexes_text_then_leaves_vectors_to_a_background_drainer(
    conn, vault, monkeypatch
) -> None:
    from support.embedding_servers import FailingEmbeddingServer, Reply

    for i in range(30):
        vault.write(f"n{i}.md", f"# Note {i}\n\nbody text number {i}\n")
    vault.commit()
    with FailingEmbeddingServer(then=Reply(delay=0.2), dimension=16) as srv:
        monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "openai")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BASE_URL", srv.base_url)
        monkeypatch.setenv("VAULTMEM_EMBEDDING_MODEL", "slow-test-model")
        monkeypatch.setenv("VAULTMEM_EMBEDDING_BATCH_SIZE", "2")
        r = CliRunner().invoke(cli, ["init", "--vault", str(vault.root), "--no-hooks"])
        assert r.exit_code == 0, r.output
        # The text pass and the vectors line tell one story: 30 chunks wait, 30 go to the
        # drainer, whose own measured rate (its priority and model load included) is the ETA.
        assert "0 chunks embedded, 0 reused, 30 awaiting embeddings" in r.output
        assert "measuring the embedding rate of 30 chunks in the background" in r.output
        eta = [ln for ln in r.output.splitlines() if ln.startswith("vectors: ")][-1]
        counted = re.fullmatch(
            r"vectors: (\d+) of the 30 chunks embedded in the background so far, the other "
            r"(\d+) in about .*",
            eta,
        )
        assert counted is not None, eta
        assert int(counted[1]) + int(counted[2]) == 30, eta
        assert "chunks/s (measured there)" in eta, eta
        assert srv.requests  # the drainer's calls; init itself embeds nothing
        _wait_embedded(conn, vault)


def _wait_embedded(conn, vault) -> None:
    v = db.find_vault(conn, vault.root)
    assert v is not None

    def backlog() -> int:
        row = conn.execute(
            "SELECT count(*) AS n FROM memory_primary WHERE vault_id = %s AND embedding IS NULL",
            (v.id,),
        ).fetchone()
        conn.commit()
        return int(row["n"])

    assert wait_for(lambda: backlog() == 0), (vault.root / ".git/vaultmem/ingest.log").read_text()


def _holders(pipe_fd: int) -> list[int]:
    """Pids of other processes holding the pipe behind `pipe_fd` open (from /proc)."""
    target = os.readlink(f"/proc/self/fd/{pipe_fd}")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    found.append(int(pid))
                    break
            except OSError:
                continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")
@pytest.mark.parametrize("server", ["external", "bundled"])
def test_init_leaves_nothing_behind_that_writes_to_its_terminal(
    conn, vault, server, monkeypatch
) -> None:
    """Whatever init leaves running (the background drainer, the bundled server it started)
    writes to a log, never to init's own output: nothing may appear on the terminal after the
    prompt came back."""
    if server == "bundled":
        monkeypatch.delenv("VAULTMEM_DATABASE_URL")
    for i in range(30):
        vault.write(f"n{i}.md", f"# Note {i}\n\nbody text number {i}\n")
    vault.commit()
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", "init", "--vault", str(vault.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    # init's own end, not the pipes' (a child holding them would keep them open)
    assert proc.wait() == 0
    assert _holders(proc.stdout.fileno()) == [] and _holders(proc.stderr.fileno()) == []
    proc.stdout.close()
    proc.stderr.close()
    if server == "external":
        _wait_embedded(conn, vault)
