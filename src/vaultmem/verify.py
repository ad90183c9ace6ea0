"""Compare the index with the notes committed at HEAD and report every difference.

Uses the same per-file classification as the ingester, so "what should be indexed" has one
definition. Checks by blob SHA (cheap, exact): a path missing from the index, a path the index
holds that HEAD does not (a ghost), and a path indexed at another version are drift; chunks whose
text no longer matches a fresh parse of the blob are drift too when `deep` is asked for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import gitdiff, store
from .config import Settings
from .ingest import Ingester, _open
from .markdown import NoteSkipped, decode_note, parse_note
from .policy import strip_private_spans


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
    last_run: dict[str, Any] | None = None

    @property
    def drift(self) -> bool:
        return bool(
            self.missing or self.ghosts or self.outdated or self.wrong_kind or self.chunk_mismatch
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "drift": self.drift}


def _commits_behind(root: Path, watermark: str | None, head: str | None) -> int:
    if head is None or watermark == head:
        return 0
    if watermark is None or not gitdiff.commit_exists(root, watermark):
        return -1  # unknown: the watermark is not in this history
    import subprocess

    out = subprocess.run(
        ["git", "rev-list", "--count", f"{watermark}..{head}"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return int(out.stdout.strip() or 0) if out.returncode == 0 else -1


def verify(settings: Settings, root: Path, *, deep: bool = False) -> VerifyReport:
    conn, vault = _open(settings, root)
    try:
        ing = Ingester(settings, conn, vault)
        head = gitdiff.head_commit(root)
        st = store.state(conn, vault.id)
        known = store.known_paths(conn, vault.id)
        report = VerifyReport(
            head=head,
            watermark=st.watermark,
            commits_behind=_commits_behind(root, st.watermark, head),
            notes=sum(1 for k, _ in known.values() if k == "note"),
            quarantined=sum(1 for k, _ in known.values() if k == "quarantined"),
            skipped=store.skipped(conn, vault.id),
            backlog=store.backlog_size(conn, vault.id, ing.embedder.model_id),
            model_id=ing.embedder.model_id,
            last_run=st.last_run,
        )
        tree = gitdiff.ls_tree(root, head) if head else {}
        for path, (mode, blob) in tree.items():
            kind, _ = ing.classify(path, mode)
            have = known.get(path)
            if kind == "ignore":
                if have is not None:
                    report.ghosts.append(path)
                continue
            if have is None:
                report.missing.append(path)
            elif have[1] != blob:
                report.outdated.append(path)
            elif kind == "skip" and have[0] != "skipped":
                report.wrong_kind.append(path)
            elif kind == "quarantine-path" and have[0] == "note":
                report.wrong_kind.append(path)
        report.ghosts.extend(p for p in known if p not in tree)
        if deep and head:
            report.chunk_mismatch = _deep_check(ing, conn, vault.id, tree, known, settings)
        conn.commit()
        return report
    finally:
        conn.close()


def _deep_check(ing, conn, vault_id, tree, known, settings) -> list[str]:  # type: ignore[no-untyped-def]
    rows = conn.execute(
        "SELECT path, array_agg(content_hash ORDER BY chunk_index) AS hashes"
        " FROM memory_primary WHERE vault_id = %s GROUP BY path",
        (vault_id,),
    ).fetchall()
    stored = {r["path"]: list(r["hashes"]) for r in rows}
    bad: list[str] = []
    with gitdiff.BlobReader(ing.root) as reader:
        for path, (kind, _) in known.items():
            if kind != "note" or path not in tree:
                continue
            try:
                text = decode_note(reader.read(tree[path][1]), settings.max_file_bytes)
            except NoteSkipped:
                bad.append(path)
                continue
            note = parse_note(
                path, strip_private_spans(text), max_chunk_chars=settings.max_chunk_chars
            )
            if [c.content_hash for c in note.chunks] != stored.get(path, []):
                bad.append(path)
    return bad
