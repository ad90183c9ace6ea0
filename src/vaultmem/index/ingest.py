"""Keep the index equal to the notes committed at HEAD: catch-up, rebuild, verify, backlog.

Orchestration only: git facts come from `gitdiff`, per-file decisions from `decision.decide`
(triage plus the user's reviews), SQL from `store`, the writer lock from `writer_lock`, the
state files from `statedir`. The design in one paragraph: each run diffs the vault's watermark
(the last fully applied commit) against HEAD with `git diff-tree`, applies the events in batched
transactions reading contents from the commit's blobs (never the work tree), and moves the
watermark only after all of them are committed. If the watermark is gone or no longer an ancestor
(amend, reset, rebase, gc), the run reconciles by blob SHA against HEAD's tree instead; embeddings
are cached by content hash, so neither path re-embeds unchanged text. Text becomes searchable
(full-text) as soon as it is written; vectors are filled afterwards from a persistent backlog
(chunks whose vector is missing or from another model), claimed batch by batch (`backlog`),
so any number of workers on any machine (`index.worker`) can drain it too. One writer per
vault: a file lock on this machine (triggers that find it held leave a "pending" mark that the
holder loops on) and a lease in the database for every machine (`store.vault_lease`), held
while text is written and renewed by every write transaction. A shared vault's source follows
a ref (a bare remote's branch, or a clone's remote-tracking branch) instead of HEAD, and its
index only moves forward.

One module on purpose: the `Ingester`'s text passes and the entry points that run them
(`catch_up`, `rebuild`, `apply_changes_file`...) share one discipline, taking the lock,
looping on the pending mark, merging pass results and recording the run, that reads best in
one place; the parts that stand alone (the embedding drain, the state folder, the writer
lock, the per-file decision, the git hook's runtime) live in their own modules.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg

from .. import store
from ..config import Settings
from ..dburl import redact_url
from ..embed import Embedder, get_embedder
from ..errors import BlobMissing, VaultmemError
from ..store import db, vector_cache
from ..store.vault_lease import VaultLease
from . import backlog, gitdiff, markdown
from .decision import decide
from .paths import display_path, storable
from .statedir import ProgressFile, state_files
from .triage import Ignore, Index, Quarantine, Rules, Skip, SkipCode, triage_path
from .writer_lock import Writer, wait_until_let_in, writer

log = logging.getLogger(__name__)

BATCH_FILES = 50  # files per transaction: small enough that a crash loses little work

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class RunMode(StrEnum):
    """What kind of pass a run made. When one run made several it reports the most thorough
    (`rank`): a rebuild that caught up a commit landing mid-way is still a rebuild, and a run
    with nothing to do says "current"."""

    CURRENT = "current"
    CHANGES_FILE = "changes-file"
    REVIEW = "review"  # an audit decision re-deciding one path
    INCREMENTAL = "incremental"
    RECONCILE = "reconcile"
    REBUILD = "rebuild"

    @property
    def rank(self) -> int:
        return list(RunMode).index(self)


@dataclass
class IngestResult:
    mode: RunMode = RunMode.INCREMENTAL
    from_commit: str | None = None
    to_commit: str | None = None
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    renamed: int = 0
    quarantined: int = 0
    skipped: int = 0
    ignored: int = 0
    chunks_written: int = 0
    embedded: int = 0  # chunk texts sent to the embedding model
    reused: int = 0  # chunks that got their vector from the cache
    backlog: int = 0  # chunks still waiting for a vector when the run ended
    embed_seconds: float = 0.0  # time spent in the embedding model (for the backlog ETA)
    embed_rate: float | None = None  # chunks/s once the model was warm (smoothed)
    second_opinion: int = 0  # chunks given their second opinion's vector (search.second_opinion)
    cache_skipped: int = 0  # cached vectors passed over (wrong dimension): texts embedded again
    skip_reasons: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> dict[str, int]:
        keys = ("added", "updated", "unchanged", "deleted", "renamed", "quarantined", "skipped")
        return {k: getattr(self, k) for k in keys}

    def summary(self) -> str:
        c = self.counts()
        text = ", ".join(f"{v} {k}" for k, v in c.items())
        return (
            f"{text}; {self.embedded} chunks embedded, {self.reused} reused, "
            f"{self.backlog} awaiting embeddings"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Ingester:
    """One vault, one connection, one pass at a time. Used under the writer lock."""

    def __init__(
        self,
        settings: Settings,
        conn: db.Conn,
        vault: db.Vault,
        *,
        embedder: Embedder | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.settings = settings
        self.conn = conn
        self.vault = vault
        self.root = vault.root
        self.rules = Rules.from_settings(settings)
        self.embedder = embedder or get_embedder(settings)
        self.progress = progress or (lambda phase, done, total: None)
        self.tracker: ProgressFile | None = None  # set by runs that report to `status`
        self.lease = VaultLease(conn, vault, settings.writer_lease)
        self.ref = settings.ref  # what the index follows: None, HEAD (a shared source: a ref)
        self._dimension: int | None = None  # the model's, as the index holds it (known_dimension)
        self._dimension_read = False

    def known_dimension(self) -> int | None:
        """The dimension of the vectors the index holds for this model (None: none yet), read
        once: asking the embedder could cost a model call. Cached entries of another are
        passed over."""
        if not self._dimension_read:  # once a run, found or not: never a scan per file
            self._dimension = vector_cache.index_dimension(self.conn, self.embedder.model_id)
            self._dimension_read = True
        return self._dimension

    def tip(self) -> str | None:
        """The commit the index should reach: HEAD, or the ref a shared vault's source follows."""
        return gitdiff.tip_commit(self.root, self.ref)

    def writing(self) -> contextlib.AbstractContextManager[None]:
        """One write transaction of this vault's index (the lease renewed first, when held)."""
        return self.lease.writing()

    def apply_entry(
        self,
        reader: gitdiff.BlobReader,
        result: IngestResult,
        entry: gitdiff.TreeEntry,
        commit: str,
        known: store.Known | None,
        *,
        force: bool = False,
    ) -> None:
        """Bring one path of `commit`'s tree into the index, as `decide` (triage, then the
        user's reviews) decides.

        A path whose blob the index already holds is left alone unless `force`; its bytes are
        read only when the decision depends on them."""
        path, vid = entry.path, self.vault.id
        # The path alone first: an ignored file leaves the index without a look at its blob.
        if isinstance(triage_path(path, entry.mode, self.rules), Ignore):
            if known is not None:
                store.delete_path(self.conn, vid, path)
                result.deleted += 1
            else:
                result.ignored += 1
            return
        if (
            not force
            and known is not None
            and known.blob_sha == entry.blob
            and not (known.code is not None and SkipCode(known.code).retried)
        ):
            result.unchanged += 1
            return

        def content() -> bytes | None:
            try:
                return reader.read(entry.blob)
            except BlobMissing:
                return None  # skipped as unreadable; the next run tries again

        outcome = decide(self.conn, vid, entry, self.rules, content)
        if isinstance(outcome, Quarantine):
            store.quarantine(self.conn, vid, path, entry.blob, outcome.findings)
            result.quarantined += 1
        elif isinstance(outcome, Skip):
            if outcome.code.recordable:
                store.mark_skipped(self.conn, vid, path, entry.blob, outcome.reason, outcome.code)
            result.skipped += 1
            result.skip_reasons[display_path(path)] = outcome.reason
        elif isinstance(outcome, Index):
            # Forced (a rebuild, a review decision): every chunk re-derived, none kept.
            inserted, n = store.upsert_note(
                self.conn, vid, outcome.note, entry.blob, commit, keep_unchanged=not force
            )
            result.chunks_written += n
            dimension = self.known_dimension()
            if dimension is not None:  # else the drain fills it, once the dimension is known
                result.reused += store.fill_from_cache(
                    self.conn, vid, self.embedder.model_id, [path], dimension
                )
            if known is None or known.kind is not store.IndexedAs.NOTE or inserted:
                result.added += 1
            else:
                result.updated += 1

    def retry_unreadable(self, commit: str, result: IngestResult) -> None:
        """Try again the notes whose blob could not be read by an earlier run."""
        paths = store.skipped_paths(self.conn, self.vault.id, SkipCode.UNREADABLE)
        self.conn.commit()
        if not paths:
            return
        tree = gitdiff.tree_entries(self.root, commit, paths)
        known = store.known_paths(self.conn, self.vault.id, only=paths)
        with gitdiff.BlobReader(self.root) as reader, self.writing():
            for path in paths:
                if path not in tree:
                    store.delete_path(self.conn, self.vault.id, path)  # gone since
                    continue
                mode, blob = tree[path]
                entry = gitdiff.TreeEntry(path, mode, blob)
                self.apply_entry(reader, result, entry, commit, known.get(path))

    def redecide(self, path: str, commit: str, result: IngestResult) -> None:
        """Decide `path` again as `commit` holds it (after a review decision), in the caller's
        transaction; a path `commit` does not hold is left as it is."""
        tree = gitdiff.ls_tree(self.root, commit)
        if path not in tree:
            return
        mode, blob = tree[path]
        known = store.known_paths(self.conn, self.vault.id, only=[path]).get(path)
        with gitdiff.BlobReader(self.root) as reader:
            entry = gitdiff.TreeEntry(path, mode, blob)
            self.apply_entry(reader, result, entry, commit, known, force=True)

    # --- passes ----------------------------------------------------------------------------

    def apply_changes(
        self, changes: list[gitdiff.Change], commit: str, result: IngestResult
    ) -> None:
        """Apply diff-tree events: deletions and rename sources first, then upserts."""
        vid = self.vault.id
        touched = {c.path for c in changes} | {c.old_path for c in changes if c.old_path}
        known = store.known_paths(self.conn, vid, only=[p for p in touched if storable(p)])
        self.conn.commit()
        ops: list[tuple[str, gitdiff.Change]] = []
        for ch in changes:
            if ch.status == "D":
                ops.append(("delete", ch))
            elif ch.status == "R":
                ops.append(("rename", ch))
        for ch in changes:
            if ch.status in ("A", "M", "T", "R", "C"):
                ops.append(("upsert", ch))
        total = len(ops)
        moved: dict[str, str | None] = {}  # renamed notes: new path -> the blob it had before
        with gitdiff.BlobReader(self.root) as reader:
            for start in range(0, total, BATCH_FILES):
                with self.writing():
                    for op, ch in ops[start : start + BATCH_FILES]:
                        if op == "delete":
                            # A name that is not text was never stored: nothing to delete.
                            if storable(ch.path) and store.delete_path(self.conn, vid, ch.path):
                                result.deleted += 1
                            known.pop(ch.path, None)
                        elif op == "rename":
                            assert ch.old_path is not None
                            prior = known.pop(ch.old_path, None)
                            if storable(ch.old_path) and storable(ch.path):
                                store.carry_rename(self.conn, vid, ch.old_path, ch.path)
                            if storable(ch.old_path):
                                store.delete_path(self.conn, vid, ch.old_path)
                            if prior is not None:
                                result.renamed += 1
                                moved[ch.path] = prior.blob_sha
                        else:
                            assert ch.blob is not None
                            entry = gitdiff.TreeEntry(ch.path, ch.mode, ch.blob)
                            added = result.added
                            self.apply_entry(reader, result, entry, commit, known.get(ch.path))
                            if ch.path in moved and result.added > added:
                                # A rename already counted as one: its new path is not also
                                # "added" (nor "updated", unless its content changed too).
                                result.added -= 1
                                result.updated += int(moved[ch.path] != ch.blob)
                self.progress("index", min(start + BATCH_FILES, total), total)

    def reconcile(
        self,
        commit: str,
        result: IngestResult,
        *,
        force: bool = False,
        done: set[str] | None = None,
    ) -> None:
        """Make the index match `commit`'s tree by blob SHA (no diff needed)."""
        vid = self.vault.id
        tree = gitdiff.ls_tree(self.root, commit)
        known = store.known_paths(self.conn, vid)
        self.conn.commit()
        stale = [p for p in known if p not in tree]
        todo = [p for p in sorted(tree) if not (done and p in done)]
        result.unchanged += len(tree) - len(todo)
        total = len(stale) + len(todo)
        items: list[tuple[str, str | None]] = [(p, None) for p in stale] + [(p, "x") for p in todo]
        with gitdiff.BlobReader(self.root) as reader:
            for start in range(0, total, BATCH_FILES):
                with self.writing():
                    for path, present in items[start : start + BATCH_FILES]:
                        if present is None:
                            store.delete_path(self.conn, vid, path)
                            result.deleted += 1
                        else:
                            mode, blob = tree[path]
                            entry = gitdiff.TreeEntry(path, mode, blob)
                            self.apply_entry(
                                reader, result, entry, commit, known.get(path), force=force
                            )
                self.progress("index", min(start + BATCH_FILES, total), total)


