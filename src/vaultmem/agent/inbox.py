"""`vaultmem inbox`: the notes the agent wrote since the user last looked, for review.

Design decision: the inbox is read from git history, not from the database: the Markdown in
git is the source of truth, and an agent's write is a commit with the agent's author
(`index.gitwrite.AGENT_EMAIL`) and the `Vaultmem-Agent:` trailer. Either mark makes a commit the
agent's. A note the user has since removed (`git rm`, `git revert`) has left the inbox with it.
What the user has seen is the HEAD they last marked (`inbox done`), kept in the user's own
vaultmem home (never in the repository); when that commit is no longer an ancestor of HEAD (a
rewritten history), the time of the marking decides instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import GitError
from ..files import atomic_write, read_regular
from ..index import gitdiff
from ..index.gitwrite import AGENT_EMAIL, TRAILER, WriteRefused, Written
from ..index.markdown import front_matter

STATE_FILE = "inbox-seen.json"
# How far back the first look goes: enough for any review, bounded for a huge history.
MAX_COMMITS = 5000


@dataclass(frozen=True)
class InboxItem:
    """One note the agent wrote (or changed) since the user last looked: its latest agent
    commit, and how many agent commits touched it in that span."""

    path: str
    title: str
    session: str | None
    project: str | None
    commit: str
    date: str
    subject: str
    writes: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Seen:
    head: str
    at: str  # ISO 8601, UTC


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def _key(root: Path) -> str:
    return str(root.resolve())


def load_seen(home: Path, root: Path) -> Seen | None:
    raw = read_regular(state_path(home), below=home)
    try:
        data = json.loads(raw or b"{}")
        entry = data.get(_key(root)) if isinstance(data, dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("head"), str):
            return Seen(entry["head"], str(entry.get("at") or ""))
    except ValueError:
        pass
    return None


def mark_seen(home: Path, root: Path, head: str, now: datetime | None = None) -> Seen:
    """Record `head` as what the user has reviewed in the vault at `root`."""
    raw = read_regular(state_path(home), below=home)
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    seen = Seen(head, (now or datetime.now(UTC)).isoformat(timespec="seconds"))
    data[_key(root)] = asdict(seen)
    atomic_write(state_path(home), json.dumps(data, indent=2) + "\n", below=home)
    return seen


def _git(root: Path, *args: str) -> bytes:
    proc = subprocess.run(
        ["git", "-c", "core.quotepath=off", "-C", str(root), *args],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git {args[0]} failed: {detail[-1] if detail else proc.returncode}")
    return proc.stdout


def _agent_commits(root: Path, head: str, seen: Seen | None) -> list[tuple[str, str, str]]:
    """(sha, author date, subject) of the agent's commits since `seen`, newest first."""
    span = [head]
    after = None
    if seen is not None:
        if gitdiff.commit_exists(root, seen.head) and gitdiff.is_ancestor(root, seen.head, head):
            span = [f"{seen.head}..{head}"]
        elif seen.at:
            after = datetime.fromisoformat(seen.at).timestamp()
            span = [f"--since={seen.at}", head]
    out = _git(
        root,
        "log",
        f"--max-count={MAX_COMMITS}",
        "--no-merges",
        f"--format=%H%x1f%ae%x1f%aI%x1f%ct%x1f%s%x1f%(trailers:key={TRAILER},valueonly,separator=%x20)%x1e",
        *span,
        "--",
    )
    found = []
    for record in out.decode("utf-8", "replace").split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) != 6:
            continue
        sha, email, date, stamp, subject, trailer = fields
        if after is not None and int(stamp or 0) <= after:
            continue  # --since includes the second of the marking itself
        if email.strip().lower() == AGENT_EMAIL or trailer.strip():
            found.append((sha, date, subject))
    return found


