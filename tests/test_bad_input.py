"""Bad input matrix: odd files and names never crash the ingester; every skip has a reason.

One real vault receives every case, each in its own commit caught up on its own (so a crash is
pinned to its case), then `vaultmem verify` and `vaultmem status` run once as real processes.
Each row of CASES says what the user should see: indexed (with a check on what was indexed),
indexed with a warning, or skipped with a reason that both commands print.
"""

from __future__ import annotations

import os
import random
import string
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import GIT_ENV, KEPT_VARIABLES, Vault
from support.indexing import fresh_build_snapshot, index, snapshot
from support.reliability import invariants, vault_id, vaultmem

from vaultmem import vaults
from vaultmem.config import load_settings
from vaultmem.index.verify import verify
from vaultmem.store import db

_rng = random.Random(17)


def _random_dirs(depth: int, width: int) -> str:
    # Random names, so PostgreSQL cannot compress the path under its index-key limit.
    return "/".join(
        "".join(_rng.choice(string.ascii_lowercase) for _ in range(width)) for _ in range(depth)
    )


DEEP = _random_dirs(12, 150) + "/deep note.md"  # ~1.8 kB: long, but still indexable
TOO_DEEP = _random_dirs(15, 200) + "/too deep.md"  # ~3 kB: no index key can hold it
HEADINGS = "\n\n".join(f"## Heading {i}\n\nline {i}" for i in range(10_000))


def _submodule(vault: Vault, tmp: Path) -> None:
    lib = tmp / "notes-lib"
    lib.mkdir()
    sub = Vault(lib)
    sub.write("inside.md", "# Inside the submodule\n")
    sub.commit("lib")
    vault.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")


def _symlink(vault: Vault, tmp: Path) -> None:
    vault.write("target.md", "# Target\n\nthe real note\n")
    (vault.root / "link.md").symlink_to("target.md")


@dataclass(frozen=True)
class Case:
    id: str
    path: str
    make: Callable[[Vault, Path], Any]  # writes the case into the vault
    outcome: str  # "indexed" | "warning" | "skipped"
    detail: str = ""  # skipped/warning: text the reason must contain
    check: Callable[[dict[str, Any]], bool] | None = None  # indexed: on {title, tags, chunks}


def _write(path: str, data: str | bytes) -> Callable[[Vault, Path], Any]:
    return lambda vault, tmp: vault.write(path, data)


def _no_chunks(n: dict[str, Any]) -> bool:
    return n["chunks"] == []


CASES = [
    Case("binary", "binary.md", _write("binary.md", b"%PDF-1.4\n\x00\x01\x02"), "skipped",
         "binary content (NUL bytes)"),
    Case("invalid-utf8", "latin1.md", _write("latin1.md", "café au lait\n".encode("latin-1")),
         "skipped", "not valid UTF-8 (bad byte at offset 3)"),
    Case("utf16", "utf16.md", _write("utf16.md", "\ufeffhi".encode("utf-16-le")), "skipped",
         "UTF-16 encoded"),
    Case("50MB", "huge.md", _write("huge.md", b"# Huge\n\n" + b"word " * 10_000_000), "skipped",
         "too large (50000008 bytes, limit 5000000)"),
    Case("empty", "empty.md", _write("empty.md", ""), "indexed", check=_no_chunks),
    Case("symlink", "link.md", _symlink, "skipped", "symbolic link (not followed)"),
    Case("submodule", "vendor/lib", _submodule, "skipped", "submodule (not indexed)"),
    Case("newline-name", "line\nbreak.md", _write("line\nbreak.md", "# NL\n\nnewline name\n"),
         "indexed", check=lambda n: n["title"] == "NL"),
    Case("quotes-name", "say \"hi\" it's.md", _write("say \"hi\" it's.md", "# Q\n\nquoted\n"),
         "indexed", check=lambda n: n["title"] == "Q"),
    Case("leading-dash", "-n --help.md", _write("-n --help.md", "# Dash\n\nnot an option\n"),
         "indexed", check=lambda n: n["title"] == "Dash"),
    Case("emoji-name", "📝 ideas 🚀.md", _write("📝 ideas 🚀.md", "# Ideas 🚀\n\nrocket\n"),
         "indexed", check=lambda n: n["title"] == "Ideas 🚀"),
    Case("cjk-name", "笔记/学习 笔记.md", _write("笔记/学习 笔记.md", "# 学习笔记\n\n学了数据库\n"),
         "indexed", check=lambda n: n["title"] == "学习笔记" and "数据库" in n["chunks"][0]),
    Case("255-byte-name", "L" * 251 + ".md", _write("L" * 251 + ".md", "# Long\n\nname\n"),
         "indexed", check=lambda n: n["title"] == "Long"),
    Case("255-byte-cjk-name", "长" * 83 + ".md", _write("长" * 83 + ".md", "# 长\n\n名字\n"),
         "indexed", check=lambda n: n["title"] == "长"),
    Case("deep-path", DEEP, _write(DEEP, "# Deep\n\nfar down\n"), "indexed",
         check=lambda n: n["title"] == "Deep"),
    Case("too-long-path", TOO_DEEP, _write(TOO_DEEP, "# Too deep\n"), "skipped",
         "path too long to index"),
    Case("malformed-yaml", "yaml.md", _write("yaml.md", "---\ntitle: [unclosed\n---\n# B\n\nx\n"),
         "warning", "malformed YAML front matter"),
    Case("bom", "bom.md", _write("bom.md", b"\xef\xbb\xbf---\ntitle: Bommed\n---\n\nbody\n"),
         "indexed", check=lambda n: n["title"] == "Bommed" and n["chunks"] == ["body"]),
    Case("crlf", "crlf.md", _write("crlf.md", b"# Windows\r\n\r\nline one\r\nline two\r\n"),
         "indexed", check=lambda n: n["chunks"] == ["# Windows\n\nline one\nline two"]),
    Case("only-front-matter", "meta.md", _write("meta.md", "---\ntitle: Meta\ntags: [m]\n---\n"),
         "indexed", check=lambda n: (n["title"], n["tags"], n["chunks"]) == ("Meta", ["m"], [])),
    Case("10k-headings", "headings.md", _write("headings.md", HEADINGS), "indexed",
         check=lambda n: 100 < len(n["chunks"]) < 1000 and max(map(len, n["chunks"])) <= 1500),
]  # fmt: skip


