"""gitdiff against real git repositories made in tmp_path (no mocks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from vaultmem.errors import GitError, NotAGitRepo
from vaultmem.index import gitdiff
from vaultmem.index.gitdiff import BlobReader, Change, parse_diff_tree

ODD_NAMES = [
    "line\nbreak.md",
    'say "hi".md',
    "-rf.md",
    "--help.md",
    "emoji 🚀 note.md",
    "中文笔记/日本語ノート.md",
    "tab\tand\\backslash.md",
    ":colon start.md",
    "sp ace/ trailing .md",
    "deep/" + "x" * 200 + ".md",
]


@pytest.fixture(autouse=True)
def git_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Identity and isolation for every git process, via the environment only."""
    for name, value in {
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.com",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CEILING_DIRECTORIES": str(tmp_path),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def commit(repo: Path, message: str = "change") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").decode().strip()


def write(repo: Path, path: str, content: bytes | str) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    target.write_bytes(content)


def blob_of(repo: Path, rev: str, path: str) -> str:
    return git(repo, "rev-parse", f"{rev}:{path}").decode().strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    return root


def by_path(changes: list[Change]) -> dict[str, Change]:
    return {c.path: c for c in changes}


# --- repository discovery ---------------------------------------------------------------


def test_repo_root_finds_top_level_from_a_subfolder_or_file(repo: Path) -> None:
    write(repo, "a/b/note.md", "x")
    assert gitdiff.repo_root(repo / "a" / "b") == repo.resolve()
    assert gitdiff.repo_root(repo / "a" / "b" / "note.md") == repo.resolve()


def test_repo_root_outside_a_repository_raises_not_a_git_repo(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(NotAGitRepo, match="not inside a git repository.*git init") as info:
        gitdiff.repo_root(plain)
    assert "\n" not in str(info.value)


def test_repo_root_of_a_missing_path_raises_not_a_git_repo(tmp_path: Path) -> None:
    with pytest.raises(NotAGitRepo, match="does not exist"):
        gitdiff.repo_root(tmp_path / "nope")


def test_git_dir_is_absolute_and_follows_worktrees(repo: Path, tmp_path: Path) -> None:
    commit(repo, "first")
    assert gitdiff.git_dir(repo) == (repo / ".git").resolve()
    other = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(other))
    wt_dir = gitdiff.git_dir(other)
    assert wt_dir.is_absolute()
    assert wt_dir.parent == (repo / ".git" / "worktrees").resolve()


def test_head_commit_is_none_on_an_unborn_branch(repo: Path) -> None:
    assert gitdiff.head_commit(repo) is None
    sha = commit(repo, "first")
    assert gitdiff.head_commit(repo) == sha


def test_head_commit_outside_a_repository_raises_git_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="cannot read HEAD"):
        gitdiff.head_commit(tmp_path)


