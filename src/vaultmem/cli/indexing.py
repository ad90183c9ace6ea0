"""Indexing commands: `ingest` (what the git hooks run), `rebuild`, `gc`, `verify`, `status`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import load_settings
from ..errors import DriftDetected
from .base import (
    ProgressBar,
    cli,
    duration,
    echo,
    json_option,
    print_json,
    print_result,
    registered_root,
    say_if_waiting,
    settings_for,
    vault_option,
    vault_root,
    writer_start,
)

if TYPE_CHECKING:
    from ..index.verify import VaultStatus


@cli.command()
@vault_option
@click.option(
    "--changes-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Apply a saved `git diff-tree -r -z -M` output instead of diffing to HEAD.",
)
@click.option("--no-embed", is_flag=True, help="Index text only; leave vectors in the backlog.")
@click.option("--from-hook", is_flag=True, hidden=True)
@click.option("--config", "config_file", type=click.Path(path_type=Path), hidden=True)
@click.option(
    "--wait", is_flag=True, help="Wait for a running ingest instead of handing over to it."
)
@json_option
def ingest(
    vault: str | None,
    changes_file: Path | None,
    no_embed: bool,
    from_hook: bool,
    config_file: Path | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Catch the index up with HEAD: what the git hooks run after each commit.

    Diffs the last indexed commit against HEAD, applies adds, edits, deletes and renames, then
    embeds new chunks. If another ingest is running, it is told to do another pass and this
    command returns at once.
    """
    from ..index import ingest as ingest_mod

    if from_hook:
        _hook_ingest(vault, config_file)
        return
    root = registered_root(vault)
    settings = load_settings(root)
    result: ingest_mod.IngestResult | None
    if wait or changes_file is not None:
        say_if_waiting(root)
    with ProgressBar(not as_json) as bar:
        if changes_file is not None:
            result = ingest_mod.apply_changes_file(settings, root, changes_file, embed=not no_embed)
        else:
            result = ingest_mod.catch_up(
                settings, root, embed=not no_embed, wait=wait, progress=bar
            )
    if result is None:
        msg = "another ingest is running for this vault; it will include the latest commits"
        if as_json:
            print_json({"handed_over": True, "message": msg})
        else:
            echo(msg)
        return
    print_result(result, as_json)


def _hook_ingest(vault: str | None, config_file: Path | None) -> None:
    """Run from a git hook: log one line, never fail (the commit already happened)."""
    from ..index.hook_run import run_from_git_hook

    run_from_git_hook(vault, config_file)
    sys.exit(0)


@cli.command()
@vault_option
@click.option("--no-embed", is_flag=True, help="Rebuild text only; leave vectors in the backlog.")
@json_option
def rebuild(vault: str | None, no_embed: bool, as_json: bool) -> None:
    """Re-derive the whole index from HEAD and delete everything stale.

    Resumable: after an interruption, running it again skips the notes already done. Vectors
    already computed for the same text and model are reused, so only a model change re-embeds.
    """
    from ..index import ingest as ingest_mod

    root = registered_root(vault)
    settings = load_settings(root)
    say_if_waiting(root)
    with ProgressBar(not as_json) as bar:
        result = ingest_mod.rebuild(settings, root, embed=not no_embed, progress=bar)
    print_result(result, as_json)


@cli.command()
@click.option(
    "--cache",
    is_flag=True,
    help="Also purge every cached vector you may delete (yours and your worker roles'; all of "
    "them for the role that owns vaultmem's tables). Chunks keep their vectors.",
)
@json_option
def gc(cache: bool, as_json: bool) -> None:
    """Delete derived rows nothing refers to: cached vectors of text no note holds any more,
    search words no chunk holds. Covers every vault of the database; `rebuild` prunes the
    vectors too. With --cache, purge the cached vectors you may delete as well."""
    from .. import store
    from ..store import db

    settings = settings_for()
    with db.connect(settings, start=writer_start(settings)) as conn:
        db.require_schema(conn)
        with store.write_transaction(conn):
            removed = store.collect_garbage(conn, cache=cache)
    if as_json:
        print_json(removed)
    else:
        echo(
            f"removed {removed['embedding_cache']} {'' if cache else 'unused '}cached vectors and "
            f"{removed['lexicon']} unused search words"
        )


