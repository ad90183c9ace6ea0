"""Run a corpus of samples through the real pipeline and score it: shared by the acceptance test
(tests/test_sensitive_corpus.py) and bench/sensitive.py.

A real git vault with one note per sample, the real catch-up into the real PostgreSQL, then
what a user or the agent can see: which notes reached search, every vaultmem table as text,
the hook log, and the output of `vaultmem query` / `context` / `audit list` for prompts made of
the secrets themselves. Nothing is mocked.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from click.testing import CliRunner

from support.sensitive_corpus_formats import Sample
from vaultmem.cli import cli
from vaultmem.config import load_settings
from vaultmem.index import audit, ingest, statedir
from vaultmem.store import db

TABLES = (
    "memory_notes",
    "memory_primary",
    "memory_lexicon",
    "embedding_cache",
    "memory_skipped",
    "memory_secure_audit",
    "audit_allow",
    "index_state",
)


@dataclass
class Score:
    secrets: int = 0
    caught: int = 0
    benign: int = 0
    flagged: int = 0
    missed: list[str] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.caught / self.secrets if self.secrets else 1.0

    @property
    def fp_rate(self) -> float:
        return self.flagged / self.benign if self.benign else 0.0


@dataclass
class Report:
    by_split: dict[str, Score]
    by_category: dict[tuple[str, str], Score]
    leaks: list[tuple[str, str]]  # (where, sample id) for secrets that were caught


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def build_vault(root: Path, samples: Iterable[Sample]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    for s in samples:
        p = root / s.path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(s.text, encoding="utf-8")
    _git(root, "add", "-A")
    _git(root, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", "corpus")


def _pieces(value: str) -> list[str]:
    """The secret, and its long alphanumeric runs lower-cased (what full-text search keeps)."""
    runs = re.findall(r"[A-Za-z0-9]{10,}", value)
    return [value] + [p.lower() for p in runs if re.search(r"\d", p) and re.search(r"[A-Za-z]", p)]


def evaluate(root: Path, samples: list[Sample], *, prompts: int | None = None) -> Report:
    """Index `samples` (already committed in `root`) and score them. `prompts` limits how many
    secrets are also tried as `query` / `context` prompts (None: all)."""
    settings = load_settings(root)
    ingest.catch_up(settings, root, wait=True)
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        quarantined = {q.path for q in audit.list_quarantined(conn, vault.id)}
        indexed = {
            r["path"]
            for r in conn.execute(
                "SELECT path FROM memory_notes WHERE vault_id = %s", (vault.id,)
            ).fetchall()
        }
        dumps = {}
        for table in TABLES:
            cols = (
                "t::text"
                if table != "memory_secure_audit"
                else "(t.risk, t.rule_ids, t.findings)::text"
            )
            rows = conn.execute(f"SELECT {cols} AS row FROM {table} t").fetchall()
            dumps[f"table {table}"] = "\n".join(r["row"] for r in rows)
        audit_paths = "\n".join(quarantined)
        conn.commit()

    by_split: dict[str, Score] = defaultdict(Score)
    by_category: dict[tuple[str, str], Score] = defaultdict(Score)
    hidden_leaks = _hidden_leaks(dumps, [s for s in samples if s.expect == "hidden"])
    for s in samples:
        for score in (by_split[s.split], by_category[(s.split, s.category)]):
            if s.is_secret:
                score.secrets += 1
                kept_out = s.path in quarantined and s.path not in indexed
                if s.expect == "hidden":
                    kept_out = kept_out or s.id not in hidden_leaks
                if kept_out:
                    score.caught += 1
                else:
                    score.missed.append(s.id)
            else:
                score.benign += 1
                if s.path not in indexed:
                    score.flagged += 1
                    score.false_positives.append(s.id)

    outputs: dict[str, str] = {}
    runner = CliRunner()
    secret_samples = [s for s in samples if s.is_secret]
    for s in secret_samples[: prompts if prompts is not None else len(secret_samples)]:
        for args in (("query", s.secrets[0][:200]), ("context", s.secrets[0][:200])):
            result = runner.invoke(cli, [*args, "--vault", str(root)])
            outputs[f"{args[0]} {s.id}"] = result.output
    result = runner.invoke(cli, ["audit", "list", "--vault", str(root)])
    outputs["audit list"] = result.output
    outputs["hook log"] = (
        statedir.state_files(root).log.read_text(encoding="utf-8")
        if statedir.state_files(root).log.exists()
        else ""
    )
    visible = {**dumps, **{f"output {k}": v for k, v in outputs.items()}}
    leaks: list[tuple[str, str]] = []
    missed = {m for score in by_split.values() for m in score.missed}
    for s in secret_samples:
        if s.id in missed:
            continue  # counted as a miss; what a missed note leaks is known
        pieces = [p for v in s.secrets for p in _pieces(v)]
        for where, text in visible.items():
            low = text.lower()
            if any(p in text or p.lower() in low for p in pieces):
                leaks.append((where, s.id))
        # The audit table keys a quarantined file by its path: a token in a file name is there.
        if s.kind not in _NAMED_SECRETS and any(p in audit_paths for p in pieces):
            leaks.append(("table memory_secure_audit path", s.id))
    return Report(dict(by_split), dict(by_category), leaks)


# Kinds whose secret is written into the file name: the audit table's key holds it.
_NAMED_SECRETS = ("token-in-filename", "password-in-filename")


def _hidden_leaks(dumps: dict[str, str], samples: list[Sample]) -> set[str]:
    """Ids of `<private>`-span samples whose hidden text reached a table."""
    return {
        s.id
        for s in samples
        for text in dumps.values()
        if any(p in text or p.lower() in text.lower() for v in s.secrets for p in _pieces(v))
    }


def table(report: Report) -> str:
    """The per-category table, one block per split."""
    lines = [f"{'split':8} {'category':20} {'recall':>16} {'false positives':>18}"]
    for split in ("dev", "heldout", "late", "dev28", "held28"):
        cats = sorted(c for (sp, c) in report.by_category if sp == split)
        for cat in cats:
            sc = report.by_category[(split, cat)]
            rec = f"{sc.caught}/{sc.secrets} {sc.recall:6.1%}" if sc.secrets else "-"
            fp = f"{sc.flagged}/{sc.benign} {sc.fp_rate:6.1%}" if sc.benign else "-"
            lines.append(f"{split:8} {cat:20} {rec:>16} {fp:>18}")
        if split in report.by_split:
            sc = report.by_split[split]
            lines.append(
                f"{split:8} {'ALL':20} {f'{sc.caught}/{sc.secrets} {sc.recall:6.1%}':>16} "
                f"{f'{sc.flagged}/{sc.benign} {sc.fp_rate:6.1%}':>18}"
            )
    return "\n".join(lines)