def test_repo_argument_wins_over_inherited_git_dir(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = commit(repo, "first")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    # As inside a git hook of another repository.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert gitdiff.head_commit(repo) == sha


def test_commit_exists(repo: Path) -> None:
    sha = commit(repo, "first")
    assert gitdiff.commit_exists(repo, sha)
    assert not gitdiff.commit_exists(repo, "0" * 40)
    assert not gitdiff.commit_exists(repo, "-h")
    assert not gitdiff.commit_exists(repo, "")
    tree = git(repo, "rev-parse", "HEAD^{tree}").decode().strip()
    assert not gitdiff.commit_exists(repo, tree)


def test_is_ancestor(repo: Path) -> None:
    first = commit(repo, "first")
    second = commit(repo, "second")
    assert gitdiff.is_ancestor(repo, first, second)
    assert gitdiff.is_ancestor(repo, second, second)
    assert not gitdiff.is_ancestor(repo, second, first)


def test_is_ancestor_with_an_unknown_commit_raises_git_error(repo: Path) -> None:
    first = commit(repo, "first")
    with pytest.raises(GitError, match="cannot compare commits"):
        gitdiff.is_ancestor(repo, "1" * 40, first)


def test_empty_tree_matches_git(repo: Path) -> None:
    assert gitdiff.empty_tree(repo) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


# --- diff_commits -----------------------------------------------------------------------


def test_first_commit_diff_lists_every_file_as_added(repo: Path) -> None:
    write(repo, "a.md", "a")
    write(repo, "dir/b.md", "b")
    sha = commit(repo, "first")
    changes = gitdiff.diff_commits(repo, None, sha)
    assert by_path(changes) == {
        "a.md": Change("A", "a.md", None, "100644", blob_of(repo, sha, "a.md")),
        "dir/b.md": Change("A", "dir/b.md", None, "100644", blob_of(repo, sha, "dir/b.md")),
    }


def test_add_modify_delete_and_executable_bit(repo: Path) -> None:
    write(repo, "keep.md", "keep")
    write(repo, "edit.md", "v1")
    write(repo, "gone.md", "bye")
    write(repo, "script.sh", "echo")
    old = commit(repo, "first")
    write(repo, "edit.md", "v2")
    write(repo, "new.md", "hello")
    (repo / "gone.md").unlink()
    (repo / "script.sh").chmod(0o755)
    new = commit(repo, "second")
    changes = by_path(gitdiff.diff_commits(repo, old, new))
    assert changes == {
        "edit.md": Change("M", "edit.md", None, "100644", blob_of(repo, new, "edit.md")),
        "new.md": Change("A", "new.md", None, "100644", blob_of(repo, new, "new.md")),
        "gone.md": Change("D", "gone.md", None, "000000", None),
        "script.sh": Change("M", "script.sh", None, "100755", blob_of(repo, new, "script.sh")),
    }


def test_file_replaced_by_symlink_is_a_type_change(repo: Path) -> None:
    write(repo, "target.md", "t")
    write(repo, "link.md", "was a file")
    old = commit(repo, "first")
    (repo / "link.md").unlink()
    (repo / "link.md").symlink_to("target.md")
    new = commit(repo, "second")
    [change] = gitdiff.diff_commits(repo, old, new)
    assert change.status == "T"
    assert change.path == "link.md"
    assert change.mode == gitdiff.SYMLINK_MODE
    with BlobReader(repo) as reader:
        assert reader.read(change.blob or "") == b"target.md"


def test_rename_is_detected_with_score_stripped(repo: Path) -> None:
    body = "a note long enough for rename detection\n" * 5
    write(repo, "old/name.md", body)
    old = commit(repo, "first")
    (repo / "old" / "name.md").rename(repo / "new-name.md")
    new = commit(repo, "rename")
    [change] = gitdiff.diff_commits(repo, old, new)
    assert change == Change(
        "R", "new-name.md", "old/name.md", "100644", blob_of(repo, new, "new-name.md")
    )


def test_rename_with_edit_is_still_a_rename(repo: Path) -> None:
    body = "".join(f"line {i} of a long note\n" for i in range(40))
    write(repo, "a.md", body)
    old = commit(repo, "first")
    (repo / "a.md").unlink()
    write(repo, "b.md", body + "one more line\n")
    new = commit(repo, "rename and edit")
    [change] = gitdiff.diff_commits(repo, old, new)
    assert (change.status, change.old_path, change.path) == ("R", "a.md", "b.md")


def test_copy_is_an_add_by_default_and_c_with_copies(repo: Path) -> None:
    body = "".join(f"line {i} of the source note\n" for i in range(40))
    write(repo, "src.md", body)
    old = commit(repo, "first")
    write(repo, "copy.md", body)
    write(repo, "src.md", body + "edited\n")  # -C only considers modified files as sources
    new = commit(repo, "copy")
    plain = by_path(gitdiff.diff_commits(repo, old, new))
    assert plain["copy.md"].status == "A"
    assert plain["copy.md"].old_path is None
    copies = by_path(gitdiff.diff_commits(repo, old, new, copies=True))
    assert copies["copy.md"] == Change(
        "C", "copy.md", "src.md", "100644", blob_of(repo, new, "copy.md")
    )
    assert copies["src.md"].status == "M"


def test_diff_across_a_merge_commit(repo: Path) -> None:
    write(repo, "base.md", "base")
    base = commit(repo, "base")
    git(repo, "checkout", "-q", "-b", "topic")
    write(repo, "topic.md", "from topic")
    commit(repo, "topic work")
    git(repo, "checkout", "-q", "main")
    write(repo, "main.md", "from main")
    main_tip = commit(repo, "main work")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge topic", "topic")
    merge = gitdiff.head_commit(repo)
    assert merge is not None
    assert {c.path: c.status for c in gitdiff.diff_commits(repo, base, merge)} == {
        "topic.md": "A",
        "main.md": "A",
    }
    # Against the first parent only the merged-in side shows up.
    assert [c.path for c in gitdiff.diff_commits(repo, main_tip, merge)] == ["topic.md"]


def test_submodule_is_reported_with_its_mode(repo: Path) -> None:
    write(repo, "a.md", "a")
    old = commit(repo, "first")
    fake_commit = git(repo, "rev-parse", "HEAD").decode().strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{fake_commit},vendor/sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    new = git(repo, "rev-parse", "HEAD").decode().strip()
    [change] = gitdiff.diff_commits(repo, old, new)
    assert change == Change("A", "vendor/sub", None, gitdiff.SUBMODULE_MODE, fake_commit)
    assert gitdiff.ls_tree(repo, new)["vendor/sub"] == (gitdiff.SUBMODULE_MODE, fake_commit)


def test_diff_with_an_unknown_commit_raises_a_one_line_git_error(repo: Path) -> None:
    sha = commit(repo, "first")
    with pytest.raises(GitError, match="git diff-tree failed") as info:
        gitdiff.diff_commits(repo, "2" * 40, sha)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("rev", ["-p", "--output=/tmp/x", "", "a b"])
def test_revisions_that_look_like_options_are_refused(repo: Path, rev: str) -> None:
    sha = commit(repo, "first")
    with pytest.raises(GitError, match="invalid git revision"):
        gitdiff.diff_commits(repo, rev, sha)
    with pytest.raises(GitError, match="invalid git revision"):
        gitdiff.ls_tree(repo, rev)


def test_odd_file_names_round_trip(repo: Path) -> None:
    for i, name in enumerate(ODD_NAMES):
        write(repo, name, f"content {i}\n" * 20)
    first = commit(repo, "odd names")
    added = by_path(gitdiff.diff_commits(repo, None, first))
    assert set(added) == set(ODD_NAMES)
    tree = gitdiff.ls_tree(repo, first)
    assert set(tree) == set(ODD_NAMES)
    with BlobReader(repo) as reader:
        for i, name in enumerate(ODD_NAMES):
            assert tree[name] == ("100644", added[name].blob)
            assert reader.read(tree[name][1]) == f"content {i}\n".encode() * 20

    (repo / "line\nbreak.md").rename(repo / "renamed\n🚀.md")
    (repo / "-rf.md").unlink()
    write(repo, 'say "hi".md', "changed")
    second = commit(repo, "more odd names")
    changes = by_path(gitdiff.diff_commits(repo, first, second))
    assert changes["renamed\n🚀.md"].status == "R"
    assert changes["renamed\n🚀.md"].old_path == "line\nbreak.md"
    assert changes["-rf.md"].status == "D"
    assert changes['say "hi".md'].status == "M"


def test_non_utf8_file_name_round_trips_through_fsdecode(repo: Path) -> None:
    raw_name = b"latin1-caf\xe9.md"
    (repo / os.fsdecode(raw_name)).write_bytes(b"x")
    sha = commit(repo, "latin-1 name")
    [change] = gitdiff.diff_commits(repo, None, sha)
    assert os.fsencode(change.path) == raw_name
    assert os.fsencode(next(iter(gitdiff.ls_tree(repo, sha)))) == raw_name


# --- ls_tree ---------------------------------------------------------------------------


def test_ls_tree_is_recursive_with_modes(repo: Path) -> None:
    write(repo, "a.md", "a")
    write(repo, "x/y/z.md", "z")
    (repo / "link").symlink_to("a.md")
    sha = commit(repo, "tree")
    tree = gitdiff.ls_tree(repo, sha)
    assert tree == {
        "a.md": ("100644", blob_of(repo, sha, "a.md")),
        "x/y/z.md": ("100644", blob_of(repo, sha, "x/y/z.md")),
        "link": ("120000", blob_of(repo, sha, "link")),
    }


def test_ls_tree_is_independent_of_the_current_directory(repo: Path) -> None:
    write(repo, "a.md", "a")
    write(repo, "sub/b.md", "b")
    sha = commit(repo, "tree")
    assert set(gitdiff.ls_tree(repo / "sub", sha)) == {"a.md", "sub/b.md"}


# --- BlobReader ------------------------------------------------------------------------


def _blob(repo: Path, data: bytes) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"],
        input=data,
        check=True,
        capture_output=True,
    )
    return proc.stdout.decode().strip()