@cli.command()
@vault_option
@click.option("--deep", is_flag=True, help="Also re-parse every note and compare its chunks.")
@json_option
def verify(vault: str | None, deep: bool, as_json: bool) -> None:
    """Compare the index with the notes at HEAD; exit 8 if they differ (drift).

    Reports notes missing from the index, ghosts (indexed but gone from HEAD), notes indexed at
    an older version, every skipped file with its reason, and the embedding backlog.
    """
    from ..index.verify import verify as run_verify

    root = vault_root(vault)
    report = run_verify(load_settings(root), root, deep=deep)
    if as_json:
        print_json(report.to_dict())
    else:
        behind = report.commits_behind
        echo(
            f"HEAD {str(report.head)[:12]}, indexed to {str(report.watermark)[:12]}"
            + (f" ({behind} commits behind)" if behind > 0 else "")
            + f"; {report.notes} notes, {report.quarantined} quarantined, "
            f"{len(report.skipped)} skipped, {report.backlog} chunks awaiting embeddings"
        )
        for s in report.skipped:
            echo(f"  skipped {s['path']!r}: {s['reason']}")
        for w in report.warnings:
            echo(f"  indexed with a warning {w['path']!r}: {'; '.join(w['warnings'])}")
        for label, items in (
            ("missing", report.missing),
            ("ghost", report.ghosts),
            ("outdated", report.outdated),
            ("misfiled", report.wrong_kind),
            ("chunks differ", report.chunk_mismatch),
        ):
            for p in items:
                echo(f"  {label}: {p!r}")
        if report.rechunk_due:
            echo(f"  chunks: {_RECHUNK_HINT}")
        echo(
            "drift: run `vaultmem ingest` (or `vaultmem rebuild`) to repair"
            if report.drift
            else "no drift"
        )
    if report.drift:
        raise DriftDetected("the index differs from the notes committed at HEAD")


@cli.command()
@json_option
def status(as_json: bool) -> None:
    """Show the database, the schema version and, for every vault, its counts, how far the
    index is behind HEAD, the embedding backlog, the last run's outcome and every skipped file.
    """
    from .. import vaults as registry
    from ..index.verify import status_report

    report = status_report(settings_for())
    data = report.to_dict()
    info, version, vaults = report.server, report.schema_version, report.vaults
    workers, backlog = report.workers, report.backlog_by_model
    states = report.worker_states
    # An index of a repository nobody registered (older versions indexed without registering):
    # nothing reads or updates it, and `vaults remove --purge PATH` drops it.
    known = registry.load()
    unregistered = {
        str(v.root) for v in vaults if not v.shared and known.by_path(Path(v.root)) is None
    }
    for row in data.get("vaults", []):
        row["registered"] = row.get("shared") or str(row.get("root")) not in unregistered
    if as_json:
        print_json(data)
        return
    tls = ", over TLS" if info.get("tls") else ""
    echo(f"database: {data['database']}, reachable as role {info['role']}{tls}")
    echo(f"PostgreSQL {info['postgres_version']}, pgvector {info['pgvector_version']}")
    echo(f"schema version: {version or 'none (run `vaultmem init`)'}")
    for v in vaults:
        where = f"shared, source {v.root}" if v.shared else str(v.root)
        echo(
            f"vault {v.name} ({where}): {v.notes} notes, {v.chunks} chunks, "
            f"{v.backlog} awaiting embeddings, {v.quarantined} quarantined, "
            f"{len(v.skipped_files)} skipped"
        )
        if str(v.root) in unregistered and not v.shared:
            echo(
                f"  not a registered vault: nothing reads or updates this index; "
                f"`vaultmem vaults remove --purge {v.root}` deletes it"
            )
        if v.shared and v.head is None and not v.problem:
            echo(f"  index: at {(v.watermark or 'nothing yet')[:12]} (its source indexes it)")
            continue
        _echo_vault_health(v)
    _echo_workers(workers, states, backlog)


def _echo_workers(workers: list[Any], states: list[str], backlog: dict[str, int]) -> None:
    """The embedding workers seen in the last hour, whether they run, and how fast they go."""
    if backlog:
        echo("backlog on the server: " + ", ".join(f"{n} for {m}" for m, n in backlog.items()))
    for w, state in zip(workers, states, strict=True):
        if state == "gone":
            state = "not running (its process is gone, without stopping)"
        rate = f", {w.rate:.1f} texts/s of model time" if w.rate else ""
        echo(
            f"worker {w.hostname} pid {w.pid} (role {w.role}): {state}; {w.embedded} texts "
            f"embedded, {w.reused} reused from the cache, {w.batches} batches{rate}"
        )


