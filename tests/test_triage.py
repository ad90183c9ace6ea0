"""`triage` decides every file's fate, purely; ingest, the audit rescan and verify all agree with it."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from conftest import Vault
from support.fake_secrets import fake_aws
from support.indexing import index

from vaultmem import store
from vaultmem.config import load_settings
from vaultmem.index import audit
from vaultmem.index.paths import ExclusionCode, PathPolicy
from vaultmem.index.triage import (
    MAX_PATH_BYTES,
    Ignore,
    Index,
    Quarantine,
    Rules,
    Skip,
    SkipCode,
    triage,
    triage_path,
)
from vaultmem.index.verify import verify
from vaultmem.store import db

RULES = Rules()
AWS_ID, _ = fake_aws(random.Random(12))
NOTE = b"# Deploy\n\nThe service runs on three nodes.\n"
LONG = "d/" * (MAX_PATH_BYTES // 2) + "x.md"


@pytest.mark.parametrize(
    ("path", "mode", "data", "rules", "expected"),
    [
        (
            ".obsidian/app.md",
            "100644",
            NOTE,
            RULES,
            Ignore(ExclusionCode.EXCLUDED_FOLDER, "excluded folder .obsidian"),
        ),
        (
            "img/logo.png",
            "100644",
            b"\x89PNG",
            RULES,
            Ignore(ExclusionCode.NOT_A_NOTE, "not a note (.png)"),
        ),
        (
            "x.md",
            "100644",
            NOTE,
            Rules(paths=PathPolicy(include=("Notes",))),
            Ignore(ExclusionCode.OUTSIDE_INCLUDE, "outside the included folders (Notes)"),
        ),
        (
            ".trash/sub",
            "160000",
            None,
            RULES,
            Ignore(ExclusionCode.EXCLUDED_FOLDER, "excluded folder .trash"),
        ),
        ("vendor/lib", "160000", None, RULES, Skip(SkipCode.SUBMODULE, "submodule (not indexed)")),
        (
            "vendor/lib.md",
            "160000",
            None,
            RULES,
            Skip(SkipCode.SUBMODULE, "submodule (not indexed)"),
        ),
        (
            "link.md",
            "120000",
            b"../target.md",
            RULES,
            Skip(SkipCode.SYMLINK, "symbolic link (not followed)"),
        ),
        (
            "big.md",
            "100644",
            b"x" * 11,
            Rules(max_file_bytes=10),
            Skip(SkipCode.TOO_LARGE, "too large (11 bytes, limit 10)"),
        ),
        (
            "bin.md",
            "100644",
            b"\0binary",
            RULES,
            Skip(SkipCode.BINARY, "binary content (NUL bytes)"),
        ),
        (
            "u16.md",
            "100644",
            "hi".encode("utf-16"),
            RULES,
            Skip(SkipCode.UTF16, "UTF-16 encoded (convert the file to UTF-8)"),
        ),
        (
            "bad.md",
            "100644",
            b"caf\xe9",
            RULES,
            Skip(SkipCode.INVALID_UTF8, "not valid UTF-8 (bad byte at offset 3)"),
        ),
        (
            "gone.md",
            "100644",
            None,
            RULES,
            Skip(SkipCode.UNREADABLE, "content not readable from the repository"),
        ),
    ],
)
def test_triage_ignores_and_skips_with_codes(path, mode, data, rules, expected) -> None:
    assert triage(path, mode, data, rules) == expected


def test_a_path_too_long_for_the_index_is_an_unrecordable_skip() -> None:
    outcome = triage(LONG, "100644", NOTE, RULES)
    assert isinstance(outcome, Skip) and outcome.code is SkipCode.PATH_TOO_LONG
    assert not outcome.code.recordable and SkipCode.BINARY.recordable
    # ...but a long path that is ignored anyway is just ignored
    assert isinstance(triage(LONG[:-3] + ".png", "100644", b"", RULES), Ignore)


def test_a_note_is_indexed_with_private_spans_removed() -> None:
    data = b"# Plan\n\nvisible\n<private>hidden words</private>\nafter\n"
    outcome = triage("plan.md", "100644", data, RULES)
    assert isinstance(outcome, Index) and outcome.allowed == ()
    text = " ".join(c.text for c in outcome.note.chunks)
    assert "visible" in text and "after" in text and "hidden" not in text
    assert outcome.note.title == "Plan"


def test_secret_content_is_quarantined_with_the_note_kept_for_a_review() -> None:
    data = NOTE + f"\naws_access_key_id = {AWS_ID}\n".encode()
    outcome = triage("deploy.md", "100644", data, RULES)
    assert isinstance(outcome, Quarantine)
    assert "aws-access-key" in {f.rule_id for f in outcome.findings}
    assert all(AWS_ID not in f.masked for f in outcome.findings)
    allowed = outcome.allow()
    assert isinstance(allowed, Index) and allowed.allowed == outcome.findings
    assert allowed.note.path == "deploy.md"


def test_private_front_matter_is_quarantined() -> None:
    outcome = triage("diary.md", "100644", b"---\nprivate: true\n---\n# Diary\n", RULES)
    assert isinstance(outcome, Quarantine)
    assert [f.rule_id for f in outcome.findings] == ["front-matter-private"]


def test_a_secret_file_that_is_no_note_is_quarantined_by_its_path_alone() -> None:
    outcome = triage(".env", "100644", b"A=1\n", RULES)
    assert isinstance(outcome, Quarantine) and outcome.note is None
    assert outcome.reason == "not a note (no extension)"
    assert outcome.allow() == Skip(
        SkipCode.ALLOWED_NOT_A_NOTE, "allowed by review, but not a note (no extension)"
    )
    # the bytes are never needed for that decision
    assert triage_path(".env", "100644", RULES) == outcome
    assert triage_path("notes/a.md", "100644", RULES) is None


@pytest.mark.parametrize(
    ("path", "mode", "data"),
    [
        # audit's old rescan ignored the mode: a symlink named like a secret was "quarantined"
        ("api-secret.md", "120000", b"../elsewhere/api-secret.md"),
        # ...and a submodule named like a credential
        ("credentials.md", "160000", None),
        # ...and the path-length limit
        ("s/" * (MAX_PATH_BYTES // 2) + "secret.md", "100644", b"password: hunter2hunter2X9!\n"),
    ],
)
def test_the_audit_rescan_decides_exactly_as_triage(path, mode, data) -> None:
    settings = load_settings(None, environ={})
    outcome = triage(path, mode, data, Rules.from_settings(settings))
    assert isinstance(outcome, Skip)
    assert audit.rescan(settings, path, data or b"", mode) == []


def _tree(root: Path) -> dict[str, tuple[str, str]]:
    from vaultmem.index import gitdiff

    return gitdiff.ls_tree(root, gitdiff.head_commit(root) or "")


def test_ingest_verify_and_audit_agree_with_triage_on_every_kind_of_file(
    conn, vault: Vault, tmp_path: Path
) -> None:
    vault.write("notes/plain.md", NOTE.decode())
    vault.write("notes/key.md", NOTE.decode() + f"\naws_access_key_id = {AWS_ID}\n")
    vault.write("notes/diary.md", "---\nprivate: true\n---\n# Diary\n")
    vault.write("notes/bin.md", b"\0binary")
    vault.write("notes/bad.md", b"caf\xe9\n")
    vault.write(".env", "TOKEN=1\n")
    vault.write("img/logo.png", b"\x89PNG")
    vault.write(".obsidian/app.md", "# settings\n")
    (vault.root / "notes/link.md").symlink_to("plain.md")
    sub = tmp_path / "sub"
    sub.mkdir()
    Vault(sub).write("r.md", "# r\n")
    Vault(sub).commit()
    subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor"],
        cwd=vault.root,
        check=True,
        capture_output=True,
    )
    vault.commit()
    index(vault.root)

    settings = load_settings(vault.root)
    rules = Rules.from_settings(settings)
    v = db.find_vault(conn, vault.root)
    assert v is not None
    known = store.known_paths(conn, v.id)
    conn.commit()
    expected_kind = {Index: "note", Quarantine: "quarantined", Skip: "skipped", Ignore: None}
    seen: set[type] = set()
    for path, (mode, blob) in _tree(vault.root).items():
        data = None
        if mode != "160000":
            data = subprocess.run(
                ["git", "cat-file", "blob", blob], cwd=vault.root, capture_output=True, check=True
            ).stdout
        outcome = triage(path, mode, data, rules)
        seen.add(type(outcome))
        have = known.get(path)
        assert (have.kind if have else None) == expected_kind[type(outcome)], path
        assert bool(audit.rescan(settings, path, data or b"", mode)) == isinstance(
            outcome, Quarantine
        ), path
    assert seen == {Index, Quarantine, Skip, Ignore}
    assert {known[p].kind for p in ("notes/link.md", "vendor", "notes/bin.md")} == {"skipped"}
    assert not verify(settings, vault.root, deep=True).drift


def test_malformed_front_matter_with_a_privacy_marker_is_quarantined() -> None:
    from vaultmem.index.triage import Quarantine, Rules, triage

    for text in (
        "---\ntitle: Diary: day one: rain\nprivate: true\n\ttags: [x]\n---\n\nMet Dr. Okafor.\n",
        '---\ntitle: "unclosed\ntags: [private, health]\n---\n\nBlood test results.\n',
        "---\ntitle: a: b: c\ntags:\n  - work\n  - private\n---\n\nBody.\n",
    ):
        outcome = triage("diary.md", "100644", text.encode(), Rules())
        assert isinstance(outcome, Quarantine), text
        assert [f.rule_id for f in outcome.findings] == ["malformed-front-matter-private"]
    fine = "---\ntitle: a: b: c\nprivate: false\n---\n\nBody.\n"
    assert not isinstance(triage("n.md", "100644", fine.encode(), Rules()), Quarantine)


def test_decide_applies_a_review_to_the_reviewed_version_only(conn, vault: Vault) -> None:
    from vaultmem.index.decision import decide
    from vaultmem.index.gitdiff import TreeEntry

    vid = db.register_vault(conn, vault.root).id
    secret = NOTE + f"\naws_access_key_id = {AWS_ID}\n".encode()
    reviewed, edited = "a" * 40, "b" * 40
    reads: list[str] = []

    def read() -> bytes:
        reads.append("deploy.md")
        return secret

    # No review: quarantined, as triage says.
    outcome = decide(conn, vid, TreeEntry("deploy.md", "100644", reviewed), RULES, read)
    assert isinstance(outcome, Quarantine)
    assert "aws-access-key" in {f.rule_id for f in outcome.findings}
    # A review of that very blob: indexed, with the findings it allowed.
    with conn.transaction():
        store.record_allow(conn, vid, "deploy.md", reviewed)
    allowed = decide(conn, vid, TreeEntry("deploy.md", "100644", reviewed), RULES, read)
    assert isinstance(allowed, Index) and allowed.allowed == outcome.findings
    assert allowed.note.path == "deploy.md"
    # Any other version of the same path is quarantined again.
    again = decide(conn, vid, TreeEntry("deploy.md", "100644", edited), RULES, read)
    assert isinstance(again, Quarantine)
    assert reads == ["deploy.md"] * 3

    # A secret file that is no note: the path decides, its bytes are never read, and a review
    # makes it a skip (it is still not a note), never an indexed note.
    def unread() -> bytes:
        raise AssertionError("the path alone decides: no read")

    env = TreeEntry(".env", "100644", reviewed)
    assert isinstance(decide(conn, vid, env, RULES, unread), Quarantine)
    with conn.transaction():
        store.record_allow(conn, vid, ".env", reviewed)
    assert decide(conn, vid, env, RULES, unread) == Skip(
        SkipCode.ALLOWED_NOT_A_NOTE, "allowed by review, but not a note (no extension)"
    )
    # Withdrawn: quarantined again.
    with conn.transaction():
        assert store.drop_allow(conn, vid, "deploy.md") == reviewed
    assert isinstance(
        decide(conn, vid, TreeEntry("deploy.md", "100644", reviewed), RULES, read), Quarantine
    )