def test_blob_reader_reads_binary_and_multi_megabyte_blobs_in_sequence(repo: Path) -> None:
    binary = bytes(range(256)) * 7 + b"\n\0\r\n"
    large = os.urandom(1 << 20) * 6 + b"tail without newline"
    empty = b""
    ids = [_blob(repo, data) for data in (binary, large, empty)]
    with BlobReader(repo) as reader:
        assert reader.read(ids[0]) == binary
        assert reader.read(ids[1]) == large
        assert reader.read(ids[2]) == empty
        assert reader.read(ids[0]) == binary


def test_blob_reader_reads_a_50_megabyte_blob(repo: Path) -> None:
    large = os.urandom(1 << 20) * 50
    blob = _blob(repo, large)
    with BlobReader(repo) as reader:
        assert reader.read(blob) == large


def test_blob_reader_missing_blob_raises_and_stays_usable(repo: Path) -> None:
    good = _blob(repo, b"hello")
    with BlobReader(repo) as reader:
        with pytest.raises(GitError, match="missing"):
            reader.read("3" * 40)
        assert reader.read(good) == b"hello"


@pytest.mark.parametrize("bad", ["", "HEAD", "abc", "3" * 40 + "\n" + "4" * 40, "-h"])
def test_blob_reader_refuses_ids_that_are_not_full_shas(repo: Path, bad: str) -> None:
    with BlobReader(repo) as reader, pytest.raises(GitError, match="invalid blob id"):
        reader.read(bad)


