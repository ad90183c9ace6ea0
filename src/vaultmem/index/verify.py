"""Compare the index with the notes committed at HEAD and report every difference.

Uses the ingester's per-file decision (`triage_path`, and `decide` for a deep check), so "what
should be indexed" has one definition. Checks by blob SHA (cheap, exact): a path missing from the
index, a path the index holds that HEAD does not (a ghost), and a path indexed at another version
are drift; chunks whose text no longer matches a fresh parse of the blob are drift too when
`deep` is asked for.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .. import store, vaults
from ..config import Settings
from ..embed import get_embedder, second_opinion
from ..errors import SchemaError
from ..store import IndexedAs, db
from . import gitdiff
from .decision import decide
from .ingest import open_index
from .markdown import chunker_signature
from .paths import display_path, storable
from .statedir import read_progress, state_files
from .triage import MAX_PATH_BYTES, Ignore, Index, Quarantine, Rules, Skip, triage_path
from .writer_lock import lock_is_held


@dataclass
class VerifyReport:
    head: str | None
    watermark: str | None
    commits_behind: int
    notes: int
    quarantined: int
    skipped: list[dict[str, Any]]
    backlog: int
    model_id: str
    missing: list[str] = field(default_factory=list)
    ghosts: list[str] = field(default_factory=list)
    outdated: list[str] = field(default_factory=list)
    wrong_kind: list[str] = field(default_factory=list)
    chunk_mismatch: list[str] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)  # indexed, with a caveat
    last_run: dict[str, Any] | None = None
    # The chunker signature the index was built with, and this version's; they differ after an
    # upgrade or a VAULTMEM_MAX_CHUNK_CHARS change, until the next run re-chunks.
    chunker: str | None = None
    chunker_current: str | None = None
    rechunk_due: bool = False

    @property
    def drift(self) -> bool:
        return bool(
            self.missing
            or self.ghosts
            or self.outdated
            or self.wrong_kind
            or self.chunk_mismatch
            or self.rechunk_due
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "drift": self.drift}


def commits_behind(root: Path, watermark: str | None, head: str | None) -> int:
    """Commits in HEAD's history that the index has not caught up with; -1 when unknown
    (nothing indexed yet, or the watermark is not in this history: amend, reset, rebase)."""
    if head is None or watermark == head:
        return 0
    if (
        watermark is None
        or not gitdiff.commit_exists(root, watermark)
        or not gitdiff.is_ancestor(root, watermark, head)
    ):
        return -1
    import subprocess

    out = subprocess.run(
        ["git", "rev-list", "--count", f"{watermark}..{head}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip() or 0) if out.returncode == 0 else -1


def unrecordable_skips(
    settings: Settings, root: Path, tree: dict[str, tuple[str, str]]
) -> list[dict[str, Any]]:
    """Skips no table can hold (paths too long to be a key, names that are not text), found
    in HEAD's tree."""
    odd = {p: e for p, e in tree.items() if len(os.fsencode(p)) > MAX_PATH_BYTES or not storable(p)}
    if not odd:
        return []
    rules = Rules.from_settings(settings)
    out = []
    for path, (mode, blob) in sorted(odd.items()):
        outcome = triage_path(path, mode, rules)
        if isinstance(outcome, Skip) and not outcome.code.recordable:
            out.append(
                {
                    "path": display_path(path),
                    "code": outcome.code,
                    "reason": outcome.reason,
                    "blob_sha": blob,
                }
            )
    return out