def _changed(root: Path, shas: list[str]) -> dict[str, list[str]]:
    """sha -> the paths each commit changed: one `diff-tree --stdin` for them all (it names
    each commit, NUL-terminated, before its paths)."""
    if not shas:
        return {}
    proc = subprocess.run(
        ["git", "-C", str(root), "diff-tree", "--stdin", "-z", "-r", "--name-only", "--root"],
        input="".join(f"{sha}\n" for sha in shas).encode(),
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise GitError(f"git diff-tree failed: {detail[-1] if detail else proc.returncode}")
    commits = set(shas)
    out: dict[str, list[str]] = {sha: [] for sha in shas}
    current: str | None = None
    for token in proc.stdout.split(b"\0"):
        name = os.fsdecode(token)
        if name in commits:
            current = name
        elif token and current is not None:
            out[current].append(name)
    return out


def _at_head(root: Path, head: str, paths: list[str]) -> dict[str, bytes]:
    """path -> its bytes at `head`, for the `paths` that are still files there: one `ls-tree`
    for them all and one `cat-file --batch` (two processes, however many notes)."""
    if not paths:
        return {}
    raw = _git(root, "--literal-pathspecs", "ls-tree", "-z", "--full-tree", head, "--", *paths)
    wanted = set(paths)
    blobs: dict[str, str] = {}
    for record in raw.split(b"\0"):
        meta, sep, name = record.partition(b"\t")
        parts = meta.split(b" ")
        path = os.fsdecode(name)
        if sep and len(parts) == 3 and parts[1] == b"blob" and path in wanted:
            blobs[path] = parts[2].decode("ascii")
    with gitdiff.BlobReader(root) as reader:
        return {path: reader.read(blob) for path, blob in blobs.items()}


def inbox(root: Path, home: Path) -> list[InboxItem]:
    """The agent's notes written since the user last marked the inbox done, newest first."""
    head = gitdiff.head_commit(root)
    if head is None:
        return []
    commits = _agent_commits(root, head, load_seen(home, root))
    latest: dict[str, tuple[str, str, str]] = {}
    writes: dict[str, int] = {}
    changed = _changed(root, [sha for sha, _, _ in commits])
    for sha, date, subject in commits:
        for path in changed[sha]:
            latest.setdefault(path, (sha, date, subject))
            writes[path] = writes.get(path, 0) + 1
    present = _at_head(root, head, list(latest))
    items = []
    for path, (sha, date, subject) in latest.items():
        if path not in present:
            continue  # removed or reverted since: nothing left to review
        fm = front_matter(present[path].decode("utf-8", "replace"))
        title = fm.get("title")
        session = fm.get("session")
        project = fm.get("project")
        items.append(
            InboxItem(
                path=path,
                title=title if isinstance(title, str) and title else Path(path).stem,
                session=session if isinstance(session, str) and session else None,
                project=project if isinstance(project, str) and project else None,
                commit=sha,
                date=date,
                subject=subject,
                writes=writes[path],
            )
        )
    return items


def done(root: Path, home: Path, through: str | None = None) -> tuple[Seen, int]:
    """Mark everything up to `through` (default HEAD) seen: (the marking, how many of the
    notes listed before were marked). `through` (a commit the listing named) keeps an agent
    write that lands while the user reads out of the marking."""
    before = inbox(root, home)
    head = gitdiff.head_commit(root)
    if head is None:
        raise GitError(f"{root} has no commits yet: there is nothing to mark")
    mark = head
    if through is not None:
        resolved = gitdiff.tip_commit(root, through)
        if resolved is None or not gitdiff.is_ancestor(root, resolved, head):
            raise GitError(
                f"{through} is not a commit of the current branch: pass one `inbox` listed"
            )
        mark = resolved
    seen = mark_seen(home, root, mark)
    return seen, len(before) - len(inbox(root, home))


def diffs(root: Path, items: list[InboxItem]) -> dict[str, str]:
    """commit -> what that agent commit changed in the inbox's notes (a unified diff, as
    `git show` prints it), for every item at once: one `git log --no-walk` process."""
    if not items:
        return {}
    commits = list(dict.fromkeys(i.commit for i in items))
    raw = _git(
        root,
        "--literal-pathspecs",
        "log",
        "--no-walk=unsorted",
        "-p",
        "--no-color",
        "--no-ext-diff",
        "--format=%x1e%H",
        *commits,
        "--",
        *sorted({i.path for i in items}),
    )
    out: dict[str, str] = {}
    for record in raw.decode("utf-8", "replace").split("\x1e")[1:]:
        sha, _, text = record.partition("\n")
        out[sha] = text.strip("\n") + "\n"
    return out


def revert(root: Path, home: Path, commit: str, path: str) -> Written:
    """Undo the agent's `commit` for `path` with one commit of the agent's (`Vaultmem-Agent:
    revert`): the note goes back to what it was before that commit, or is removed when the
    commit created it. Written through `index.gitwrite.commit_file`, so the same rules as
    `remember` hold: only while the note at HEAD is still exactly what that commit wrote
    (the user's later edits are never undone), never with uncommitted edits to it, never
    mid-merge or on a detached HEAD; the user's other files and staged changes are untouched.
    Only an agent commit that `inbox` lists for `path` may be reverted."""
    from ..index.gitwrite import blob_at_head, commit_file

    listed = {(i.commit, i.path) for i in inbox(root, home)}
    if (commit, path) not in listed:
        raise GitError(
            f"{commit[:12]} is not the agent's latest write of {path} in the inbox: "
            "nothing was reverted"
        )
    written = gitdiff.tree_entry(root, commit, path)
    head_blob = blob_at_head(root, path)
    if written is None or head_blob != written[1]:
        raise WriteRefused(
            f"{path} changed since the agent wrote it: nothing was reverted (edit or "
            "`git revert` it yourself)"
        )
    parents = _git(root, "rev-list", "--parents", "-n", "1", commit).decode().split()[1:]
    before = gitdiff.tree_entry(root, parents[0], path) if parents else None
    data = _git(root, "cat-file", "blob", before[1]) if before is not None else None
    return commit_file(
        root,
        path,
        data,
        expect_blob=head_blob,
        message=f"revert: the agent's {path} ({commit[:12]})",
        trailer_value="revert",
    )
