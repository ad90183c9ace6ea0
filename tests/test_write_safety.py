"""Agent writes that can never cost the user a file or a commit (issue 43): a target git would
not show (ignored, untracked, skip-worktree, assume-unchanged), a folder that is a file, and a
user's commit in progress (index.lock held, or a `git commit` running) are refused before
anything moves; HEAD, the index and every file stay byte-identical after each refusal. Through
`vaultmem remember`, and, in the property tests at the end, through two real `vaultmem
remember` processes racing the user's own edits, staging and commits (one with its editor held
open)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import git
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from vaultmem import vaults
from vaultmem.cli import cli


def new_vault(r: Path) -> Path:
    """A registered vault (agent writes go only to those) that ignores drafts/."""
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / ".gitignore").write_text("drafts/\n")
    (r / "a.md").write_text("# A\n\nuser note\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "init")
    vaults.register(r)
    return r


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    r = new_vault(tmp_path / "vault")
    monkeypatch.chdir(r)
    return r


def state(repo: Path) -> tuple[str, str, dict[str, str]]:
    """HEAD, the index (as git lists it, with stat flags) and every file's bytes."""
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return git(repo, "rev-parse", "HEAD"), git(repo, "ls-files", "-s", "-v"), files


def remember(repo: Path, title: str, *args: str) -> object:
    return CliRunner().invoke(
        cli, ["remember", title, "--vault", str(repo), *args, "--file", "-"], input="agent text\n"
    )


def test_an_ignored_file_is_never_overwritten(repo: Path) -> None:
    (repo / "drafts").mkdir()
    (repo / "drafts/plan.md").write_text("my private plan\n")
    before = state(repo)
    r = remember(repo, "plan", "--folder", "drafts")
    assert r.exit_code == 9 and "ignored" in r.output and "Traceback" not in r.output
    assert state(repo) == before
    assert (repo / "drafts/plan.md").read_text() == "my private plan\n"


def test_an_untracked_file_where_the_folder_would_be_moves_nothing(repo: Path) -> None:
    (repo / "notes").write_text("an untracked file named like the folder\n")
    before = state(repo)
    r = remember(repo, "locked note", "--folder", "notes")
    assert r.exit_code == 9 and "is a file where the note's folder would be" in r.output
    assert state(repo) == before


@pytest.mark.parametrize("mark", ["--skip-worktree", "--assume-unchanged"])
def test_a_file_git_is_told_not_to_look_at_is_refused(repo: Path, mark: str) -> None:
    r = remember(repo, "kept")
    assert r.exit_code == 0, r.output
    path = repo / "agent/kept.md"
    git(repo, "update-index", mark, "agent/kept.md")
    path.write_text("the user's edit, hidden from git status\n")
    before = state(repo)
    blob = git(repo, "rev-parse", "HEAD:agent/kept.md").strip()
    r = remember(repo, "kept", "--expect-blob", blob)
    assert r.exit_code == 9 and mark.lstrip("-") in r.output
    assert state(repo) == before


