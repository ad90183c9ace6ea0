"""PathPolicy: which vault paths are notes to index, matched on whole path components."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem.config import load_settings
from vaultmem.index.paths import ExclusionCode, PathPolicy

DEFAULT = PathPolicy()
ARCHIVE = PathPolicy(exclude=(".obsidian", ".trash", ".git", "Archive", "04_Archive/"))
PROJECTS_AI = PathPolicy(include=("01_Projects/AI", "Inbox"))


@pytest.mark.parametrize(
    ("policy", "path", "indexed"),
    [
        (DEFAULT, "note.md", True),
        (DEFAULT, "a/b/c/deep note.md", True),
        (DEFAULT, "README.MD", True),
        (DEFAULT, "x.Markdown", True),
        (DEFAULT, ".obsidian/workspace.md", False),
        (DEFAULT, ".trash/old.md", False),
        (DEFAULT, ".git/COMMIT_EDITMSG.md", False),
        (DEFAULT, "notes/.obsidian-tips.md", True),
        (DEFAULT, "my.obsidian/x.md", True),
        (DEFAULT, "image.png", False),
        (DEFAULT, "Makefile", False),
        (DEFAULT, "notes.md.bak", False),
        # parts, never substrings
        (ARCHIVE, "Archive/x.md", False),
        (ARCHIVE, "MyArchive/x.md", True),
        (ARCHIVE, "Archive2/x.md", True),
        (ARCHIVE, "Projects/Archive/x.md", True),
        (ARCHIVE, "04_Archive/a/b.md", False),
        (ARCHIVE, "04_Archive.md", True),
        (ARCHIVE, "04_Archived/a.md", True),
        (PROJECTS_AI, "01_Projects/AI/a.md", True),
        (PROJECTS_AI, "01_Projects/AI/sub/b.md", True),
        (PROJECTS_AI, "01_Projects/AIML/a.md", False),
        (PROJECTS_AI, "01_Projects/other.md", False),
        (PROJECTS_AI, "Inbox/today.md", True),
        (PROJECTS_AI, "MyInbox/today.md", False),
        (PROJECTS_AI, "root.md", False),
        (PathPolicy(include=("./Notes/",)), "Notes/a.md", True),
        (PathPolicy(include=("Notes\\Work",)), "Notes/Work/a.md", True),
        (PathPolicy(extensions=("md", ".TXT")), "a.txt", True),
        (PathPolicy(extensions=("md", ".TXT")), "a.markdown", False),
        (PathPolicy(include=("Notes",), exclude=("Notes/Private",)), "Notes/Private/a.md", False),
        (PathPolicy(include=("Notes",), exclude=("Notes/Private",)), "Notes/Public/a.md", True),
    ],
)
def test_path_policy_matches_whole_components(policy: PathPolicy, path: str, indexed: bool) -> None:
    assert (policy.check(path) is None) is indexed


@pytest.mark.parametrize(
    ("policy", "path", "code", "reason"),
    [
        (DEFAULT, ".obsidian/app.md", ExclusionCode.EXCLUDED_FOLDER, "excluded folder .obsidian"),
        (ARCHIVE, "04_Archive/a/b.md", ExclusionCode.EXCLUDED_FOLDER, "excluded folder 04_Archive"),
        (DEFAULT, "img/logo.PNG", ExclusionCode.NOT_A_NOTE, "not a note (.png)"),
        (DEFAULT, "LICENSE", ExclusionCode.NOT_A_NOTE, "not a note (no extension)"),
        (
            PROJECTS_AI,
            "x.md",
            ExclusionCode.OUTSIDE_INCLUDE,
            "outside the included folders (01_Projects/AI, Inbox)",
        ),
        (
            DEFAULT,
            "../escape.md",
            ExclusionCode.NOT_VAULT_RELATIVE,
            "not a vault-relative path ('../escape.md')",
        ),
    ],
)
def test_path_verdict_gives_a_code_and_a_plain_reason(
    policy: PathPolicy, path: str, code: ExclusionCode, reason: str
) -> None:
    verdict = policy.check(path)
    assert verdict is not None
    assert (verdict.code, verdict.reason) == (code, reason)


def test_path_policy_defaults_exclude_tool_folders() -> None:
    assert DEFAULT.exclude == (".obsidian", ".trash", ".git")
    assert DEFAULT.extensions == (".md", ".markdown")


def test_path_policy_from_settings(tmp_path: Path) -> None:
    env = {
        "VAULTMEM_INCLUDE": "01_Projects/AI, Inbox",
        "VAULTMEM_EXCLUDE": ".obsidian,Archive",
        "VAULTMEM_EXTENSIONS": "md,TXT",
    }
    policy = PathPolicy.from_settings(load_settings(tmp_path, environ=env))
    assert policy.check("01_Projects/AI/x.txt") is None
    assert policy.check("Inbox/Archive/x.md") is None
    archived = policy.check("Archive/x.md")
    assert archived is not None and archived.reason == "excluded folder Archive"
    assert policy.check("01_Projects/AIML/x.md") is not None


def test_path_policy_is_hashable_and_comparable() -> None:
    assert PathPolicy() == PathPolicy()
    assert hash(PathPolicy(include=("a",))) == hash(PathPolicy(include=("a",)))