# --- entry points ------------------------------------------------------------------------------


def open_index(
    settings: Settings, root: Path, *, start_db: bool | None = None
) -> tuple[db.Conn, db.Vault]:
    """Connect, bring the schema to this version and register the vault (idempotent).

    `start_db` None: start a bundled server that is merely down, never one the user stopped
    with `vaultmem db stop` (the rule for every writer, git hooks included)."""
    if start_db is None:
        from ..store import server

        start_db = not server.stopped_on_purpose(settings.home)
    conn = db.connect(settings, start=start_db, purpose="vaultmem-ingest")
    db.apply_schema(conn)  # two catalog reads when current: no lock another vault waits for
    conn.commit()
    if settings.shared is not None:
        vault = db.register_shared_vault(conn, settings.shared, root)
    else:
        vault = db.register_vault(conn, root, installation=settings.installation)
    return conn, vault


def _record(ing: Ingester, result: IngestResult, started: float) -> None:
    result.seconds = round(time.monotonic() - started, 3)
    outcome = {
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": result.mode,
        "to_commit": result.to_commit,
        "counts": result.counts(),
        "embedded": result.embedded,
        "embed_seconds": round(result.embed_seconds, 3),
        "model_id": ing.embedder.model_id,
        "backlog": result.backlog,
        "skip_reasons": dict(list(result.skip_reasons.items())[:50]),
        "errors": result.errors,
        "seconds": result.seconds,
    }
    with contextlib.suppress(psycopg.Error):
        ing.conn.rollback()
        with store.write_transaction(ing.conn):
            store.set_last_run(ing.conn, ing.vault.id, outcome)


