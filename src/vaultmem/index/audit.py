"""Review of quarantined files: list them, show why (masked), allow a false positive, revoke that.

Design decision: a review decision is bound to the blob SHA the user looked at and is applied at
once, under the vault's writer lock, by re-deciding that one path with the ingester itself. The
ingester skips paths whose blob did not change, so a decision left for "the next ingest" would
never be seen; re-deciding in place keeps the move between the audit table and search atomic
(one transaction), and the decision itself is `triage`'s, as for every other file
(`decision.decide` applies `audit_allow`). Decisions live in `audit_allow`, which `rebuild`
never clears; any edit changes the blob, so the edited file is scanned (and quarantined) again.

Nothing here ever prints or stores a matched value: `show` re-scans the blob and keeps only the
policy's masked previews.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import psycopg

from .. import store
from ..config import Settings, load_settings
from ..embed import Embedder
from ..errors import AuditPathError, ConfirmationRequired, GitError, VaultmemError
from ..store import db
from ..store.audit import AllowedFile, QuarantinedFile
from . import backlog, gitdiff, ingest, statedir, writer_lock
from .findings import Finding
from .sensitive import HIGH_CONFIDENCE_RULES
from .triage import Quarantine, Rules, triage

Conn = psycopg.Connection[Any]  # opened with dict rows (db.connect)


class ReviewAction(StrEnum):
    """What a review decision did to a path's allowance."""

    ALLOWED = "allowed"
    REVOKED = "revoked"


class PathState(StrEnum):
    """Where a path stands right after a review decision applied."""

    INDEXED = "indexed"
    QUARANTINED = "quarantined"
    SKIPPED = "skipped"  # allowed, but still not a note (a `.env`, a `*.pem`)
    NOT_IN_HEAD = "not in HEAD"


@dataclass(frozen=True)
class FindingView:
    rule_id: str
    category: str
    line: int  # 0 for rules about the path or front matter flags
    masked: str  # a preview that never holds the secret ("" when the file could not be re-read)


@dataclass(frozen=True)
class QuarantineDetail:
    path: str
    risk: str
    blob_sha: str  # the quarantined version
    scanned_blob_sha: str | None  # the version re-scanned for previews (HEAD's when present)
    first_seen_at: datetime
    updated_at: datetime
    allowed_blob_sha: str | None
    allowed_at: datetime | None
    findings: list[FindingView] = field(default_factory=list)
    notice: str | None = None  # why the previews may not match the stored findings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    """The outcome of `allow` or `revoke`: the path's state right after the decision applied."""

    action: ReviewAction
    path: str
    blob_sha: str | None  # the version the decision was bound to
    state: PathState
    result: ingest.IngestResult

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "result": self.result.to_dict()}


# --- reading --------------------------------------------------------------------------------


def require_vault(conn: Conn, root: Path) -> db.Vault:
    v = db.find_vault(conn, root)
    if v is None:
        raise VaultmemError(f"{root} is not an indexed vault yet: run `vaultmem init` in it")
    return v


def list_quarantined(conn: Conn, vault_id: int) -> list[QuarantinedFile]:
    """Every quarantined path of the vault, by path, with why (rule ids, line numbers)."""
    files = store.quarantined_files(conn, vault_id)
    conn.commit()
    return files


def list_allowed(conn: Conn, vault_id: int) -> list[AllowedFile]:
    """Every review decision of the vault, with what the index holds for that path now."""
    files = store.allowed_files(conn, vault_id)
    conn.commit()
    return files


def _quarantined_row(conn: Conn, vault: db.Vault, path: str) -> store.QuarantineRecord:
    record = store.quarantine_record(conn, vault.id, path)
    if record is None:
        raise AuditPathError(
            f"{path!r} is not quarantined in vault {vault.name}: "
            "`vaultmem audit list` shows what is (paths are relative to the vault root)"
        )
    return record


def rescan(settings: Settings, path: str, data: bytes, mode: str = "100644") -> list[Finding]:
    """The findings `triage` makes for one file's bytes: exactly the ingester's decision.

    Empty when the file would not be quarantined (indexed, skipped or ignored)."""
    outcome = triage(path, mode, data, Rules.from_settings(settings))
    return list(outcome.findings) if isinstance(outcome, Quarantine) else []