def test_a_commit_in_progress_makes_the_write_refuse_with_nothing_moved(repo: Path) -> None:
    lock = repo / ".git/index.lock"
    lock.write_bytes(b"")  # a user's `git commit` with its editor open holds this
    try:
        before = state(repo)
        r = remember(repo, "locked note")
        assert r.exit_code == 9 and "index.lock" in r.output
        assert state(repo) == before and not (repo / "agent").exists()
    finally:
        lock.unlink()
    # ...and the user's next commit deletes nothing of the agent's: there is nothing of it.
    git(repo, "commit", "-q", "--allow-empty", "-m", "user")
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize("extra", [[], ["-a"]])
def test_a_users_commit_with_its_editor_open_is_never_aborted(
    repo: Path, tmp_path: Path, extra: list[str]
) -> None:
    # A plain `git commit` lets go of index.lock before it opens the editor (`commit -a` keeps
    # it), then moves HEAD expecting the value it read first: an agent commit meanwhile would
    # make it fail with "cannot lock ref 'HEAD'".
    (repo / "a.md").write_text("# A\n\nthe user's edit\n")
    git(repo, "add", "a.md")
    opened, release = tmp_path / "opened", tmp_path / "release"
    editor = tmp_path / "editor.sh"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    env = {
        **os.environ,
        "GIT_EDITOR": str(editor),
        "VM_TEST_OPENED": str(opened),
        "VM_TEST_RELEASE": str(release),
        "VM_TEST_MESSAGE": "user commit",
    }
    user = subprocess.Popen(["git", "commit", *extra], cwd=repo, env=env, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: opened.exists() or user.poll() is not None, "the user's editor")
        before = state(repo)
        r = remember(repo, "while committing")
        assert r.exit_code == 9 and "in progress" in r.output, r.output
        assert state(repo) == before
    finally:
        release.touch()
        _, err = user.communicate()
    assert user.returncode == 0, err
    assert git(repo, "log", "-1", "--format=%s") == "user commit\n"
    assert remember(repo, "after the commit").exit_code == 0


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        ([b"git", b"commit"], "."),
        ([b"/usr/bin/git", b"-c", b"user.name=x", b"commit", b"-a"], "."),
        ([b"git", b"-C", b"vault", b"-C", b"sub", b"commit", b"-m", b"x"], "vault/sub"),
        ([b"git", b"commit-tree", b"abc"], None),
        ([b"git", b"-c", b"commit=1", b"status"], None),
        ([b"vim", b"commit"], None),
        ([], None),
    ],
)
def test_a_git_commit_is_told_from_its_command_line(argv: list[bytes], where: str | None) -> None:
    from vaultmem.index.gitwrite import _git_commit_dir

    assert _git_commit_dir(argv) == where


def test_an_agent_note_is_created_with_the_users_umask(repo: Path) -> None:
    old = os.umask(0o022)
    try:
        r = remember(repo, "shared note")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE((repo / "agent/shared-note.md").stat().st_mode) == 0o644
    assert git(repo, "status", "--porcelain") == ""


def test_remember_never_writes_into_an_unregistered_repository(repo: Path, tmp_path: Path) -> None:
    code = tmp_path / "code-project"
    code.mkdir()
    git(code, "init", "-q", "-b", "main")
    (code / "NOTES.md").write_text("x\n")
    git(code, "add", ".")
    git(code, "commit", "-q", "-m", "code")
    before = state(code)
    r = CliRunner().invoke(
        cli, ["remember", "t", "--vault", str(code), "--file", "-"], input="agent text\n"
    )
    assert r.exit_code != 0 and "not a registered vault" in r.output
    assert state(code) == before
    os.chdir(code)  # the current directory's repository is not a vault either
    r = CliRunner().invoke(cli, ["remember", "t", "--file", "-"], input="agent text\n")
    assert r.exit_code == 0, r.output
    assert state(code) == before and (repo / "agent/t.md").is_file()  # the default vault


@pytest.mark.parametrize("title", ["Rollback policy\x01", "two\nlines", "bad \udcff bytes"])
def test_a_title_that_is_not_plain_text_gets_one_sentence_and_nothing_written(
    repo: Path, title: str
) -> None:
    before = state(repo)
    r = remember(repo, title, "--folder", "notes")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and "title" in r.output
    assert state(repo) == before
    r = remember(repo, "fine", "--folder", "notes", "--tag", "ops\x01")
    assert r.exit_code == 2 and "tag" in r.output and state(repo) == before


def test_provenance_survives_any_session_or_project_text() -> None:
    from datetime import UTC, datetime

    from vaultmem.agent.provenance import note_source
    from vaultmem.agent.write import Provenance, compose
    from vaultmem.index.markdown import front_matter

    odd = 'x\x01 "q" : [y] # z\u2028'
    data = compose(
        "Rollback policy",
        "text",
        ["ops"],
        Provenance(odd, odd),
        existing=None,
        append=False,
        now=datetime(2026, 12, 5, tzinfo=UTC),
    )
    fm = front_matter(data.decode())
    assert fm["author"] == "agent" and fm["session"] == odd and fm["tags"] == ["ops"]
    assert note_source("notes/rollback-policy.md", fm, "agent").agent