def index_pass(ing: Ingester, result: IngestResult) -> IngestResult:
    """Bring text and metadata to HEAD, or to the ref a shared vault's source follows (no
    embedding). Moves the watermark when done."""
    head = ing.tip()
    st = store.state(ing.conn, ing.vault.id)
    ing.conn.commit()
    result.from_commit, result.to_commit = st.watermark, head
    if head is None:
        result.mode = RunMode.CURRENT
        return result
    if ing.vault.shared and _behind_the_index(ing, st, head):
        # Another source of this shared vault (a server, another clone) already indexed a later
        # commit of the branch: a clone that has not fetched it must not move the index back.
        result.mode = RunMode.CURRENT
        result.to_commit = st.watermark
        return result
    if st.rebuild_target is not None:
        # An interrupted rebuild: finish it before anything else.
        return _rebuild_pass(ing, result, head)
    if st.watermark == head:
        result.mode = RunMode.CURRENT
        ing.retry_unreadable(head, result)
        return result
    if (
        st.watermark is not None
        and gitdiff.commit_exists(ing.root, st.watermark)
        and gitdiff.is_ancestor(ing.root, st.watermark, head)
    ):
        result.mode = RunMode.INCREMENTAL
        changes = gitdiff.diff_commits(
            ing.root, st.watermark, head, note_extensions=ing.settings.extensions
        )
        ing.apply_changes(changes, head, result)
    else:
        result.mode = RunMode.RECONCILE
        ing.reconcile(head, result)
    ing.retry_unreadable(head, result)
    with ing.writing():
        store.set_watermark(ing.conn, ing.vault.id, head)
    return result


