"""The warm path: the hook asks a long-lived local service first, and falls back to the cold
path whenever it does not answer. Real service processes, a real database, real vaults."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest
from support.claude_code import payload, registered_argv, run_hook

from vaultmem import vaults
from vaultmem.agent import injections, warm
from vaultmem.config import user_home

PROMPT = "how do I restore a postgres backup"


@pytest.fixture
def warm_on(monkeypatch):
    """The warm path enabled for this test's environment; its service stopped afterwards."""
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "120")
    yield
    found = warm.status(timeout=1.0)
    warm.stop()
    if found.get("running"):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and warm.status(timeout=0.5)["running"]:
            time.sleep(0.1)


def started() -> dict:
    found = warm.start(wait=90)
    assert found["running"], found
    return found


def test_the_warm_answer_is_the_cold_answer_and_is_logged_as_warm(indexed_vault, warm_on):  # noqa: F811
    cold_env = dict(os.environ, VAULTMEM_WARM_IDLE="0")
    cold, _ = run_hook(payload(PROMPT, indexed_vault.root), cold_env, "--no-memory")
    assert b"<retrieved_context>" in cold.stdout
    found = started()
    warm_out, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--no-memory")
    assert warm_out.returncode == 0 and warm_out.stdout == cold.stdout
    assert warm.status()["served"] >= 1 and warm.status()["pid"] == found["pid"]
    sources = [e.source for e in injections.read(user_home())]
    assert sources == ["claude-hook", "claude-hook/warm"]
    # the same prompt again in one session: the claim holds across both paths
    again = payload(PROMPT, indexed_vault.root, session="one")
    assert run_hook(again, None, "--no-memory")[0].stdout == cold.stdout
    assert run_hook(again, None, "--no-memory")[0].stdout == b""


def test_the_service_lives_in_a_private_socket_and_the_hook_imports_nothing_heavy(
    indexed_vault,  # noqa: F811
    warm_on,
):
    found = started()
    sock = os.stat(found["socket"])
    assert stat.S_ISSOCK(sock.st_mode) and stat.S_IMODE(sock.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(found["socket"])).st_mode) == 0o700
    assert str(user_home()) in found["socket"]
    proc = subprocess.run(
        registered_argv("--no-memory", importtime=True),
        input=payload(PROMPT, indexed_vault.root),
        capture_output=True,
        timeout=60,
    )
    assert b'path="ops/postgres-backup.md"' in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()}
    assert "vaultmem.agent.warm_client" in imported
    heavy = {
        "psycopg",
        "numpy",
        "vaultmem.search",
        "vaultmem.agent.context",
        "vaultmem.store.db",
        "click",
    }
    heavy |= {"vaultmem.agent.warm", "vaultmem.config", "json", "dataclasses", "hashlib"}
    heavy |= {"typing", "re", "vaultmem.terminal"}  # the service sends its text cleaned
    heavy |= {"site"}  # started with -S: the warm path needs nothing from site-packages
    assert not heavy & imported, heavy & imported


def test_the_service_serves_registered_vaults_only_and_fails_open(indexed_vault, warm_on, db_url):  # noqa: F811
    started()
    vaults.unregister("vault")
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root))
    assert proc.returncode == 0 and proc.stdout == b""
    # registered again, but with an index that cannot be reached: nothing, at once
    vaults.register(indexed_vault.root, database_url="postgresql://nobody@127.0.0.1:1/none")
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--timeout", "600")
    assert proc.returncode == 0 and proc.stdout == b""  # the refusal ended it, not the limit
    vaults.register(indexed_vault.root, database_url=db_url)
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root))
    assert b'path="ops/postgres-backup.md"' in proc.stdout
    assert warm.status()["served"] == 3


def test_a_silent_or_stale_socket_falls_back_to_the_cold_path(indexed_vault, warm_on):  # noqa: F811
    ep = warm.endpoint()
    assert ep is not None
    os.makedirs(ep.directory, mode=0o700, exist_ok=True)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ep.bind(silent)
        silent.listen(8)  # accepts, never answers
        # Half the limit waiting for the silent service, then the cold path in the other half
        # (20 s: room for a loaded machine's cold start).
        proc, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--timeout", "20")
        assert b'path="ops/postgres-backup.md"' in proc.stdout  # the cold path, in time
    finally:
        silent.close()
    # now a socket file nobody listens on: refused, so the hook starts a service, answers cold
    # (with the same room: the default limit is for a machine at rest, and this checks the path
    # taken, not its speed)
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--timeout", "20")
    assert b'path="ops/postgres-backup.md"' in proc.stdout
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not warm.status(timeout=0.5)["running"]:
        time.sleep(0.2)
    assert warm.status()["running"]