def test_blob_reader_refuses_non_blob_objects(repo: Path) -> None:
    write(repo, "a.md", "a")
    sha = commit(repo, "first")
    blob = blob_of(repo, sha, "a.md")
    with BlobReader(repo) as reader:
        with pytest.raises(GitError, match="is a commit, not a blob"):
            reader.read(sha)
        assert reader.read(blob) == b"a"


def test_blob_reader_after_close_raises(repo: Path) -> None:
    blob = _blob(repo, b"x")
    reader = BlobReader(repo)
    reader.close()
    reader.close()
    with pytest.raises(GitError, match="closed"):
        reader.read(blob)


def test_blob_reader_outside_a_repository_raises_git_error(tmp_path: Path) -> None:
    with BlobReader(tmp_path) as reader, pytest.raises(GitError, match="cannot read blob"):
        reader.read("3" * 40)


# --- parse_diff_tree (pure) --------------------------------------------------------------

SHA_A = "a" * 40
SHA_B = "b" * 40
ZERO = "0" * 40


def rec(old_mode: str, new_mode: str, old: str, new: str, status: str, *paths: str) -> bytes:
    header = f":{old_mode} {new_mode} {old} {new} {status}".encode()
    return b"\0".join([header, *(os.fsencode(p) for p in paths)]) + b"\0"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"", [], id="empty"),
        pytest.param(b"\n", [], id="blank-file"),
        pytest.param(
            rec("000000", "100644", ZERO, SHA_B, "A", "new.md"),
            [Change("A", "new.md", None, "100644", SHA_B)],
            id="add",
        ),
        pytest.param(
            rec("100644", "100644", SHA_A, SHA_B, "M", "m.md"),
            [Change("M", "m.md", None, "100644", SHA_B)],
            id="modify",
        ),
        pytest.param(
            rec("100644", "120000", SHA_A, SHA_B, "T", "t.md"),
            [Change("T", "t.md", None, "120000", SHA_B)],
            id="type-change",
        ),
        pytest.param(
            rec("100644", "000000", SHA_A, ZERO, "D", "d.md"),
            [Change("D", "d.md", None, "000000", None)],
            id="delete",
        ),
        pytest.param(
            rec("100644", "100644", SHA_A, SHA_A, "R100", "old.md", "new.md"),
            [Change("R", "new.md", "old.md", "100644", SHA_A)],
            id="rename-100",
        ),
        pytest.param(
            rec("100644", "100755", SHA_A, SHA_B, "R087", "o.md", "n.md"),
            [Change("R", "n.md", "o.md", "100755", SHA_B)],
            id="rename-with-edit",
        ),
        pytest.param(
            rec("100644", "100644", SHA_A, SHA_A, "C075", "src.md", "dst.md"),
            [Change("C", "dst.md", "src.md", "100644", SHA_A)],
            id="copy",
        ),
        pytest.param(
            rec("000000", "160000", ZERO, SHA_B, "A", "sub"),
            [Change("A", "sub", None, "160000", SHA_B)],
            id="submodule",
        ),
        pytest.param(
            SHA_A.encode() + b"\0" + rec("000000", "100644", ZERO, SHA_B, "A", "x.md"),
            [Change("A", "x.md", None, "100644", SHA_B)],
            id="leading-commit-sha",
        ),
        pytest.param(
            ("c" * 64).encode() + b"\0" + rec("000000", "100644", "0" * 64, "d" * 64, "A", "x"),
            [Change("A", "x", None, "100644", "d" * 64)],
            id="sha256-commit-line",
        ),
        pytest.param(
            rec("000000", "100644", ZERO, SHA_B, "A", ":1 2 3 4 A")
            + rec("100644", "100644", SHA_A, SHA_B, "R050", "a\nb", "-"),
            [
                Change("A", ":1 2 3 4 A", None, "100644", SHA_B),
                Change("R", "-", "a\nb", "100644", SHA_B),
            ],
            id="paths-that-look-like-records",
        ),
        pytest.param(
            rec("000000", "100644", ZERO, SHA_B, "A", "\udce9t\u00e9 🚀 中文.md"),
            [Change("A", "\udce9t\u00e9 🚀 中文.md", None, "100644", SHA_B)],
            id="undecodable-and-unicode-path",
        ),
    ],
)
def test_parse_diff_tree_records(raw: bytes, expected: list[Change]) -> None:
    assert parse_diff_tree(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        pytest.param(b":000000 100644 0000 bbbb A\tnew.md\n", "not NUL-separated", id="without-z"),
        pytest.param(b":000000 100644 0000 bbbb A\0", "truncated", id="missing-path"),
        pytest.param(b":100644 100644 aaaa bbbb R100\0old\0", "truncated", id="rename-one-path"),
        pytest.param(b"::100644 100644 100644 a b c MM\0f\0", "combined", id="combined-merge"),
        pytest.param(b":100644 100644 aaaa bbbb U\0f\0", "unsupported", id="unmerged"),
        pytest.param(b":100644 100644 aaaa bbbb X\0f\0", "unsupported", id="unknown"),
        pytest.param(b":garbage\0f\0", "malformed", id="malformed-header"),
        pytest.param(b"not a record\0", "unexpected", id="junk"),
    ],
)
def test_parse_diff_tree_rejects_bad_input_with_git_error(raw: bytes, message: str) -> None:
    with pytest.raises(GitError, match=message):
        parse_diff_tree(raw)