def _behind_the_index(ing: Ingester, st: store.IndexState, tip: str) -> bool:
    """True when indexing the tip would take the shared index back: it is at a descendant of
    the tip, or at a commit this clone does not have (not fetched yet) while the tip is no newer
    than when the index moved there. A history rewritten on the branch (the index's commit
    gone for good) is followed once a newer commit arrives."""
    watermark = st.watermark
    if watermark is None or watermark == tip:
        return False
    if not gitdiff.commit_exists(ing.root, watermark):
        moved = st.watermark_at.timestamp() if st.watermark_at is not None else 0.0
        return gitdiff.commit_time(ing.root, tip) <= moved
    return gitdiff.is_ancestor(ing.root, tip, watermark)


def _rebuild_pass(ing: Ingester, result: IngestResult, head: str) -> IngestResult:
    result.mode = RunMode.REBUILD
    result.to_commit = head
    with ing.writing():
        started = store.start_rebuild(ing.conn, ing.vault.id, head)
    done = store.paths_done_since(ing.conn, ing.vault.id, started)
    ing.conn.commit()
    ing.reconcile(head, result, force=True, done=done)
    with ing.writing():
        store.set_watermark(ing.conn, ing.vault.id, head)
        store.finish_rebuild(ing.conn, ing.vault.id)
        # Vectors of text that is gone (deleted, edited or quarantined notes) are not kept.
        store.prune_embedding_cache(ing.conn)
    return result