def test_a_write_tries_again_when_head_moves_under_it(repo: Path, monkeypatch) -> None:  # noqa: ANN001
    from vaultmem.index import gitwrite

    real = gitwrite._path_is_dirty
    moved: list[str] = []

    def user_commits_meanwhile(root: Path, path: str) -> bool:
        # The user's own commit lands between the write's reading HEAD and swapping it.
        if not moved:
            (repo / "mine.md").write_text("user's note\n")
            git(repo, "add", "mine.md")
            git(repo, "commit", "-q", "-m", "user commit")
            moved.append(git(repo, "rev-parse", "HEAD").strip())
        return real(root, path)

    monkeypatch.setattr(gitwrite, "_path_is_dirty", user_commits_meanwhile)
    r = remember(repo, "raced")
    assert r.exit_code == 0, r.output
    assert git(repo, "rev-parse", "HEAD~1").strip() == moved[0]  # on top of the user's commit
    assert git(repo, "log", "--format=%s", "-2").split("\n")[:2] == [
        "remember: raced",
        "user commit",
    ]
    assert git(repo, "status", "--porcelain") == ""


def test_a_file_made_where_the_folder_goes_after_the_check_leaves_nothing_landed(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultmem.index import gitwrite

    real = gitwrite._path_is_dirty
    before: list[tuple[str, str, dict[str, str]]] = []

    def user_makes_a_file_meanwhile(root: Path, path: str) -> bool:
        # After the folder was checked free, the user saves a file named like it.
        if not before:
            (repo / "notes").write_text("made meanwhile\n")
            before.append(state(repo))
        return real(root, path)

    monkeypatch.setattr(gitwrite, "_path_is_dirty", user_makes_a_file_meanwhile)
    r = remember(repo, "late", "--folder", "notes")
    assert r.exit_code == 9 and "could not be written" in r.output, r.output
    assert "Traceback" not in r.output and str(repo) not in r.output
    assert state(repo) == before[0]  # HEAD back where it was, index and files untouched


def _hook(repo: Path, name: str, script: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\n" + script)
    hook.chmod(0o755)


def test_the_users_pre_commit_hook_sees_and_can_refuse_the_agents_commit(repo: Path) -> None:
    _hook(
        repo,
        "pre-commit",
        'git diff --cached --name-only >> "$(git rev-parse --git-dir)/seen"\n'
        'if git diff --cached | grep -q forbidden; then echo "scanner: forbidden word"; exit 1; fi\n',
    )
    r = remember(repo, "fine")
    assert r.exit_code == 0, r.output
    assert "agent/fine.md" in (repo / ".git/seen").read_text()  # it ran on the agent's change
    before = state(repo)
    r = CliRunner().invoke(
        cli, ["remember", "bad", "--vault", str(repo), "--file", "-"], input="forbidden text\n"
    )
    assert r.exit_code == 9 and "pre-commit hook refused" in r.output and "scanner" in r.output
    assert state(repo) == before


def test_the_users_commit_msg_hook_runs_on_the_agents_message(repo: Path) -> None:
    _hook(repo, "commit-msg", 'echo "Reviewed-by: hook" >> "$1"\n')
    r = remember(repo, "noted")
    assert r.exit_code == 0, r.output
    assert "Reviewed-by: hook" in git(repo, "log", "-1", "--format=%B")
    _hook(repo, "commit-msg", "echo 'ticket id missing' >&2; exit 1\n")
    before = state(repo)
    r = remember(repo, "second")
    assert r.exit_code == 9 and "ticket id missing" in r.output and state(repo) == before


@pytest.fixture
def gnupg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A GnuPG home of the test's own; its agent is stopped afterwards, failure or not."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(home))
    try:
        yield home
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], capture_output=True, check=False)