def verify(settings: Settings, root: Path, *, deep: bool = False) -> VerifyReport:
    conn, vault = open_index(settings, root, start_db=False)  # a reader never starts it
    try:
        rules = Rules.from_settings(settings)
        model_id = get_embedder(settings).model_id
        head = gitdiff.tip_commit(root, settings.ref)  # a shared source follows its ref
        st = store.state(conn, vault.id)
        signature = chunker_signature(settings.max_chunk_chars)
        known = store.known_paths(conn, vault.id)
        report = VerifyReport(
            head=head,
            watermark=st.watermark,
            commits_behind=commits_behind(root, st.watermark, head),
            notes=sum(1 for k in known.values() if k.kind is IndexedAs.NOTE),
            quarantined=sum(1 for k in known.values() if k.kind is IndexedAs.QUARANTINED),
            skipped=store.skipped(conn, vault.id),
            backlog=store.backlog_size(conn, vault.id, model_id),
            model_id=model_id,
            warnings=store.note_warnings(conn, vault.id),
            last_run=st.last_run,
            chunker=st.chunker,
            chunker_current=signature,
            rechunk_due=st.rechunk_due(signature),
        )
        tree = gitdiff.ls_tree(root, head) if head else {}
        report.skipped.extend(unrecordable_skips(settings, root, tree))
        for path, (mode, blob) in tree.items():
            outcome = triage_path(path, mode, rules)
            have = known.get(path)
            if isinstance(outcome, Skip) and not outcome.code.recordable:
                if have is not None:
                    report.wrong_kind.append(path)
                continue
            if isinstance(outcome, Ignore):
                if have is not None:
                    report.ghosts.append(path)
                continue
            if have is None:
                report.missing.append(path)
            elif have.blob_sha != blob:
                report.outdated.append(path)
            elif isinstance(outcome, Skip) and have.kind is not IndexedAs.SKIPPED:
                report.wrong_kind.append(path)
            elif isinstance(outcome, Quarantine) and have.kind is IndexedAs.NOTE:
                report.wrong_kind.append(path)
        report.ghosts.extend(p for p in known if p not in tree)
        if deep and head:
            report.chunk_mismatch = _deep_check(conn, vault, tree, known, rules)
        conn.commit()
        return report
    finally:
        conn.close()


def _deep_check(
    conn: db.Conn,
    vault: db.Vault,
    tree: dict[str, tuple[str, str]],
    known: dict[str, store.Known],
    rules: Rules,
) -> list[str]:
    """Indexed notes whose chunks differ from what `decide` makes of HEAD's blob now (or that
    it would no longer index: `triage` says so and no review allowed this version)."""
    stored = store.chunk_hashes(conn, vault.id)
    bad: list[str] = []
    with gitdiff.BlobReader(vault.root) as reader:
        for path, have in known.items():
            if have.kind is not IndexedAs.NOTE or path not in tree:
                continue
            mode, blob = tree[path]
            entry = gitdiff.TreeEntry(path, mode, blob)
            outcome = decide(conn, vault.id, entry, rules, partial(reader.read, blob))
            if not isinstance(outcome, Index) or [
                c.content_hash for c in outcome.note.chunks
            ] != stored.get(path, []):
                bad.append(path)
    conn.commit()
    return bad


def _last_line(path: Path, max_bytes: int = 4096) -> str | None:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - max_bytes))
            lines = f.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1] if lines else None