def test_after_warm_stop_the_next_hook_starts_a_new_service(indexed_vault, warm_on):  # noqa: F811
    """`warm stop` returns once the service has gone, and a stop is no failed start: the next
    hook starts a service at once, not after the spawn back-off."""
    first = started()
    assert warm.stop()
    assert not warm.status(timeout=0.5)["running"]
    proc, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--no-memory")
    assert b'path="ops/postgres-backup.md"' in proc.stdout  # this prompt: the cold path
    deadline = time.monotonic() + 25  # under the 30 s back-off
    while time.monotonic() < deadline and not warm.status(timeout=0.5)["running"]:
        time.sleep(0.2)
    found = warm.status()
    assert found["running"] and found["pid"] != first["pid"], found
    warm_out, _ = run_hook(payload(PROMPT, indexed_vault.root), None, "--no-memory")
    assert warm_out.stdout == proc.stdout
    assert warm.status()["served"] == 1


def test_another_environment_gets_another_service(monkeypatch, warm_on):
    here = warm.endpoint()
    monkeypatch.setenv("VAULTMEM_DATABASE_URL", "postgresql://elsewhere/db")
    there = warm.endpoint()
    assert here is not None and there is not None
    assert here.socket_path != there.socket_path and here.directory == there.directory
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "0")
    assert warm.endpoint() is None


def test_an_idle_service_stops_by_itself(indexed_vault, monkeypatch):  # noqa: F811
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", "warm", "serve"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "idle for 2 s" in err
    ep = warm.endpoint()
    assert ep is not None and not os.path.exists(ep.socket_path)


def test_a_second_service_for_the_same_environment_does_not_start(indexed_vault, warm_on):  # noqa: F811
    first = started()
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "warm", "serve"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert "another warm service is running" in proc.stderr
    assert warm.status()["pid"] == first["pid"]


def test_warm_commands(indexed_vault, warm_on):  # noqa: F811
    def vaultmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vaultmem", *args], capture_output=True, text=True, timeout=120
        )

    assert "not running" in vaultmem("warm", "status").stdout
    assert "warm service running, pid" in vaultmem("warm", "start").stdout
    state = json.loads(vaultmem("warm", "status", "--json").stdout)
    assert state["running"] and state["served"] == 0
    assert "stopped" in vaultmem("warm", "stop").stdout
    off = dict(os.environ, VAULTMEM_WARM_IDLE="0")
    proc = subprocess.run(
        [sys.executable, "-m", "vaultmem", "warm", "status"],
        env=off,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "off" in proc.stdout


def test_a_payload_that_is_not_utf8_or_json_prints_nothing(indexed_vault, warm_on):  # noqa: F811
    started()
    for stdin in (b"\xff\xfe\x00", b"not json", b"[1]"):
        proc, _ = run_hook(stdin)
        assert proc.returncode == 0 and proc.stdout == b""
    assert warm.status()["served"] == 3


def test_the_client_finds_what_config_and_vaults_find(tmp_path, monkeypatch):
    from vaultmem.agent import warm_client
    from vaultmem.config import SETTINGS

    assert warm_client.DEFAULT_IDLE == int(SETTINGS["VAULTMEM_WARM_IDLE"][0])
    assert warm_client.config_file(os.environ) == str(vaults.config_path())
    assert warm_client.user_home(os.environ) == str(user_home())
    # a home and an idle limit set in the registry's [settings] count as well
    registry = vaults.config_path()
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(
        f'[settings]\nVAULTMEM_HOME = "{tmp_path / "elsewhere"}"\nVAULTMEM_WARM_IDLE = "0"\n',
        encoding="utf-8",
    )
    assert warm_client.user_home(os.environ) == str(user_home()) == str(tmp_path / "elsewhere")
    assert warm_client.endpoint() is None
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "60")  # the environment wins, as for settings
    ep = warm_client.endpoint()
    assert ep is not None and ep.directory == str(tmp_path / "elsewhere" / "run")


def test_other_environments_leftovers_are_pruned_after_a_week(tmp_path):
    from vaultmem.agent.warm import STALE_SECONDS, prune_stale
    from vaultmem.agent.warm_client import Endpoint

    run = tmp_path / "run"
    run.mkdir()
    for name in (
        "warm-old.lock",
        "warm-old.log",
        "warm-live.lock",
        "warm-live.sock",
        "warm-me.log",
    ):
        (run / name).write_text("", encoding="utf-8")
        os.utime(run / name, (0, 0))
    (run / "warm-new.lock").write_text("", encoding="utf-8")
    prune_stale(Endpoint(str(run), "warm-me", 60), now=STALE_SECONDS + 10)
    assert sorted(os.listdir(run)) == [
        "warm-live.lock",
        "warm-live.sock",
        "warm-me.log",
        "warm-new.lock",
    ]