def test_with_commit_gpgsign_the_agents_commit_is_signed_or_refused(
    repo: Path, gnupg: Path
) -> None:
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "Vault User <user@example.com>",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    git(repo, "config", "user.signingkey", "user@example.com")
    git(repo, "config", "commit.gpgsign", "true")
    r = remember(repo, "signed note")
    assert r.exit_code == 0, r.output
    assert git(repo, "log", "-1", "--format=%G?").strip() in {"G", "U"}  # a good signature
    # Signing that cannot work: refused, naming the setting, nothing moved.
    git(repo, "config", "gpg.program", "false")
    before = state(repo)
    r = remember(repo, "unsigned note")
    assert r.exit_code == 9 and "commit.gpgsign" in r.output and state(repo) == before


# --- property: a random mix of the user's work and agent writes ----------------------------------

USER_OPS = st.sampled_from(
    ["edit", "stage", "commit", "ignored", "untracked", "lock", "unlock", "skip"]
)
AGENT_OPS = st.tuples(
    st.sampled_from(["plan", "notes", "a", "kept"]), st.sampled_from([None, "drafts", "notes"])
)


def _user_files(repo: Path) -> dict[str, str]:
    """Every file of the user's (not the agent's notes) with its bytes' digest."""
    return {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file()
        and ".git" not in p.relative_to(repo).parts
        and p.relative_to(repo).parts[0] != "agent"
    }


def _user_index(repo: Path) -> list[str]:
    return [line for line in git(repo, "ls-files", "-s").splitlines() if "\tagent/" not in line]


@settings(max_examples=10, deadline=None)
@given(ops=st.lists(st.one_of(USER_OPS, AGENT_OPS), min_size=4, max_size=12))
def test_agent_writes_never_change_a_byte_of_the_users_work(tmp_path_factory, ops) -> None:  # noqa: ANN001
    repo = new_vault(tmp_path_factory.mktemp("prop") / "vault")
    lock = repo / ".git/index.lock"
    n = 0
    for op in ops:
        n += 1
        if op == "edit":
            with (repo / "a.md").open("a") as fh:
                fh.write(f"edit {n}\n")
        elif op == "stage" and not lock.exists():
            git(repo, "add", "a.md")
        elif op == "commit" and not lock.exists():
            git(repo, "commit", "-q", "--allow-empty", "-m", f"user {n}")
        elif op == "ignored":
            (repo / "drafts").mkdir(exist_ok=True)
            (repo / "drafts/plan.md").write_text(f"private {n}\n")
        elif op == "untracked" and not (repo / "notes").is_dir():
            (repo / "notes").write_text(f"untracked {n}\n")  # a file where a folder may go
        elif op == "lock":
            lock.write_bytes(b"")
        elif op == "unlock":
            lock.unlink(missing_ok=True)
        elif op == "skip" and not lock.exists() and (repo / "agent/kept.md").exists():
            git(repo, "update-index", "--skip-worktree", "agent/kept.md")
        elif isinstance(op, tuple):
            title, folder = op
            before = (git(repo, "rev-parse", "HEAD").strip(), _user_files(repo), _user_index(repo))
            args = ["--folder", folder] if folder else []
            blob = subprocess.run(
                [
                    "git",
                    "-C",
                    str(repo),
                    "rev-parse",
                    "-q",
                    "--verify",
                    f"HEAD:{folder or 'agent'}/{title}.md",
                ],
                capture_output=True,
                text=True,
            ).stdout.strip()
            args += ["--expect-blob", blob] if blob else []
            r = remember(repo, title, *args)
            head = git(repo, "rev-parse", "HEAD").strip()
            assert r.exit_code in (0, 9, 1), r.output
            assert "Traceback" not in r.output
            # Nothing of the user's changed, whatever happened; HEAD moved only on success,
            # and then on top of the user's last commit.
            assert _user_files(repo) == before[1] or (r.exit_code == 0 and folder)
            if r.exit_code == 0 and folder:
                changed = {
                    k
                    for k in set(before[1]) | set(_user_files(repo))
                    if before[1].get(k) != _user_files(repo).get(k)
                }
                assert changed <= {f"{folder}/{title}.md"}  # only the note it wrote
            assert (head != before[0]) == (r.exit_code == 0)
            if r.exit_code == 0:
                assert git(repo, "rev-parse", "HEAD~1").strip() == before[0]
            else:
                assert _user_index(repo) == before[2]
    lock.unlink(missing_ok=True)