def test_parse_diff_tree_accepts_saved_single_commit_output(repo: Path) -> None:
    write(repo, "a.md", "a\n" * 30)
    write(repo, "b.md", "b")
    first = commit(repo, "first")
    (repo / "a.md").rename(repo / "c.md")
    write(repo, "b.md", "bb")
    second = commit(repo, "second")

    root_raw = git(repo, "diff-tree", "-r", "-z", "-M", "--root", "HEAD~1")
    assert root_raw.startswith(first.encode() + b"\0")
    assert parse_diff_tree(root_raw) == gitdiff.diff_commits(repo, None, first)

    single_raw = git(repo, "diff-tree", "-r", "-z", "-M", "HEAD")
    assert single_raw.startswith(second.encode() + b"\0")
    two_raw = git(repo, "diff-tree", "-r", "-z", "-M", "HEAD~1", "HEAD")
    expected = gitdiff.diff_commits(repo, first, second)
    assert parse_diff_tree(single_raw) == parse_diff_tree(two_raw) == expected
    assert {c.status for c in expected} == {"R", "M"}


def test_sha256_repository_first_commit(tmp_path: Path) -> None:
    root = tmp_path / "sha256"
    root.mkdir()
    git(root, "init", "-q", "--object-format=sha256")
    write(root, "a.md", "a")
    sha = commit(root, "first")
    assert len(gitdiff.empty_tree(root)) == 64
    [change] = gitdiff.diff_commits(root, None, sha)
    assert change == Change("A", "a.md", None, "100644", blob_of(root, sha, "a.md"))
    with BlobReader(root) as reader:
        assert reader.read(change.blob or "") == b"a"


def test_a_diff_is_read_from_the_commits_alone_whatever_the_staging_area_holds(
    repo: Path,
) -> None:
    # git diff-tree reads the index at start-up (5 ms of 7 in a 50,000-note vault) though its
    # output never depends on it; the ingester points it at none, so a staging area that is
    # damaged or mid-rewrite neither slows nor stops a catch-up.
    write(repo, "a.md", "a")
    old = commit(repo, "first")
    write(repo, "a.md", "b")
    write(repo, "renamed.md", "some longer text that is kept whole across a rename")
    new = commit(repo, "second")
    want = gitdiff.diff_commits(repo, old, new, note_extensions=[".md"])
    (repo / ".git" / "index").write_bytes(b"not an index")
    assert gitdiff.diff_commits(repo, old, new, note_extensions=[".md"]) == want
    assert gitdiff.diff_commits(repo, old, new) == want
    assert {c.path for c in want} == {"a.md", "renamed.md"}
