"""PathPolicy: which vault paths are notes to index, matched on whole path components."""

from __future__ import annotations

from pathlib import Path

import pytest

from vaultmem.config import load_settings
from vaultmem.policy import PathPolicy

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
    assert (policy.verdict(path) is None) is indexed


@pytest.mark.parametrize(
    ("policy", "path", "reason"),
    [
        (DEFAULT, ".obsidian/app.md", "excluded folder .obsidian"),
        (ARCHIVE, "04_Archive/a/b.md", "excluded folder 04_Archive"),
        (DEFAULT, "img/logo.PNG", "not a note (.png)"),
        (DEFAULT, "LICENSE", "not a note (no extension)"),
        (PROJECTS_AI, "x.md", "outside the included folders (01_Projects/AI, Inbox)"),
        (DEFAULT, "../escape.md", "not a vault-relative path ('../escape.md')"),
    ],
)
def test_path_verdict_gives_a_plain_reason(policy: PathPolicy, path: str, reason: str) -> None:
    assert policy.verdict(path) == reason


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
    assert policy.verdict("01_Projects/AI/x.txt") is None
    assert policy.verdict("Inbox/Archive/x.md") is None
    assert policy.verdict("Archive/x.md") == "excluded folder Archive"
    assert policy.verdict("01_Projects/AIML/x.md") is not None


def test_path_policy_is_hashable_and_comparable() -> None:
    assert PathPolicy() == PathPolicy()
    assert hash(PathPolicy(include=("a",))) == hash(PathPolicy(include=("a",)))