# --- property: the user's work while two `vaultmem remember` processes write -----------------

# The user's side: edits, staging, commits (some with the message editor held open, as plain
# `git commit` and as `git commit -a`, which holds index.lock while the editor is open), an
# ignored file and an untracked file where an agent folder goes, and index.lock held by hand.
CONCURRENT_USER_OPS = st.sampled_from(
    ["edit", "stage", "commit", "editor", "editor -a", "ignored", "untracked", "lock"]
)
# One agent call: title, folder, --append.
AGENT_CALL = st.tuples(
    st.sampled_from(["plan", "a", "kept"]),
    st.sampled_from([None, "drafts", "notes"]),
    st.booleans(),
)
EDITOR = """#!/bin/sh
# A user's message editor, held open until the test releases it.
touch "$VM_TEST_OPENED"
while [ ! -e "$VM_TEST_RELEASE" ]; do sleep 0.05; done
echo "$VM_TEST_MESSAGE" > "$1"
"""
# A bound on any one wait for an event, so a defect fails the test instead of hanging it: not a
# claim about speed (each wait normally ends in well under a second).
EVENT_BOUND = 60.0


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait until `condition()` holds (polling: these events are files and processes)."""
    deadline = time.monotonic() + EVENT_BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


def _cli_env() -> dict[str, str]:
    """This test's environment (registry, home, git identity) for a real `vaultmem` process,
    which imports the vaultmem under test whatever is installed."""
    import vaultmem

    src = str(Path(vaultmem.__file__).resolve().parents[1])
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }


@dataclass
class AgentCall:
    lane: int
    title: str
    folder: str | None
    append: bool
    token: str
    returncode: int | None = None
    out: str = ""
    err: str = ""


class Agents:
    """Two lanes, each a process of the real CLI after another: the two run concurrently."""

    def __init__(self, repo: Path, lanes: list[list[tuple[str, str | None, bool]]]) -> None:
        self.repo = repo
        self.calls = [
            [AgentCall(n, t, f, a, f"agent-token-{n}-{i}") for i, (t, f, a) in enumerate(lane)]
            for n, lane in enumerate(lanes)
        ]
        self.done = threading.Condition()
        self.finished = 0
        self.procs: list[subprocess.Popen[str]] = []
        self.stopping = False
        self.threads = [threading.Thread(target=self._run, args=(c,)) for c in self.calls]

    def _run(self, calls: list[AgentCall]) -> None:
        env = _cli_env()
        for call in calls:
            args = ["remember", call.title, "--vault", str(self.repo), "--json", "--file", "-"]
            args += ["--folder", call.folder] if call.folder else []
            args += ["--append"] if call.append else []
            with self.done:
                if self.stopping:
                    return
                proc = subprocess.Popen(
                    [sys.executable, "-m", "vaultmem", *args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                self.procs.append(proc)
            call.out, call.err = proc.communicate(f"agent text {call.token}\n")
            call.returncode = proc.returncode
            with self.done:
                self.finished += 1
                self.done.notify_all()

    def total(self) -> int:
        return sum(len(c) for c in self.calls)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wait_next(self) -> None:
        """Until one more call has ended (or all have), so the state the user holds meets one."""
        with self.done:
            seen = self.finished
            if not self.done.wait_for(
                lambda: self.finished > seen or self.finished == self.total(), EVENT_BOUND
            ):
                raise AssertionError("gave up waiting for an agent call to end")

    def stop(self) -> None:
        """Wait for every call, or (on failure) kill whatever still runs."""
        with self.done:
            self.stopping = True
            procs = list(self.procs)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for t in self.threads:
            t.join()

    def join(self) -> None:
        for t in self.threads:
            t.join(EVENT_BOUND)
            assert not t.is_alive(), "an agent call did not end"


class User:
    """The user's side, and a model of what the user's files and index must hold afterwards."""

    def __init__(self, repo: Path, agents: Agents, tmp: Path) -> None:
        self.repo, self.agents, self.tmp = repo, agents, tmp
        self.files = {
            path: (repo / path).read_bytes() for path in (".gitignore", "a.md")
        }  # what the user wrote, by path
        self.index = {path: self._blob(data) for path, data in self.files.items()}
        self.commits: list[str] = []  # messages of the user's commits that git reported made
        self.aborted: list[str] = []  # the user's commits git refused (with why)
        self.editor: subprocess.Popen[bytes] | None = None
        self.releases: list[Path] = []  # each editor's release file
        self.lock_fd: int | None = None
        self.n = 0
        self.editor_script = tmp / "editor.sh"
        self.editor_script.write_text(EDITOR)
        self.editor_script.chmod(0o755)

    def _blob(self, data: bytes) -> str:
        return git(self.repo, "hash-object", "--stdin", input=data).strip()

    def git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """A git command as a user runs it: when another git process holds index.lock (here,
        an agent write for a moment), they run it again."""
        for _ in range(1000):
            proc = subprocess.run(["git", *args], cwd=self.repo, capture_output=True)
            if proc.returncode == 0 or b"index.lock" not in proc.stderr:
                return proc
            time.sleep(0.01)
        raise AssertionError(f"git {args[0]} never got index.lock: {proc.stderr!r}")

    def do(self, op: str) -> None:
        self.n += 1
        n, repo = self.n, self.repo
        if op == "edit":
            self.files["a.md"] += f"edit {n}\n".encode()
            (repo / "a.md").write_bytes(self.files["a.md"])
        elif op == "stage":
            assert self.git("add", "a.md").returncode == 0
            self.index["a.md"] = self._blob(self.files["a.md"])
        elif op == "commit":
            self._committed(self.git("commit", "-q", "--allow-empty", "-m", f"user {n}"), n)
        elif op in ("editor", "editor -a"):
            self._commit_with_editor_open(n, ["-a"] if op == "editor -a" else [])
        elif op == "ignored":
            self.files["drafts/plan.md"] = f"private {n}\n".encode()
            (repo / "drafts").mkdir(exist_ok=True)
            (repo / "drafts/plan.md").write_bytes(self.files["drafts/plan.md"])
        elif op == "untracked" and "notes" not in self.files and not (repo / "notes").exists():
            # An untracked file where an agent folder goes (the agent may take the name first).
            with contextlib.suppress(FileExistsError, IsADirectoryError):
                with open(repo / "notes", "xb") as fh:
                    fh.write(f"untracked {n}\n".encode())
                self.files["notes"] = f"untracked {n}\n".encode()
        elif op == "lock":
            # The user's own git holding index.lock (taken as git takes it) while a call runs.
            lock = repo / ".git/index.lock"
            _wait_for(lambda: self._take(lock), "index.lock to be free")
            try:
                self.agents.wait_next()
            finally:
                self.release_lock()

    def _take(self, lock: Path) -> bool:
        try:
            self.lock_fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        return True

    def release_lock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
            lock = self.repo / ".git/index.lock"
            assert lock.exists(), "the user's index.lock was taken from them"
            lock.unlink()

    def _committed(self, proc: subprocess.CompletedProcess[bytes], n: int) -> None:
        if proc.returncode == 0:
            self.commits.append(f"user {n}")
        else:
            self.aborted.append(f"user {n}: {proc.stderr.decode(errors='replace').strip()}")

    def _commit_with_editor_open(self, n: int, extra: list[str]) -> None:
        opened, release = self.tmp / f"opened-{n}", self.tmp / f"release-{n}"
        self.releases.append(release)
        env = {
            **os.environ,
            "GIT_EDITOR": str(self.editor_script),
            "VM_TEST_OPENED": str(opened),
            "VM_TEST_RELEASE": str(release),
            "VM_TEST_MESSAGE": f"user {n}",
        }
        for _ in range(1000):
            self.editor = subprocess.Popen(
                ["git", "commit", "--allow-empty", *extra],
                cwd=self.repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            editor = self.editor
            _wait_for(lambda e=editor: opened.exists() or e.poll() is not None, "the editor")
            if opened.exists():
                break
            out, err = editor.communicate()
            if b"index.lock" not in err:  # git refused to start for another reason
                self._committed(subprocess.CompletedProcess([], editor.returncode, out, err), n)
                return
            time.sleep(0.01)  # an agent held index.lock for a moment: the user tries again
        else:
            raise AssertionError("git commit never got index.lock")
        try:
            self.agents.wait_next()  # an agent call runs its course while the editor is open
        finally:
            release.touch()
        out, err = self.editor.communicate()
        self._committed(subprocess.CompletedProcess([], self.editor.returncode, out, err), n)
        if extra:  # `commit -a` staged the user's edits
            self.index["a.md"] = self._blob(self.files["a.md"])

    def stop(self) -> None:
        """Whatever the user still holds is let go, failure or not (an editor is released
        rather than left waiting, should its git have been killed)."""
        for release in self.releases:
            release.touch()
        self.release_lock()
        if self.editor is not None and self.editor.poll() is None:
            self.editor.kill()
            self.editor.communicate()


# No shrinking: each example runs real processes for seconds, and a failure shown as found
# keeps the suite bounded.
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(
    user_ops=st.lists(CONCURRENT_USER_OPS, min_size=3, max_size=6),
    lanes=st.lists(st.lists(AGENT_CALL, min_size=1, max_size=2), min_size=2, max_size=2),
)
def test_two_agent_processes_never_change_a_byte_of_the_users_concurrent_work(
    tmp_path_factory,  # noqa: ANN001
    user_ops: list[str],
    lanes: list[list[tuple[str, str | None, bool]]],
) -> None:
    tmp = tmp_path_factory.mktemp("concurrent")
    repo = new_vault(tmp / "vault")
    agents = Agents(repo, lanes)
    user = User(repo, agents, tmp)
    try:
        agents.start()
        for op in user_ops:
            user.do(op)
        agents.join()
    finally:
        try:
            user.stop()
        finally:
            agents.stop()
    calls = [call for lane in agents.calls for call in lane]
    landed = {}
    for call in calls:
        assert call.returncode in (0, 9), (call, call.err)
        assert "Traceback" not in call.err
        if call.returncode == 0:
            landed[call.token] = json.loads(call.out)
    # No user commit lost, and none refused: every one git reported made is in HEAD's history.
    assert user.aborted == []
    history = git(repo, "log", "--format=%B%x00", "HEAD")
    for message in user.commits:
        assert f"{message}\n" in history
    # Each exit code matches what git shows: 0 <=> its commit is in HEAD's history with its
    # note; non-zero <=> nothing of it is in any commit, the index or the work tree.
    log = git(repo, "log", "-p", "HEAD")
    head = git(repo, "rev-parse", "HEAD").strip()
    agent_paths = {w["path"] for w in landed.values()}
    for call in calls:
        if call.token in landed:
            w = landed[call.token]
            assert (
                subprocess.run(
                    ["git", "merge-base", "--is-ancestor", w["commit"], head], cwd=repo
                ).returncode
                == 0
            ), call
            assert git(repo, "rev-parse", f"{w['commit']}:{w['path']}").strip() == w["blob"]
            assert call.token in git(repo, "show", f"{w['commit']}:{w['path']}")
        else:
            assert call.token not in log, call
            for path in agent_paths:
                assert call.token not in (repo / path).read_text(), call
    # The agent's notes as committed: HEAD, the index and the work tree agree on them.
    for path in agent_paths:
        assert git(repo, "status", "--porcelain", "--ignored", "--", path) == "", path
    # Not a byte of the user's files or index entries changed.
    on_disk = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in repo.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    expected = {path: hashlib.sha256(data).hexdigest() for path, data in user.files.items()}
    assert {p: d for p, d in on_disk.items() if p not in agent_paths} == expected
    index = {
        line.split("\t", 1)[1]: line.split()[1] for line in git(repo, "ls-files", "-s").splitlines()
    }
    assert {p: b for p, b in index.items() if p not in agent_paths} == user.index