def _embedding_line(v: VaultStatus) -> str:
    """Which model the vectors come from, the backlog, and an ETA from the last run's rate."""
    model = v.model_id or "none yet"
    backlog = v.backlog
    line = f"model {model}; {backlog} chunks awaiting vectors"
    configured = v.configured_model_id
    if configured and configured != v.model_id:
        line = f"model {model}, settings now name {configured}: the next ingest re-embeds"
    live = v.embedding_progress
    if live is not None:
        done, total, rate = live.get("done", 0), live.get("total", 0), live.get("rate")
        line += f"; embedding now (pid {live.get('pid')}): {done} of {total} done"
        if rate:
            line += f", {rate:.1f} chunks/s, about {duration(backlog / rate)} left"
        return line
    run = v.last_run or {}
    embedded, secs = run.get("embedded") or 0, run.get("embed_seconds") or 0
    if v.ingest_running:
        # A writer holds the lock but has not reported embedding progress: its text pass (a
        # hook's catch-up, `ingest`, `rebuild`) comes first, the vectors next.
        return line + (
            "; an ingest is running (text first, then these vectors)"
            if backlog
            else "; an ingest is running"
        )
    if backlog:
        line += "; no drainer is running: `vaultmem ingest` (or the next commit) resumes it"
        if embedded and secs:
            rate = embedded / secs
            line += f" (about {duration(backlog / rate)} at the last run's {rate:.1f} chunks/s)"
    return line


_RECHUNK_HINT = (
    "built by another vaultmem version or chunk size; run `vaultmem ingest` to re-chunk every"
    " note (unchanged chunks keep their vectors)"
)


def _config_path() -> Path:
    from .. import vaults

    return vaults.config_path()


def _echo_vault_health(v: VaultStatus) -> None:
    """The lines of `status` that make a silent failure visible."""
    mark, head, behind = (v.watermark or "")[:12], (v.head or "")[:12], v.commits_behind
    if v.problem:
        where = f"indexed to {mark or 'nothing yet'}; {v.problem}"
    elif not v.head:
        where = "no commits yet"
    elif behind == 0:
        where = f"indexed to {mark} = HEAD" + ("" if v.rechunk_due else " (up to date)")
    elif behind is not None and behind > 0:
        where = f"BEHIND: indexed to {mark}, HEAD is {head}, {behind} commits behind"
    elif mark:
        where = f"BEHIND: indexed to {mark}, which is not in HEAD's history (HEAD is {head})"
    else:
        where = f"BEHIND: nothing indexed yet, HEAD is {head}"
    if behind:
        where += ": run `vaultmem ingest`"
    echo(f"  index: {where}")
    if not v.registered:
        echo(
            "  registry: not a registered vault, so no agent reads it "
            "(`vaultmem init --vault PATH` registers it)"
        )
    if v.ignored_vault_env:
        echo(
            f"  settings: ignored in the vault's .env: {', '.join(v.ignored_vault_env)} (a "
            "vault's .env may set indexing options only; put the rest in the environment or "
            f"{_config_path()})"
        )
    if v.rechunk_due:
        echo(f"  chunks: {_RECHUNK_HINT}")
    run = v.last_run
    if run:
        order = ("added", "updated", "unchanged", "deleted", "renamed", "quarantined", "skipped")
        got = run.get("counts") or {}
        counts = ", ".join(f"{got[k]} {k}" for k in order if k in got)
        errors = run.get("errors") or []
        outcome = f"FAILED: {'; '.join(errors)}" if errors else "ok"
        echo(
            f"  last run: {run.get('finished_at')} {run.get('mode')} "
            f"to {str(run.get('to_commit') or '')[:12]} in {run.get('seconds')} s, {outcome}; "
            f"{counts}; {run.get('embedded', 0)} chunks embedded, "
            f"{run.get('backlog', 0)} awaiting embeddings"
        )
    else:
        echo("  last run: none recorded")
    echo(f"  embeddings: {_embedding_line(v)}")
    if v.second_opinion:
        filled = v.chunks - v.second_opinion_missing
        line = f"  second opinion: {filled} of {v.chunks} chunks have its vectors"
        if v.second_opinion_missing:
            line += " (filled after the embeddings by the next ingest, or by the warm service)"
        echo(line)
    hook = v.hook_log_last
    if hook and " error" in hook:
        echo(f"  last hook: {hook}")
    for s in v.skipped_files:
        echo(f"  skipped {s['path']!r}: {s['reason']}")
    for w in v.warnings:
        echo(f"  indexed with a warning {w['path']!r}: {'; '.join(w['warnings'])}")