@dataclass
class Matrix:
    root: Path
    url: str
    outcomes: dict[str, Any]  # case id -> IngestResult, or the exception the ingester raised
    verify_out: str
    status_out: str


@pytest.fixture(scope="module")
def matrix(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    name = f"vmbad_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(pg_server_url)
    url = psycopg.conninfo.make_conninfo(**{**info, "dbname": name})
    tmp = tmp_path_factory.mktemp("bad-input")
    with pytest.MonkeyPatch.context() as mp:
        for var in list(os.environ):
            if (var.startswith("VAULTMEM_") and var not in KEPT_VARIABLES) or var == "DATABASE_URL":
                mp.delenv(var)
        for k, v in {**GIT_ENV, "VAULTMEM_DATABASE_URL": url}.items():
            mp.setenv(k, v)
        mp.setenv("VAULTMEM_EMBEDDING_PROVIDER", "hash")
        (tmp / "vault").mkdir()
        vault = Vault(tmp / "vault")
        vault.write("plain.md", "# Plain\n\nan ordinary note\n")
        vault.commit("plain")
        index(vault.root)
        outcomes: dict[str, Any] = {}
        for case in CASES:
            case.make(vault, tmp)
            vault.commit(case.id)
            try:
                outcomes[case.id] = index(vault.root)
            except Exception as exc:  # recorded, so the case's own test reports it
                outcomes[case.id] = exc
        verify_out = vaultmem("verify", "--vault", str(vault.root))
        status_out = vaultmem("status")
        assert status_out.returncode == 0, status_out.stderr
        yield Matrix(vault.root, url, outcomes, verify_out.stdout, status_out.stdout)
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _note(conn: psycopg.Connection, vid: int, path: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT title, tags, warnings FROM memory_notes WHERE vault_id = %s AND path = %s",
        (vid, path),
    ).fetchone()
    if row is None:
        return None
    chunks = conn.execute(
        "SELECT content FROM memory_primary WHERE vault_id = %s AND path = %s ORDER BY chunk_index",
        (vid, path),
    ).fetchall()
    return {**row, "chunks": [c["content"] for c in chunks]}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_has_the_expected_user_readable_outcome(matrix: Matrix, case: Case) -> None:
    result = matrix.outcomes[case.id]
    assert not isinstance(result, Exception), f"the ingester crashed: {result!r}"
    assert result.errors == []
    with db.connect_url(matrix.url) as conn:
        vid = vault_id(conn, matrix.root)
        note = _note(conn, vid, case.path)
        skip = conn.execute(
            "SELECT reason FROM memory_skipped WHERE vault_id = %s AND path = %s",
            (vid, case.path),
        ).fetchone()
    if case.outcome == "skipped":
        assert note is None
        assert case.detail in result.skip_reasons[case.path]  # the run itself said why
        if skip is not None:  # (a path too long to be a key cannot be stored, only reported)
            assert case.detail in skip["reason"]
        line = f"skipped {case.path!r}: "
        for output in (matrix.verify_out, matrix.status_out):
            found = [ln for ln in output.splitlines() if line in ln]
            assert found and case.detail in found[0], output
        return
    assert note is not None, f"{case.path!r} was not indexed"
    assert skip is None
    if case.outcome == "warning":
        assert any(case.detail in w for w in note["warnings"])
        line = f"indexed with a warning {case.path!r}: {case.detail}"
        assert line in matrix.verify_out and line in matrix.status_out
    else:
        assert note["warnings"] == []
        assert case.check is not None and case.check(note), note


def test_the_whole_matrix_converges_and_verifies(matrix: Matrix, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("VAULTMEM_DATABASE_URL", matrix.url)
    report = verify(load_settings(matrix.root), matrix.root, deep=True)
    assert not report.drift, report.to_dict()
    assert "no drift" in matrix.verify_out
    with db.connect_url(matrix.url) as conn:
        assert invariants(conn, matrix.root) == []
        assert snapshot(conn, matrix.root) == fresh_build_snapshot(conn, matrix.root, tmp_path)
    # A rebuild through the real CLI goes through every file again and names every skip.
    vaults.register(matrix.root)
    out = vaultmem("rebuild", "--vault", str(matrix.root))
    assert out.returncode == 0, out.stderr
    skipped = [c for c in CASES if c.outcome == "skipped"]
    assert f"{len(skipped)} skipped" in out.stdout
    for case in skipped:
        assert f"skipped {case.path!r}: " in out.stdout