def lower_priority() -> None:
    """Run at the lowest CPU priority from now on: nice 10 and, on Linux, the same for this
    session's autogroup (the scheduler shares CPU between sessions first, so plain nice would
    not count against the user's own session). Best effort."""
    with contextlib.suppress(OSError):
        if os.getpriority(os.PRIO_PROCESS, 0) < 10:
            os.setpriority(os.PRIO_PROCESS, 0, 10)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as fh:
        fh.write("10")


def catch_up(
    settings: Settings,
    root: Path,
    *,
    embed: bool = True,
    wait: bool = False,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
    start_db: bool | None = None,
    background: bool = False,
) -> IngestResult | None:
    """Bring the vault's index to HEAD, then fill the embedding backlog.

    Returns None when another process holds the writer lock: it has been told (the pending mark)
    to run another pass, so nothing is lost and nobody queues behind it. With `start_db` False a
    stopped bundled server is reported (DatabaseUnavailable) instead of started; None (the
    default) starts one that is merely down, never one stopped with `vaultmem db stop`. With
    `background` (git hooks, the drainer) the process lowers its priority once the text is in,
    before it embeds."""
    files = state_files(root)
    files.mark_pending()
    last: IngestResult | None = None
    while True:
        with writer(files, wait=wait, foreground=not background) as w:
            files.starting.unlink(missing_ok=True)  # a hook may start another one again
            if w is None:
                return last
            last = _run_passes(
                settings,
                root,
                w,
                embed=embed,
                progress=progress,
                embedder=embedder,
                start_db=start_db,
                background=background,
            )
            stepped_aside = background and w.waited_for()
            # A trigger may mark "pending" after our last check but before we release.
            if not stepped_aside and not w.pending():
                return last
        wait = False
        if stepped_aside:
            # A foreground command (rebuild, init, audit) waits: let it in, carry on after it.
            wait_until_let_in(files)
            wait = True


def _run_passes(
    settings: Settings,
    root: Path,
    w: Writer,
    *,
    embed: bool,
    progress: Progress | None,
    embedder: Embedder | None,
    rebuild: bool = False,
    start_db: bool | None = None,
    background: bool = False,
) -> IngestResult:
    started = time.monotonic()
    conn, vault = open_index(settings, root, start_db=start_db)
    ing = Ingester(settings, conn, vault, embedder=embedder, progress=progress)
    ing.tracker = ProgressFile(w.files)
    total = IngestResult()
    chunker = markdown.chunker_signature(settings.max_chunk_chars)
    try:
        st = store.state(conn, vault.id)
        conn.commit()
        rechunked = st.chunker == chunker
        if st.rechunk_due(chunker):
            # Indexed with other chunking (an upgrade, a new VAULTMEM_MAX_CHUNK_CHARS): stored
            # chunks no longer match what the notes parse into, so re-derive them all. Chunks
            # that did not change keep their vectors through the embedding cache.
            rebuild = True
        while True:
            # The text passes, under the vault's lease in the database (embedding needs none).
            with ing.lease.held_for():
                with ing.writing():
                    store.set_model(conn, vault.id, ing.embedder.model_id)  # what workers embed
                if rebuild:
                    rebuild = False
                    w.take_pending()
                    head = ing.tip()
                    if head is not None:
                        _merge(total, _rebuild_pass(ing, IngestResult(), head))
                while w.take_pending():
                    _merge(total, index_pass(ing, IngestResult()))
                if not rechunked:  # every note is now chunked the current way
                    with ing.writing():
                        store.set_chunker(conn, vault.id, chunker)
                    rechunked = True
            if not embed:
                # Text only (init's first pass): the summary says what the vectors still need.
                total.backlog = store.backlog_size(conn, vault.id, ing.embedder.model_id)
                conn.commit()
                break
            if background:
                lower_priority()  # the text is in; embedding must not slow the next commit
            # Pause embedding whenever a new commit arrives, so its text is searchable at once;
            # a background run also steps aside for a command waiting in the foreground.
            pause = (lambda: w.pending() or w.waited_for()) if background else w.pending
            if backlog.drain(ing, total, should_pause=pause):
                break
            if background and w.waited_for():
                break
            if not w.pending():
                break
    except VaultmemError as exc:
        total.errors.append(redact_url(str(exc)))
        _record(ing, total, started)
        conn.close()
        raise
    except Exception as exc:
        total.errors.append(redact_url(f"{type(exc).__name__}: {exc}"))
        _record(ing, total, started)
        conn.close()
        raise
    finally:
        ing.tracker.finish()
    if total.chunks_written + total.embedded + total.reused >= ANALYZE_AFTER_ROWS:
        # A build, a rebuild or a backlog drained: the planner's statistics still describe the
        # tables before it (every vector NULL, an empty lexicon), and until autovacuum gets to
        # them a one-note commit's statements are planned for a table they no longer match
        # (bench/scale.py: sequential scans of the whole vault at 5,000 notes).
        store.refresh_statistics(conn)
    if total.chunks_written:
        try:
            store.flush_word_index(conn)
        except psycopg.Error as exc:
            # Only searches' speed depends on it, and autovacuum merges the list later.
            log.warning("full-text index not merged: %s", type(exc).__name__)
            conn.rollback()
    _record(ing, total, started)
    conn.close()
    return total


