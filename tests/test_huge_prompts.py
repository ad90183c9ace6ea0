"""A huge prompt (a pasted log, a file) costs the hook no more than an ordinary one, and never
ties up the warm service: the hook's time limit holds for any input size.

No test here measures time: each waits on an event that only the behaviour can cause (a
huge prompt gives nothing even with a time limit of minutes; an ordinary prompt is answered by
the warm service while another request is still stuck inside it).
"""

from __future__ import annotations

import os
import threading
import uuid

import psycopg
import pytest
from support.claude_code import payload, run_hook
from support.reliability import wait_for
from support.sample_notes import NOTES, add_note

from vaultmem import vaults
from vaultmem.agent import injections, warm
from vaultmem.agent.claude_hook import MAX_PAYLOAD_BYTES
from vaultmem.agent.warm_client import request
from vaultmem.config import user_home
from vaultmem.embed import HashEmbedder
from vaultmem.search import Prompt
from vaultmem.search.prompt import MAX_PROMPT_CHARS, is_content_free
from vaultmem.store import db
from vaultmem.text import text_size

PROMPT = "how do I restore a postgres backup"
GUARD = 90  # seconds: only a broken build waits this long


def _huge(size: int) -> str:
    """A prompt of `size` characters made of words the vault holds: searched, it would match."""
    words = (PROMPT + " pg_restore nightly dump cron bucket ").split()
    out = (" ".join(words) + " ") * (size // len(" ".join(words)) + 1)
    return out[:size]


def test_a_prompt_is_analysed_and_searched_on_a_bounded_prefix() -> None:
    text = _huge(3_000_000)
    asked = Prompt.of(text)
    assert len(asked.text) == MAX_PROMPT_CHARS and text.startswith(asked.text)
    assert not asked.content_free
    # one embedding window in any script: a CJK character counts three
    zh = Prompt.of("如何恢复昨晚的数据库备份" * 500)
    assert len(zh.text) == MAX_PROMPT_CHARS // 3 and text_size(zh.text) == MAX_PROMPT_CHARS
    mixed = Prompt.of("restore 备份 " * 1000).text
    assert text_size(mixed) <= MAX_PROMPT_CHARS < text_size(mixed + "restore 备份 ")
    # The content-free check reads the prefix only: filler first, the question after the
    # bound, so this counts as content-free (a question is asked in far fewer characters).
    assert is_content_free("ok " * (MAX_PROMPT_CHARS // 3 + 1) + "restore the postgres backup")


def test_a_5_mb_prompt_prints_nothing_even_with_minutes_to_spare(indexed_vault) -> None:  # noqa: F811
    big = payload(_huge(5_000_000), indexed_vault.root)
    assert len(big) > MAX_PAYLOAD_BYTES
    # With a 10-minute limit the timeout cannot be what keeps it quiet: the size does.
    proc, _ = run_hook(big, None, "--timeout", "600")
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert injections.read(user_home()) == []


def test_a_large_prompt_under_the_cap_is_answered_on_its_prefix(indexed_vault) -> None:  # noqa: F811
    prompt = PROMPT + "\n\n" + "x" * (MAX_PROMPT_CHARS + 10) + " " + _huge(800_000)
    proc, _ = run_hook(payload(prompt, indexed_vault.root), None, "--timeout", "600")
    assert b'path="ops/postgres-backup.md"' in proc.stdout
    (entry,) = injections.read(user_home())
    assert entry.prompt_sha256 == injections.prompt_hash(prompt)  # the whole prompt's hash


@pytest.fixture
def other_db(pg_server_url):
    """A second database on the session's server (dropped afterwards)."""
    name = f"vmtest_other_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(pg_server_url)
    info["dbname"] = name
    yield psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def warm_on(monkeypatch):
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "120")
    yield
    warm.stop()
    wait_for(lambda: not warm.status(timeout=0.5)["running"], 30)


def test_the_warm_service_answers_a_prompt_while_another_is_stuck(
    indexed_vault, warm_on, db_url, other_db, tmp_path
) -> None:  # noqa: F811
    # A second vault in a database of its own: its requests share nothing with the first's.
    other_url = other_db
    other_root = tmp_path / "other"
    other_root.mkdir()
    os.system(f"git -C {other_root} init -q && git -C {other_root} commit -q --allow-empty -m x")
    with db.connect_url(other_url) as conn:
        db.apply_schema(conn)
        v = db.register_vault(conn, other_root)
        for path, note in NOTES.items():
            add_note(conn, v.id, path, embedder=HashEmbedder(64), **note)
        head = os.popen(f"git -C {other_root} rev-parse HEAD").read().strip()
        conn.execute("UPDATE index_state SET watermark = %s WHERE vault_id = %s", (head, v.id))
        conn.commit()
    vaults.register(other_root, database_url=other_url)
    found = warm.start(wait=GUARD)
    assert found["running"], found
    ep = warm.endpoint()
    assert ep is not None

    # The first vault's index is locked: a request for it is stuck inside the service.
    holder = psycopg.connect(db_url)
    holder.execute("LOCK TABLE memory_primary IN ACCESS EXCLUSIVE MODE")
    stuck: list[object] = []
    first = threading.Thread(
        target=lambda: stuck.append(
            request(ep, b"hook memory=0", payload(PROMPT, indexed_vault.root), GUARD)
        ),
        daemon=True,
    )
    try:
        first.start()
        # The request is inside the service, its statement waiting for the lock (it gives up
        # after the warm connection's statement_timeout, 10 s: the margin for what follows).
        assert wait_for(lambda: _waiting_for_a_lock(db_url), GUARD)
        # Meanwhile a prompt for the other vault is answered, by the service.
        proc, _ = run_hook(payload(PROMPT, other_root), None, "--no-memory")
        assert b'path="ops/postgres-backup.md"' in proc.stdout
        assert first.is_alive()  # the stuck request is still stuck
        sources = [(e.source, e.vault) for e in injections.read(user_home())]
        assert sources == [("claude-hook/warm", "other")]
    finally:
        holder.rollback()
        holder.close()
        first.join(GUARD)
    assert stuck and not first.is_alive()


def _waiting_for_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND a.datname = current_database()"
        ).fetchone()
    return bool(row and row[0])


def test_the_hook_payload_cap_matches_what_the_service_takes() -> None:
    from vaultmem.agent.warm_client import MAX_MESSAGE_BYTES

    assert MAX_PAYLOAD_BYTES <= MAX_MESSAGE_BYTES
