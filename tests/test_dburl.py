"""Database URLs: SQLAlchemy-style URLs are accepted, and no shape of URL or DSN shows its password."""

from __future__ import annotations

import psycopg
import pytest

from vaultmem.config import load_settings
from vaultmem.dburl import normalise_database_url, redact_url
from vaultmem.errors import ConfigError

SECRET = "Sup3r-S3cret"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@h:5/db", "postgresql://u:***@h:5/db"),
        (f"postgresql://:{SECRET}@h/db", "postgresql://:***@h/db"),  # empty user
        (f"postgresql://u:{SECRET}@x@h/db", "postgresql://u:***@h/db"),  # unencoded @
        (f"postgresql://u:a:{SECRET}@h/db", "postgresql://u:***@h/db"),  # : in the password
        (f"postgresql://u:{SECRET}%40x@h/db", "postgresql://u:***@h/db"),  # percent-encoded
        (f"postgresql://u:pa/{SECRET}@h/db", "postgresql://u:***@h/db"),  # / in the password
        (f"postgresql://u:pa?{SECRET}@h/db", "postgresql://u:***@h/db"),  # ? in the password
        (
            f"postgres://u@h/db?password={SECRET}&sslmode=require",
            "postgres://u@h/db?password=***&sslmode=require",
        ),
        (f"postgresql+psycopg://u:{SECRET}@h/db", "postgresql+psycopg://u:***@h/db"),
        ("postgresql://u@h/db?application_name=a@b", "postgresql://u@h/db?application_name=a@b"),
        (f"host=h user=u password={SECRET} dbname=d", "host=h user=u password=*** dbname=d"),
        (f"host=h password='{SECRET} with spaces' user=u", "host=h password=*** user=u"),
        (f"host=h password = '{SECRET}\\'s' user=u", "host=h password = *** user=u"),
        ("postgresql:///vaultmem?host=/tmp/sock", "postgresql:///vaultmem?host=/tmp/sock"),
        # spaces and odd characters, as pasted (libpq rejects some: their errors quote them)
        (f"postgresql://app:Zq9 {SECRET}@db.example/app", "postgresql://app:***@db.example/app"),
        (f"postgresql://app:a@b {SECRET}@h/db", "postgresql://app:***@h/db"),
        (
            f"postgresql://u:{SECRET} x@h/db?application_name=a@b",
            "postgresql://u:***@h/db?application_name=a@b",
        ),
        (
            f"postgresql://u:pw@h/db?x=1&password={SECRET} x",
            "postgresql://u:***@h/db?x=1&password=***",
        ),
        (f"postgresql://u:Zq9 {SECRET}", "postgresql://u:***"),  # cut short before its host
        (f"host=h user=u password=Zq9 {SECRET} dbname=d", "host=h user=u password=*** dbname=d"),
        (f"host=h password=p@ss{SECRET} user=u", "host=h password=*** user=u"),
        (f"postgresql://u:%20{SECRET}%25@h/db", "postgresql://u:***@h/db"),
        ("postgresql://localhost:5432/db", "postgresql://localhost:5432/db"),  # a port stays
    ],
)
def test_no_url_or_dsn_shape_shows_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(f"cannot reach the database at {url}: check it")


def test_a_redacted_url_inside_a_sentence_keeps_the_sentence() -> None:
    line = f"error: could not connect to postgresql://u:{SECRET}@db.example:5432/x (timeout)"
    assert redact_url(line) == (
        "error: could not connect to postgresql://u:***@db.example:5432/x (timeout)"
    )


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://u:{SECRET}%40x@db.example:5433/notes?sslmode=require",
        f"postgresql+psycopg2://u:{SECRET}%40x@db.example:5433/notes?sslmode=require",
        f"postgresql+asyncpg://u:{SECRET}%40x@db.example:5433/notes?sslmode=require",
    ],
)
def test_sqlalchemy_urls_become_libpq_urls_with_the_same_meaning(url: str) -> None:
    libpq = normalise_database_url(url)
    assert libpq.startswith("postgresql://")
    assert psycopg.conninfo.conninfo_to_dict(libpq) == {
        "user": "u",
        "password": f"{SECRET}@x",
        "host": "db.example",
        "port": "5433",
        "dbname": "notes",
        "sslmode": "require",
    }


def test_libpq_urls_and_dsns_are_left_as_they_are() -> None:
    for url in ("postgresql://u@h/db", "postgres://h/db", "host=h dbname=d", ""):
        assert normalise_database_url(url) == url


def test_a_url_for_another_database_is_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="is for mysql, not PostgreSQL") as exc:
        normalise_database_url(f"mysql+pymysql://u:{SECRET}@h/db")
    assert SECRET not in str(exc.value)


def test_settings_accept_a_sqlalchemy_url_and_never_print_its_password(tmp_path) -> None:
    env = {"VAULTMEM_DATABASE_URL": f"postgresql+psycopg://u:{SECRET}@h/db"}
    settings = load_settings(tmp_path, environ=env)
    assert settings.database_url == f"postgresql://u:{SECRET}@h/db"
    assert SECRET not in str(settings.redacted())


def test_redacting_twice_changes_nothing() -> None:
    line = f"cannot use host=h password=Zq9 {SECRET} user=u: a key=value item has no `=`"
    once = redact_url(line)
    assert SECRET not in once and redact_url(once) == once


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://app:Zq9 {SECRET}@127.0.0.1:1/app",
        f"host=127.0.0.1 port=1 password=Zq9 {SECRET}",
        f"postgresql://app:{SECRET}%zz@127.0.0.1:1/app",
    ],
)
def test_a_url_libpq_cannot_parse_is_one_line_exit_2_without_the_password(url, monkeypatch) -> None:
    from click.testing import CliRunner

    from vaultmem.cli import cli

    monkeypatch.setenv("VAULTMEM_DATABASE_URL", url)
    for command in (["status"], ["gc"], ["vaults", "list"]):
        result = CliRunner().invoke(cli, command)
        assert SECRET not in result.output and "Traceback" not in result.output
        if command[0] == "vaults":
            continue  # lists no database: nothing to fail
        assert result.exit_code == 2, (command, result.output, result.exception)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: the database URL"), lines