# Rows a run must write (chunks, vectors) before it refreshes the planner's statistics itself.
ANALYZE_AFTER_ROWS = 1000


def _merge(total: IngestResult, part: IngestResult) -> None:
    fresh = (
        total.to_commit is None and total.from_commit is None and total.mode is RunMode.INCREMENTAL
    )
    if fresh or part.mode.rank > total.mode.rank:
        total.mode = part.mode
    total.from_commit = total.from_commit or part.from_commit
    total.to_commit = part.to_commit or total.to_commit
    for k in (
        "added",
        "updated",
        "unchanged",
        "deleted",
        "renamed",
        "quarantined",
        "skipped",
        "ignored",
        "chunks_written",
        "embedded",
        "reused",
        "second_opinion",
    ):
        setattr(total, k, getattr(total, k) + getattr(part, k))
    total.skip_reasons.update(part.skip_reasons)


def rebuild(
    settings: Settings,
    root: Path,
    *,
    embed: bool = True,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> IngestResult:
    """Re-derive every row from HEAD, delete everything stale; resumable, reuses cached vectors."""
    files = state_files(root)
    with writer(files, wait=True, foreground=True) as w:
        assert w is not None  # a waiting writer always gets the lock
        result = _run_passes(
            settings, root, w, embed=embed, progress=progress, embedder=embedder, rebuild=True
        )
    if files.pending.exists():
        # Commits that landed during the rebuild.
        more = catch_up(settings, root, embed=embed, progress=progress, embedder=embedder)
        if more is not None:
            _merge(result, more)
            result.backlog = more.backlog
    return result


def apply_changes_file(
    settings: Settings,
    root: Path,
    changes_file: Path,
    *,
    embed: bool = True,
    embedder: Embedder | None = None,
) -> IngestResult:
    """Apply a saved `git diff-tree -r -z -M` output (as the reference design's hook did).

    Contents come from the blob ids in the file. The watermark is not moved (the file does not
    say which commit it reaches); the next catch-up re-checks those paths by blob id for free."""
    raw = changes_file.read_bytes()
    changes = gitdiff.parse_diff_tree(raw)
    files = state_files(root)
    with writer(files, wait=True, foreground=True):
        started = time.monotonic()
        conn, vault = open_index(settings, root)
        ing = Ingester(settings, conn, vault, embedder=embedder)
        result = IngestResult(mode=RunMode.CHANGES_FILE)
        head = ing.tip() or ""
        try:
            with ing.lease.held_for():
                ing.apply_changes(changes, head, result)
            if embed:
                backlog.drain(ing, result)
        finally:
            _record(ing, result, started)
            conn.close()
    return result