def show(conn: Conn, settings: Settings, vault: db.Vault, path: str) -> QuarantineDetail:
    """Why `path` is quarantined: each finding's rule, category, line and a masked preview.

    The previews come from re-scanning the file's blob at HEAD (the quarantined blob if HEAD no
    longer has the path); the audit table itself never holds any part of a matched value."""
    row = _quarantined_row(conn, vault, path)
    conn.commit()
    head = gitdiff.head_commit(vault.root)
    tree = gitdiff.ls_tree(vault.root, head) if head else {}
    blob: str | None = row.blob_sha
    mode = "100644"
    if path in tree and tree[path][0] != "160000":
        mode, blob = tree[path]
    notice: str | None = None
    findings: list[FindingView] = []
    try:
        with gitdiff.BlobReader(vault.root) as reader:
            data = reader.read(str(blob))
        findings = [
            FindingView(f.rule_id, f.category, f.line, f.masked)
            for f in rescan(settings, path, data, mode)
        ]
    except GitError:
        blob = None
        notice = "the file's content is no longer in the repository; previews are unavailable"
    if blob is not None and not findings:
        notice = (
            "a re-scan finds nothing now (the rules or settings changed): "
            "run `vaultmem rebuild` to index it"
        )
    elif blob is not None and blob != row.blob_sha:
        notice = "HEAD holds a newer version than the index: run `vaultmem ingest` to re-scan it"
    if not findings:
        findings = [FindingView(f["rule"], f["category"], f["line"], "") for f in row.findings]
    return QuarantineDetail(
        path=path,
        risk=row.risk,
        blob_sha=row.blob_sha,
        scanned_blob_sha=blob,
        first_seen_at=row.first_seen_at,
        updated_at=row.updated_at,
        allowed_blob_sha=row.allowed_blob_sha,
        allowed_at=row.allowed_at,
        findings=findings,
        notice=notice,
    )


# --- decisions ------------------------------------------------------------------------------


def _state(conn: Conn, vault_id: int, path: str) -> PathState:
    known = store.known_paths(conn, vault_id, only=[path]).get(path)
    if known is None:
        return PathState.NOT_IN_HEAD
    return PathState.INDEXED if known.kind is store.IndexedAs.NOTE else PathState(known.kind)


def _decide(
    conn: Conn,
    vault: db.Vault,
    path: str,
    action: ReviewAction,
    root: Path | None,
    settings: Settings | None,
    embedder: Embedder | None,
    embed: bool,
    yes: bool = True,
) -> Decision:
    return _decide_many(conn, vault, [path], action, root, settings, embedder, embed, yes)[0]


def _decide_many(
    conn: Conn,
    vault: db.Vault,
    paths: list[str],
    action: ReviewAction,
    root: Path | None,
    settings: Settings | None,
    embedder: Embedder | None,
    embed: bool,
    yes: bool = True,
) -> list[Decision]:
    """Record or drop decisions and re-decide each path at HEAD, under the vault's writer lock.

    The index is first brought to HEAD (the same pass the git hooks run), so a decision is
    checked against, and bound to, what HEAD holds rather than a stale index. An allowance of a
    file whose findings include a credential beyond doubt needs `yes` (ConfirmationRequired)."""
    root = Path(root) if root is not None else vault.root
    settings = settings or load_settings(root)
    files = statedir.state_files(root)
    result = ingest.IngestResult(mode=ingest.RunMode.REVIEW)
    decisions: list[Decision] = []
    with writer_lock.writer(files, wait=True, foreground=True) as w:
        assert w is not None  # a waiting writer always gets the lock
        conn.commit()  # the passes below manage their own transactions
        ing = ingest.Ingester(settings, conn, vault, embedder=embedder)
        w.take_pending()
        # The database's writer lease, as for every write of the index.
        with ing.lease.held_for():
            ingest.index_pass(ing, result)
            result.mode = ingest.RunMode.REVIEW
            head = result.to_commit
            tree = gitdiff.ls_tree(root, head) if head else {}
            if action is ReviewAction.ALLOWED and not yes:
                strong = sorted(
                    {r for p in paths for r in _quarantined_row(conn, vault, p).rule_ids}
                    & HIGH_CONFIDENCE_RULES
                )
                conn.commit()
                if strong:
                    named = ", ".join(paths) if len(paths) < 4 else f"{len(paths)} files"
                    raise ConfirmationRequired(
                        f"{named} {'holds' if len(paths) == 1 else 'hold'} "
                        f"what looks like a real credential ({', '.join(strong)}): indexing makes "
                        "it searchable and sends it to the embedding provider; confirm, or pass "
                        "--yes",
                        tuple(strong),
                    )
            bound: dict[str, str] = {}
            with ing.writing():
                for path in paths:
                    if action is ReviewAction.ALLOWED:
                        bound[path] = _record_allow(conn, vault, path, tree)
                    else:
                        bound[path] = _drop_allow(conn, vault, path)
                    if head:
                        ing.redecide(path, head, result)
        if embed:
            backlog.drain(ing, result)
        for path in paths:
            decisions.append(
                Decision(action, path, bound[path], _state(conn, vault.id, path), result)
            )
        conn.commit()
    if files.pending.exists():
        # A commit landed while we held the lock; its trigger handed the work to us.
        ingest.catch_up(settings, root, embed=embed, embedder=embedder)
    return decisions


