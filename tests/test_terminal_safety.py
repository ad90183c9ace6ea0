"""Terminal safety, redaction and review prompts at the CLI boundary."""

from __future__ import annotations

import json
import os
import random
import stat

from click.testing import CliRunner
from support.fake_secrets import fake_aws
from support.indexing import index

from vaultmem.cli import cli
from vaultmem.dburl import redact_url
from vaultmem.index import statedir
from vaultmem.terminal import clean, json_safe

NASTY = (
    "\x1b[2J\x1b[H"  # clear screen
    "\x1b]0;owned\x07"  # window title
    "\x1b]52;c;aGVsbG8=\x07"  # OSC 52 clipboard write
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 link
    "\x9b31m\u202eevil"  # 8-bit CSI, right-to-left override
)


def test_clean_leaves_no_control_character() -> None:
    out = clean(NASTY)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert "\u202e" not in out and "\\x1b[2J" in out
    assert clean("a\nb\tc") == "a\nb\tc" and clean("a\nb", newlines=False) == "a\\x0ab"
    dumped = json_safe(json.dumps({"t": NASTY}, ensure_ascii=False))
    assert json.loads(dumped)["t"] == NASTY and "\x9b" not in dumped and "\x1b" not in dumped


def test_a_note_with_escape_sequences_prints_none_raw(conn, vault) -> None:
    vault.write("evil\x1b[31m.md", f"# Backup plan\n\nThe nightly backup {NASTY} runs at two.\n")
    vault.commit()
    vault.register()
    index(vault.root)
    runner = CliRunner()
    for args in (
        ["query", "nightly backup", "--vault", str(vault.root)],
        ["query", "nightly backup", "--explain", "--vault", str(vault.root)],
        ["context", "nightly backup", "--vault", str(vault.root)],
        ["verify", "--vault", str(vault.root)],
        ["status"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code in (0, 8), (args, result.output)
        assert not any(ord(c) < 32 and c not in "\n\t" for c in result.output), args
        assert not any(0x7F <= ord(c) <= 0x9F for c in result.output), args
    result = runner.invoke(cli, ["query", "nightly backup", "--json", "--vault", str(vault.root)])
    assert json.loads(result.output)[0]["text"].count("\x1b") == NASTY.count("\x1b")


SECRET = "Sup3r-S3cret"
URLS = [
    f"postgresql://:{SECRET}@db.example/x",
    f"postgresql://u:{SECRET}@x@db.example/x",
    f"postgresql://u:a:{SECRET}@db.example/x",
    f"postgresql://u:{SECRET}%40x@db.example/x",
    f"postgresql://u@db.example/x?sslmode=require&password={SECRET}",
    f"host=db.example user=u password='{SECRET} x'",
    f'host=db.example user=u password="{SECRET} x"',
    f"postgresql://u:{SECRET}",
]


def test_no_url_shape_prints_its_password_in_errors_or_the_log(vault, monkeypatch) -> None:
    for url in URLS:
        assert SECRET not in redact_url(f"error at {url}: refused"), url
        monkeypatch.setenv("VAULTMEM_DATABASE_URL", url)
        result = CliRunner().invoke(cli, ["status"])
        assert result.exit_code != 0 and SECRET not in result.output, (url, result.output)
    files = statedir.state_files(vault.root)
    for url in URLS:
        statedir.log_line(files, f"error: cannot reach the database at {url}")
    log = files.log.read_text(encoding="utf-8")
    assert SECRET not in log and log.count("\n") == len(URLS)
    assert stat.S_IMODE(os.stat(files.log).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(files.dir).st_mode) == 0o700


def test_allowing_a_real_looking_credential_asks_first(conn, vault) -> None:
    key, _ = fake_aws(random.Random(21))
    vault.write("deploy.md", f"# Deploy\n\naws_access_key_id = {key}\n")
    vault.write("a/one.md", "# One\n\nroot password: Xk29!abQ7z\n")
    vault.write("a/two.md", "# Two\n\nadmin password: Qw8#rTy2Lp\n")
    vault.commit()
    index(vault.root)
    vault.register()  # `audit allow` writes the index: a registered vault's only
    root = str(vault.root)
    runner = CliRunner()
    for answer in ("n\n", ""):  # no, or no answer at all: declined, not an error
        result = runner.invoke(cli, ["audit", "allow", "deploy.md", "--vault", root], input=answer)
        assert result.exit_code == 0 and "aws-access-key" in result.output, result.output
        assert "deploy.md holds what looks like a real credential" in result.output
        assert "indexed" not in result.output and "Aborted" not in result.output
        assert result.output.count("not allowed: nothing changed") == 1
    listed = runner.invoke(cli, ["audit", "list", "--vault", root, "--json"]).output
    assert "deploy.md" not in [a["path"] for a in json.loads(listed)["allowed"]]
    result = runner.invoke(cli, ["audit", "allow", "deploy.md", "--vault", root, "--yes"])
    assert result.exit_code == 0 and result.output.startswith("allowed deploy.md"), result.output
    result = runner.invoke(
        cli, ["audit", "allow", "a/*", "--rule", "password-assignment", "--vault", root]
    )
    assert result.exit_code == 0, result.output
    assert "allowed 2 files" in result.output and "a/one.md at blob" in result.output
    listed = runner.invoke(cli, ["audit", "list", "--vault", root, "--json"]).output
    assert sorted(a["path"] for a in json.loads(listed)["allowed"]) == [
        "a/one.md",
        "a/two.md",
        "deploy.md",
    ]