@dataclass
class VaultStatus:
    """One vault's row of `vaultmem status`: counts from the index, plus what makes a silent
    failure visible (how far the index is behind HEAD, the last run, the last hook log line,
    every skip and every note indexed with a warning)."""

    id: int
    name: str
    root: str
    watermark: str | None
    shared: bool
    model_id: str | None
    last_run: dict[str, Any] | None
    notes: int
    chunks: int
    backlog: int
    quarantined: int
    skipped: int = 0
    head: str | None = None
    commits_behind: int | None = None
    problem: str | None = None  # why HEAD could not be read (the folder is gone...)
    hook_log_last: str | None = None
    skipped_files: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    rechunk_due: bool = False
    configured_model_id: str | None = None  # what the settings name now
    registered: bool = False  # listed in the user's registry (`vaultmem vaults list`)
    # A background drainer's live progress: pid, done, total, rate (chunks/s), started_at.
    embedding_progress: dict[str, Any] | None = None
    ignored_vault_env: list[str] = field(default_factory=list)  # names its .env may not set
    # Some process holds the vault's writer lock (an ingest, a hook's catch-up, a rebuild),
    # whether or not it has started embedding yet.
    ingest_running: bool = False
    # Chunks without the second opinion's vector, and whether this vault's searches ask it
    # (`embed.second_opinion.wanted`; a chunk without one is judged without the opinion)
    second_opinion_missing: int = 0
    second_opinion: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vault_status(conn: db.Conn, stats: dict[str, Any]) -> VaultStatus:
    """One row of `db.vault_stats` with HEAD, drift and health added. Never raises for a broken
    vault folder: the problem is reported in `problem`."""
    from ..config import load_settings
    from ..errors import VaultmemError

    root = Path(stats["root"])
    out = VaultStatus(
        **stats,
        skipped_files=store.skipped(conn, stats["id"]),
        warnings=store.note_warnings(conn, stats["id"]),
    )
    conn.commit()
    user = vaults.load()
    source = None
    if out.shared:
        source = next((v for v in user.vaults if v.shared == out.name and v.path), None)
        out.registered = any(v.shared == out.name for v in user.vaults)
        if source is None:
            # Read from the server only: its source is on another machine, which checks HEAD.
            out.skipped = len(out.skipped_files)
            return out
        root = source.path  # type: ignore[assignment]
    try:
        if not root.is_dir():
            raise VaultmemError(f"the vault folder {root} is gone")
        head = gitdiff.tip_commit(root, source.ref if source is not None else None)
        out.head = head
        out.commits_behind = commits_behind(root, out.watermark, head)
        tree = gitdiff.ls_tree(root, head) if head else {}
        settings = load_settings(root, user=user)
        out.ignored_vault_env = list(settings.ignored_vault_env)
        out.registered = user.by_path(root) is not None
        out.skipped_files += unrecordable_skips(settings, root, tree)
        out.hook_log_last = _last_line(gitdiff.git_dir(root) / "vaultmem" / "ingest.log")
        out.embedding_progress = read_progress(root)
        out.ingest_running = lock_is_held(state_files(root).lock)
        out.configured_model_id = get_embedder(settings).model_id
        out.second_opinion = second_opinion.wanted(settings)
        out.rechunk_due = store.state(conn, out.id).rechunk_due(
            chunker_signature(settings.max_chunk_chars)
        )
        conn.commit()
    except VaultmemError as exc:
        out.problem = str(exc)
    out.skipped = len(out.skipped_files)
    return out


@dataclass(frozen=True)
class StatusReport:
    """What `vaultmem status` reports (and the web overview shows): the database, the schema
    version, every vault's `VaultStatus`, the embedding workers and the backlog by model."""

    database: str  # "bundled" or "external"
    server: dict[str, Any]  # db.server_info: role, versions, TLS
    schema_version: int
    vaults: list[VaultStatus]
    workers: list[Any]  # store.worker_registry.WorkerRow
    backlog_by_model: dict[str, int]
    # Each worker's state (`WorkerRow.state`, judged on this host): a SIGKILLed worker of this
    # machine never marked its row, however fresh, and is "gone"
    worker_states: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """`vaultmem status --json`."""
        return {
            "database": self.database,
            "reachable": True,
            **self.server,
            "schema_version": self.schema_version,
            "vaults": [v.to_dict() for v in self.vaults],
            "workers": [
                {**w.to_dict(), "state": state}
                for w, state in zip(self.workers, self.worker_states, strict=True)
            ],
            "backlog_by_model": self.backlog_by_model,
        }


def status_report(settings: Settings) -> StatusReport:
    """The one place the figures of `vaultmem status` are gathered, so the command and the web
    overview never disagree."""
    from ..store import claims, worker_registry

    with db.connect(settings) as conn:
        db.check_role(conn)
        info = db.server_info(conn)
        version = db.schema_version(conn)
        if version > db.SCHEMA_VERSION:
            raise SchemaError(db.newer_schema(version))
        rows = [vault_status(conn, v) for v in db.vault_stats(conn)] if version else []
        workers = worker_registry.workers(conn) if version >= 8 else []
        backlog = claims.backlog_counts(conn) if version >= 8 else {}
        conn.commit()
    return StatusReport(
        "external" if settings.database_url else "bundled",
        info,
        version,
        rows,
        list(workers),
        backlog,
        [w.state(socket.gethostname(), worker_registry.pid_alive) for w in workers],
    )