def _record_allow(conn: Conn, vault: db.Vault, path: str, tree: dict[str, tuple[str, str]]) -> str:
    row = _quarantined_row(conn, vault, path)
    if path not in tree:
        raise AuditPathError(
            f"{path!r} is not in HEAD of {vault.root}: only committed files can be allowed"
        )
    blob = tree[path][1]
    if blob != row.blob_sha:
        raise AuditPathError(
            f"the index holds another version of {path!r} than HEAD: "
            "run `vaultmem ingest`, review it with `vaultmem audit show`, then allow it"
        )
    store.record_allow(conn, vault.id, path, blob)
    return blob


def _drop_allow(conn: Conn, vault: db.Vault, path: str) -> str:
    blob = store.drop_allow(conn, vault.id, path)
    if blob is None:
        raise AuditPathError(
            f"{path!r} was never allowed in vault {vault.name}: "
            "`vaultmem audit list` shows the allowed files"
        )
    return blob


def allow(
    conn: Conn,
    vault: db.Vault,
    path: str,
    root: Path | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    embed: bool = True,
    yes: bool = False,
) -> Decision:
    """Mark a quarantined file a reviewed false positive and index it now.

    Bound to the file's blob at HEAD, so any later edit is scanned (and quarantined) again.
    Refuses (AuditPathError) if the path is not quarantined or not committed at HEAD, and asks
    (ConfirmationRequired) unless `yes` when a finding is a credential beyond doubt (a private
    key, a vendor token)."""
    return _decide(conn, vault, path, ReviewAction.ALLOWED, root, settings, embedder, embed, yes)


@dataclass(frozen=True)
class BulkAllow:
    """`audit allow --rule`: the files allowed, and those the rule alone does not explain."""

    rule: str
    allowed: list[Decision]
    not_allowed: dict[str, list[str]]  # path -> its other rules

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "allowed": [d.to_dict() for d in self.allowed],
            "not_allowed": self.not_allowed,
        }


def rule_release(
    conn: Conn, vault: db.Vault, rule: str, pattern: str = "*"
) -> tuple[list[str], dict[str, list[str]]]:
    """What `allow_rule` would release, decided before anything changes (the count a person
    confirms): the quarantined paths under `pattern` whose findings all come from `rule`, and
    those it hits that also hit other rules (path -> the other rules), which stay."""
    quarantined = [q for q in list_quarantined(conn, vault.id) if fnmatchcase(q.path, pattern)]
    hit = [q for q in quarantined if rule in q.rule_ids]
    paths = [q.path for q in hit if set(q.rule_ids) == {rule} and not q.allowed]
    others = {
        q.path: [r for r in q.rule_ids if r != rule] for q in hit if set(q.rule_ids) != {rule}
    }
    return paths, others


def allow_rule(
    conn: Conn,
    vault: db.Vault,
    rule: str,
    pattern: str = "*",
    root: Path | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    embed: bool = True,
    yes: bool = False,
) -> BulkAllow:
    """Allow every quarantined file under `pattern` (a glob on the vault path) whose findings
    all come from `rule`: a reviewed false-positive rule, in bulk. Each allowance is bound to
    that file's blob, as `allow` binds one; a file that also hits another rule is left alone."""
    paths, others = rule_release(conn, vault, rule, pattern)
    decisions = (
        _decide_many(conn, vault, paths, ReviewAction.ALLOWED, root, settings, embedder, embed, yes)
        if paths
        else []
    )
    return BulkAllow(rule, decisions, others)


def revoke(
    conn: Conn,
    vault: db.Vault,
    path: str,
    root: Path | None = None,
    *,
    settings: Settings | None = None,
    embedder: Embedder | None = None,
    embed: bool = True,
) -> Decision:
    """Withdraw an `allow`: the file is scanned again at once and quarantined if it still hits."""
    return _decide(conn, vault, path, ReviewAction.REVOKED, root, settings, embedder, embed)


# --- paths as users type them ------------------------------------------------------------------


def vault_path(root: Path, raw: str, cwd: Path | None = None) -> str:
    """A path as typed -> the vault-relative, `/`-separated path the index uses.

    Absolute paths, and paths that exist relative to a current directory inside the vault, are
    resolved like git resolves them; anything else is taken as vault-relative already (the form
    `audit list` prints)."""
    root = root.resolve()
    cwd = (cwd or Path.cwd()).resolve()
    typed = Path(raw)
    if typed.is_absolute():
        candidate = typed
    elif (cwd == root or root in cwd.parents) and (cwd / typed).exists():
        candidate = cwd / typed
    else:
        candidate = root / typed
    candidate = Path(os.path.normpath(candidate))
    for base in (candidate, candidate.parent.resolve() / candidate.name):
        try:
            rel = base.relative_to(root)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] != "..":
            return rel.as_posix()
    raise AuditPathError(f"{raw} is not inside the vault {root}")
