"""Foundation: schema, init, status, multi-vault isolation, upgrades, configuration, CLI errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
import yaml
from click.testing import CliRunner

from vaultmem.cli import cli
from vaultmem.config import SETTINGS, load_settings, redact_url
from vaultmem.errors import ConfigError, SchemaError
from vaultmem.store import db, migrations

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def catalog(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """Every table, column, index and row count: what 'changes nothing' is measured against."""
    rows = conn.execute(
        """
        SELECT 'col' AS k, table_name || '.' || column_name || ':' || data_type AS v
          FROM information_schema.columns WHERE table_schema = 'public'
        UNION ALL
        SELECT 'idx', indexname || ':' || indexdef FROM pg_indexes WHERE schemaname = 'public'
        ORDER BY 1, 2
        """
    ).fetchall()
    counts = [
        ("rows", f"{t}:{conn.execute(f'SELECT count(*) AS n FROM {t}').fetchone()['n']}")
        for t in ("vaults", "index_state", "vaultmem_schema", "memory_primary")
    ]
    conn.commit()
    return [(r["k"], r["v"]) for r in rows] + counts


def test_schema_sql_is_idempotent(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        c.execute(migrations.schema_sql())
        c.commit()
        c.execute(migrations.schema_sql())
        c.commit()


def test_init_twice_changes_nothing_and_status_reports_versions(db_url: str, vault) -> None:
    vault.write("a.md", "# A\n")
    vault.commit()
    code, out, err = run("init", "--vault", str(vault.root))
    assert code == 0, err
    assert "schema applied" in out
    with db.connect_url(db_url) as c:
        before = catalog(c)
    code, out, _ = run("init", "--vault", str(vault.root))
    assert code == 0
    assert "schema up to date" in out
    with db.connect_url(db_url) as c:
        assert catalog(c) == before

    code, out, _ = run("status", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["postgres_version"].startswith(("1", "2"))
    assert re.match(r"\d+\.\d+", data["pgvector_version"])
    assert data["schema_version"] == db.SCHEMA_VERSION
    assert [v["root"] for v in data["vaults"]] == [str(vault.root.resolve())]
    code, out, _ = run("status")
    assert "pgvector" in out and "vault vault" in out


def test_vaults_sharing_a_database_do_not_see_each_others_rows(conn, tmp_path: Path) -> None:
    a = db.register_vault(conn, tmp_path / "a")
    b = db.register_vault(conn, tmp_path / "b")
    assert a.id != b.id
    with conn.transaction():
        conn.execute(
            "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha) VALUES (%s, 'x.md', 'b', 'c')",
            (a.id,),
        )
        conn.execute(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, content, content_hash, lexemes)"
            " VALUES (%s, 'x.md', 0, 'hello', 'h', to_tsvector('simple', 'hello'))",
            (a.id,),
        )
    stats = {s["id"]: s for s in db.vault_stats(conn)}
    assert stats[a.id]["chunks"] == 1 and stats[b.id]["chunks"] == 0
    # Registering again returns the same vault.
    assert db.register_vault(conn, tmp_path / "a").id == a.id


def test_a_chunks_vectors_and_text_stay_in_its_row(conn, tmp_path: Path) -> None:
    # A search scores and returns ~100 candidates a prompt: each vector kept out of line (in
    # the TOAST table) cost a lookup of its own there.
    import numpy as np

    vault = db.register_vault(conn, tmp_path)
    rng = np.random.default_rng(1)
    conn.execute(
        "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha) VALUES (%s, 'a.md', 'b',"
        " 'c')",
        (vault.id,),
    )
    text = "一个很长的段落。" * 150  # 1,200 characters, 3,600 bytes
    conn.execute(
        "INSERT INTO memory_primary (vault_id, path, chunk_index, content, content_hash, lexemes,"
        " embedding, model_id, agnostic, agnostic_model_id) VALUES (%s, 'a.md', 0, %s, 'h',"
        " to_tsvector('simple', %s), %s, 'e5', %s, 'use')",
        (
            vault.id,
            text,
            text,
            rng.random(384).astype(np.float32),
            rng.random(512).astype(np.float32),
        ),
    )
    row = conn.execute(
        "SELECT pg_column_toast_chunk_id(embedding) AS e, pg_column_toast_chunk_id(agnostic) AS a,"
        " pg_column_toast_chunk_id(content) AS c FROM memory_primary WHERE vault_id = %s",
        (vault.id,),
    ).fetchone()
    conn.commit()
    assert row == {"e": None, "a": None, "c": None}


def test_reference_design_schema_is_upgraded_without_losing_rows(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute(
            "CREATE TABLE memory_primary (id TEXT PRIMARY KEY, source TEXT, content TEXT,"
            " content_hash TEXT, embedding VECTOR(1536), updated_at TIMESTAMPTZ)"
        )
        c.execute(
            "CREATE INDEX memory_primary_embedding_idx ON memory_primary"
            " USING ivfflat (embedding vector_cosine_ops) WITH (lists = 100)"
        )
        c.execute(
            "CREATE TABLE memory_secure_audit (id TEXT PRIMARY KEY, source TEXT, risk TEXT,"
            " updated_at TIMESTAMPTZ)"
        )
        c.execute("INSERT INTO memory_primary (id, source, content) VALUES ('a.md', 'a.md', 'old')")
        c.execute("INSERT INTO memory_secure_audit (id, source, risk) VALUES ('s.md', 's.md', 'x')")
        c.commit()
    with db.connect_url(db_url) as c:
        assert db.schema_version(c) == 0
        applied = db.apply_schema(c)
        assert applied == [v for v, _ in migrations.MIGRATIONS]
        assert db.schema_version(c) == db.SCHEMA_VERSION
        assert c.execute("SELECT content FROM legacy_memory_primary").fetchone()["content"] == "old"
        assert c.execute("SELECT risk FROM legacy_memory_secure_audit").fetchone()["risk"] == "x"
        cols = {
            r["column_name"]
            for r in c.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'memory_primary'"
            ).fetchall()
        }
        assert {"vault_id", "chunk_index", "embedding", "lexemes"} <= cols
        assert db.apply_schema(c) == []


def test_a_newer_schema_is_refused_with_a_clear_error(conn) -> None:
    conn.execute("INSERT INTO vaultmem_schema (version) VALUES (%s)", (db.SCHEMA_VERSION + 1,))
    conn.commit()
    with pytest.raises(SchemaError, match="upgrade vaultmem"):
        db.apply_schema(conn)
    with pytest.raises(SchemaError, match="upgrade vaultmem"):
        db.require_schema(conn)


def test_packaged_schema_is_the_top_level_file() -> None:
    packaged = ROOT / "src" / "vaultmem" / "store" / "schema.sql"
    assert packaged.read_bytes() == (ROOT / "schema.sql").read_bytes()
    assert migrations.schema_path().resolve() == (ROOT / "schema.sql").resolve()


def test_docker_compose_runs_pgvector_with_the_same_schema_file() -> None:
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    ((name, svc),) = spec["services"].items()
    assert svc["image"].startswith("pgvector/pgvector:")
    assert all(str(p).startswith("127.0.0.1:") for p in svc["ports"])
    assert "healthcheck" in svc and "pg_isready" in " ".join(svc["healthcheck"]["test"])
    mounts = [m.split(":") for m in svc["volumes"]]
    named = [m for m in mounts if m[0] in spec["volumes"]]
    assert named and named[0][1] == "/var/lib/postgresql/data"
    schema_mounts = [m for m in mounts if m[1].startswith("/docker-entrypoint-initdb.d/")]
    assert (ROOT / schema_mounts[0][0]).resolve() == (ROOT / "schema.sql").resolve()
    assert "${POSTGRES_PASSWORD" in svc["environment"]["POSTGRES_PASSWORD"]


def test_ci_runs_the_suite_in_a_venv_of_its_own() -> None:
    """`.ci/run` (the README's test command) never reinstalls the user's `.venv`: that would
    turn an installed vaultmem into an editable one whose hooks point into this clone's src/."""
    script = (ROOT / ".ci" / "run").read_text()
    assert "bash .ci/run" in (ROOT / "README.md").read_text()
    commands = [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert not [ln for ln in commands if re.search(r"(^|[\s/])\.venv\b", ln)], commands
    assert commands[-1].startswith("exec .ci/venv/bin/pytest -q")


def test_the_docs_give_the_vault_precedence_the_code_has(tmp_path: Path, monkeypatch) -> None:
    """One order everywhere: --vault, else VAULTMEM_VAULT, else the registered vault holding
    the current directory, else the default vault."""
    from vaultmem import vaults

    here, named, default = (tmp_path / n for n in ("here", "named", "default"))
    for root in (default, here, named):
        root.mkdir()
        vaults.register(root)
    vaults.set_default("default")
    config = vaults.load()
    resolve = vaults.resolve
    assert resolve(config, cwd=here, environ={}).name == "here"
    assert resolve(config, cwd=here, environ={"VAULTMEM_VAULT": "named"}).name == "named"
    assert resolve(config, "here", cwd=named, environ={"VAULTMEM_VAULT": "named"}).name == "here"
    assert resolve(config, cwd=tmp_path, environ={}).name == "default"
    texts = {
        str(path.relative_to(ROOT)): path.read_text()
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    }
    texts["bin/agent-with-memory"] = (ROOT / "bin" / "agent-with-memory").read_text()
    for name in ("context", "mcp", "query"):
        texts[f"vaultmem {name} --help"] = CliRunner().invoke(cli, [name, "--help"]).output
    for where, text in texts.items():
        for para in re.split(r"\n\s*\n", text):
            flat = " ".join(para.split())
            if "VAULTMEM_VAULT" in flat and re.search(r"vault holding|holding the", flat):
                first = re.search(r"vault holding|holding the", flat)
                assert flat.index("VAULTMEM_VAULT") < first.start(), (where, flat)  # type: ignore[union-attr]


def test_the_configuration_table_lists_every_setting() -> None:
    table = (ROOT / "docs" / "configuration.md").read_text()
    for name, (default, _) in SETTINGS.items():
        row = f"| `{name}` | `{default}` |" if default else f"| `{name}` | — |"
        assert row in table, f"docs/configuration.md's row for {name} should start {row!r}"


def test_settings_env_overrides_dotenv_and_secrets_are_redacted(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "VAULTMEM_MAX_FILE_BYTES=900\nVAULTMEM_MAX_CHUNK_CHARS=800\nOPENAI_API_KEY=sk-abc123\n"
        "VAULTMEM_CONTEXT_MAX_CHARS=9\n"
    )
    s = load_settings(tmp_path, environ={"VAULTMEM_MAX_FILE_BYTES": "1000"})
    assert s.max_file_bytes == 1000 and s.max_chunk_chars == 800
    # a vault's .env sets indexing options only: no key, no retrieval budget from a repository
    assert s.embedding_api_key == "" and s.context_max_chars == 2500
    assert s.ignored_vault_env == ("OPENAI_API_KEY", "VAULTMEM_CONTEXT_MAX_CHARS")
    s = load_settings(tmp_path, environ={"OPENAI_API_KEY": "sk-abc123"})
    assert s.embedding_api_key == "sk-abc123"
    assert "sk-abc123" not in json.dumps(s.redacted())
    assert redact_url("postgresql://u:hunter2@h:5/db") == "postgresql://u:***@h:5/db"
    with pytest.raises(ConfigError, match="VAULTMEM_CONTEXT_MAX_CHARS"):
        load_settings(tmp_path, environ={"VAULTMEM_CONTEXT_MAX_CHARS": "lots"})


def test_unreachable_database_is_one_line_with_the_next_step(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(
        "VAULTMEM_DATABASE_URL",
        f"postgresql://u:hunter2@/x?host={tmp_path}&port=1&connect_timeout=2",
    )
    code, out, err = run("status")
    assert code == 4
    assert err.count("\n") == 1 and err.startswith("Error: cannot reach the database")
    assert "hunter2" not in err and "Traceback" not in err
    assert "VAULTMEM_DATABASE_URL" in err


def test_init_outside_a_git_repository_says_so(tmp_path: Path, db_url: str) -> None:
    code, _, err = run("init", "--vault", str(tmp_path))
    assert code == 3
    assert err.startswith("Error:") and "git" in err and err.count("\n") == 1


def _commands(group, prefix=()):
    import click

    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))


def test_every_command_has_help() -> None:
    for path, cmd in _commands(cli):
        assert cmd.help, f"vaultmem {' '.join(path)} has no help"
        code, out, _ = run(*path, "--help")
        assert code == 0 and "Usage:" in out


def test_help_names_only_options_that_exist() -> None:
    """Every `--option` a command's help or its options' help mentions is an option of some
    vaultmem command (a renamed or removed option leaves no advice behind)."""
    import re

    import click

    known = {"--help", "--version"}
    for _, cmd in _commands(cli):
        for param in cmd.params:
            if isinstance(param, click.Option):
                known.update(param.opts, param.secondary_opts)
    for path, cmd in _commands(cli):
        texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
        named = {o for t in texts for o in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", t)}
        assert named <= known, (path, sorted(named - known))


def test_each_commands_vault_option_says_the_default_that_command_uses() -> None:
    """Commands that hand notes out read a registered vault; the others act on the work tree,
    like git. Each --vault help says its own command's default, not the other kind's."""
    helps = {}
    for path, cmd in _commands(cli):
        for param in cmd.params:
            if param.name == "vault":
                helps[path] = " ".join((getattr(param, "help", "") or "").split())
    assert not [path for path, words in helps.items() if "query and context" in words]
    for path in [("query",), ("context",)]:
        assert "registered vault holding the current directory" in helps[path], path
    for path in [("hooks", "install"), ("audit", "allow"), ("audit", "list"), ("ingest",)]:
        assert "the git work tree holding the current directory" in helps[path], path


def test_a_database_that_dies_mid_command_is_one_line(conn, vault, monkeypatch) -> None:
    """The server terminates the session while a command runs: no traceback, exit 4."""
    vault.write("a.md", "# A\n")
    vault.commit()
    vault.register()
    import vaultmem.index.ingest as ingest_mod

    real = ingest_mod.index_pass

    def dying(ing, result):  # type: ignore[no-untyped-def]
        pid = ing.conn.execute("SELECT pg_backend_pid() AS p").fetchone()["p"]
        ing.conn.commit()
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        conn.commit()
        return real(ing, result)

    monkeypatch.setattr(ingest_mod, "index_pass", dying)
    code, _, err = run("ingest", "--vault", str(vault.root))
    assert code == 4
    assert err.startswith("Error: the database connection failed") and err.count("\n") == 1


def test_an_operating_system_error_is_one_line_naming_the_path(tmp_path, monkeypatch) -> None:
    """A file where a directory must go (or a full disk) is reported, not a traceback."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".claude").write_text("not a directory")
    monkeypatch.chdir(tmp_path)
    code, _, err = run("hooks", "install", "--claude", "--project")
    assert code == 1
    assert err.startswith("Error: ") and str(tmp_path / ".claude") in err
    assert err.count("\n") == 1
    assert (tmp_path / ".claude").read_text() == "not a directory"
