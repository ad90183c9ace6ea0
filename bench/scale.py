"""How ingest and search cost grows with the vault: synthetic vaults of 1k to 50k notes.

Each vault is generated (varied words drawn from a Zipf law over a 60,000-word vocabulary, notes
of one to 11 sections, one note in 500 a big one of 100+ chunks) and committed to git; then,
it measures:
  - the full build of those n notes, text only (notes/s, chunks/s, chunks per note: the same
    note-size distribution at every size, so notes/s compares like with like), then the
    backlog's vectors from the hash test embedder (no model cost; not with `--no-embed`);
  - one commit adding 1,600 notes of the same distribution (the folders the delete and rename
    below need: see `add_extras` for why they come after the build), caught up;
  - after that, every catch-up below embeds what it changes, as a commit's would (text only
    with `--no-embed`);
  - a one-note edit's catch-up (median of several commits), the tables vacuumed first (as
    autovacuum leaves them some minutes after a build);
  - a commit deleting 300 notes whose first (in diff order) is a big note, and one without
    (each three times, alternating, restored between by a revert: medians a note and a chunk);
  - `verify` and `verify --deep`;
  - one lexical search (p50 of 30 prompts of the vault's own words);
  - sequential scans of memory_lexicon, memory_primary and embedding_cache during the one-note
    catch-ups (pg_stat_user_tables; 0 means every statement walked an index);
  - with `--maintenance`: a rename of a 1,000-note folder, `gc`, `rebuild`, and the purge.
Each figure is printed with its ratio to the smallest vault's.

Usage:
  python bench/scale.py                        # 1k, 5k, 20k, 50k, with vectors (an hour and
                                               # more: the hash embedder's 50k backlog)
  python bench/scale.py --no-embed --maintenance --rebuild-max 20000 --profile-catchup 3
                                               # issue 42's figures, text only (~30 minutes)
  python bench/scale.py --sizes 1000,5000      # quicker
  python bench/scale.py --maintenance          # also rename a folder, gc, rebuild
  python bench/scale.py --maintenance --rebuild-max 20000   # no rebuild above 20k notes
  python bench/scale.py --no-embed             # text only throughout: no backlog to drain (at
                                               # 50k the hash embedder's took ~40 minutes), and
                                               # each catch-up below is its text pass only
  python bench/scale.py --replay 400           # also: the first 400 commits of tldr's history,
                                               # catch-up time per 100 commits
  python bench/scale.py --sizes 1000,5000 --profile-catchup 20
                          # also: 20 more one-note edits with pg_stat_statements on (nested
                          # statements too): per statement, calls, buffers, rows and mean time
                          # per catch-up, side by side across sizes; then the Python side's
                          # functions (cProfile, one catch-up), to see what grows with the vault
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set.
Run it from a checkout nobody edits meanwhile (a `git worktree`): it imports vaultmem lazily.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _setup import bench_env

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"
SCANNED = ("memory_lexicon", "memory_primary", "embedding_cache")
PROFILES: dict[int, tuple[dict, dict]] = {}  # size -> (statements, Python functions)
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


class Words:
    """A deterministic vocabulary with Zipf-distributed draws (as prose is)."""

    def __init__(self, seed: int = 7, size: int = 60_000) -> None:
        self.rng = np.random.default_rng(seed)
        words: set[str] = set()
        while len(words) < size:
            n = int(self.rng.integers(2, 5))
            words.add("".join(self.rng.choice(SYLLABLES, n)))
        self.words = np.array(sorted(words))
        self.rng.shuffle(self.words)
        ranks = np.arange(1, size + 1, dtype=np.float64)
        p = 1.0 / ranks**1.07
        # Draws come from one pool sampled up front: choice() with weights costs the whole
        # vocabulary per call.
        self.pool = self.rng.choice(size, 4_000_000, p=p / p.sum())
        self.at = 0

    def draw(self, n: int) -> list[str]:
        if self.at + n > len(self.pool):
            self.at = int(self.rng.integers(0, 1000))
        picked = self.words[self.pool[self.at : self.at + n]]
        self.at += n
        return list(picked)

    def sentence(self, n: int) -> str:
        return " ".join(self.draw(n)).capitalize() + "."


def note_text(words: Words, sections: int) -> str:
    out = ["# " + " ".join(words.draw(3)).title(), ""]
    for _ in range(sections):
        out += ["## " + " ".join(words.draw(2)).title(), ""]
        for _ in range(int(words.rng.integers(1, 4))):
            out.append(" ".join(words.sentence(int(words.rng.integers(6, 18))) for _ in range(3)))
            out.append("")
    return "\n".join(out)


def big_text(words: Words) -> str:
    return note_text(words, 140)  # ~140 sections of ~400-900 characters: 100+ chunks


def any_note(words: Words, i: int) -> str:
    """The vault's one note-size distribution: 1-11 sections, the `i`th note of a run a big one
    (100+ chunks) when i % 500 == 250."""
    if i % 500 == 250:
        return big_text(words)
    return note_text(words, int(words.rng.integers(1, 12)))


def make_vault(root: Path, n: int, words: Words) -> None:
    """`n` notes in 100 folders, all drawn from `any_note`, in one commit: the vault built."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    for i in range(n):
        folder = root / f"f{i % 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"note-{i:06d}.md").write_text(any_note(words, i), encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{n} notes")


def add_extras(root: Path, words: Words) -> None:
    """After the build, one commit of 1,600 notes for the measures that need them: two folders
    of 300 to delete, `del-big` led (first in diff order) by a big note, `del-small` with no big
    note, and a folder of 1,000 to rename. Drawn from `any_note` like the rest (bar those two
    rules on big notes; `moving` holds 2 big ones, 1 in 500), so the vault keeps its shape.

    They come after the build, not in it: the same 300 and 1,000 at every size keep the
    per-note delete and the rename comparable across sizes (a fixed share of the vault would
    make them 15 notes at 1k and 750 at 50k), and outside the build they leave it `n` notes of
    one distribution, so notes/s compares like with like (before, the build held them too:
    62 % of the 1k vault's notes were these, then smaller, and notes/s compared unlike work)."""
    for name in ("del-big", "del-small"):
        (root / name).mkdir()
        for j in range(300):
            if name == "del-big" and j == 0:
                (root / name / "000-big.md").write_text(big_text(words), encoding="utf-8")
                continue
            text = note_text(words, int(words.rng.integers(1, 12)))  # any_note, no big one
            (root / name / f"n{j:03d}.md").write_text(text, encoding="utf-8")
    (root / "moving").mkdir()
    for j in range(1000):
        (root / "moving" / f"m{j:04d}.md").write_text(any_note(words, j), encoding="utf-8")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "1,600 notes to delete and rename")


def seq_scans(conn) -> dict[str, int]:  # noqa: ANN001
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute(
        "SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname = ANY(%s)",
        (list(SCANNED),),
    ).fetchall()
    return {r["relname"]: int(r["seq_scan"]) for r in rows}


def note_writes(conn) -> int:  # noqa: ANN001
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT n_tup_upd + n_tup_ins + n_tup_del AS w FROM pg_stat_user_tables"
        " WHERE relname = 'memory_notes'"
    ).fetchone()
    return int(row["w"])


def settled_scans(conn, before_writes: int) -> dict[str, int]:  # noqa: ANN001
    """Scan counters once the catch-up's backend has flushed its statistics (it exits after
    the run; its writes to memory_notes show up in the same flush)."""
    for _ in range(200):
        if note_writes(conn) > before_writes:
            break
        time.sleep(0.05)
    return seq_scans(conn)


def enable_statement_stats(home: Path) -> None:
    """Load pg_stat_statements in the bench's own bundled server (a restart): the profile
    reads per-statement buffers, which say what a statement cost without the machine's load."""
    import psycopg

    from vaultmem.store import server

    url = server.start(home).replace("/vaultmem?", "/postgres?", 1)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        conn.execute("ALTER SYSTEM SET pg_stat_statements.track = 'all'")  # triggers' too
        conn.execute("ALTER SYSTEM SET track_io_timing = on")
    server.stop(home)
    server.start(home)


def chunks_of(settings, root: Path) -> int:  # noqa: ANN001
    from vaultmem.store import db

    with db.connect(settings) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        row = conn.execute(
            "SELECT count(*) AS n FROM memory_primary WHERE vault_id = %s", (vault.id,)
        ).fetchone()
        return int(row["n"])


def edit_one(root: Path, words: Words, i: int, n: int) -> None:
    """Append a sentence to one of the `n` notes (the `i`th edit) and commit it."""
    k = ((i * 13) % 100 + 100 * i) % n
    path = root / f"f{k % 100:03d}" / f"note-{k:06d}.md"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("\n" + words.sentence(12) + "\n")
    git(root, "commit", "-q", "-am", f"edit {i}")


def profile_catchups(conn, n: int, run: Callable[[], None], edit: Callable[[int], None]):  # noqa: ANN001, ANN201
    """`n` one-note edit catch-ups under pg_stat_statements and cProfile; per statement, per
    catch-up: calls, shared blocks hit + read (and read of them), rows, mean ms; per Python
    function, cumulative ms per catch-up."""
    import cProfile
    import pstats

    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    conn.execute("SELECT pg_stat_statements_reset()")
    prof = cProfile.Profile()
    cpu = 0.0
    for i in range(n):
        edit(100 + i)
        t = time.process_time()
        prof.enable()
        run()
        prof.disable()
        cpu += time.process_time() - t
    rows = conn.execute(
        "SELECT toplevel, query, calls, shared_blks_hit AS hit, shared_blks_read AS read,"
        " rows, total_exec_time FROM pg_stat_statements"
        " WHERE query NOT LIKE '%%pg_stat_statements%%'"
    ).fetchall()
    # Keyed by the statement's text: the same statement has another queryid in each size's run.
    stmts = {
        ("" if r["toplevel"] else "(nested) ") + " ".join(r["query"].split()): {
            "calls": r["calls"] / n,
            "blocks": (r["hit"] + r["read"]) / n,
            "read": r["read"] / n,
            "rows": r["rows"] / n,
            "ms": r["total_exec_time"] / max(r["calls"], 1),
            "top": r["toplevel"],
        }
        for r in rows
    }
    stats = pstats.Stats(prof)
    funcs = {
        f"{Path(f).name}:{line}({name})": ct * 1000 / n
        for (f, line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items()  # type: ignore[attr-defined]
    }
    funcs["(Python CPU per catch-up, process_time)"] = cpu * 1000 / n
    return stmts, funcs


def print_profile(sizes: list[int], profiles: dict[int, tuple[dict, dict]]) -> None:
    base, last = sizes[0], sizes[-1]
    print("\n### statements per one-note catch-up (pg_stat_statements, nested included)")
    print(
        "| statement | "
        + " | ".join(f"{n:,}: calls / blocks (read) / rows / mean ms" for n in sizes)
        + " |\n|---|"
        + "---|" * len(sizes)
    )
    keys = set().union(*(profiles[n][0] for n in sizes))

    def blocks(n: int, k: str) -> float:
        return profiles[n][0].get(k, {}).get("blocks", 0.0)

    for k in sorted(keys, key=lambda k: -(blocks(last, k) - blocks(base, k))):
        if max(blocks(n, k) for n in sizes) < 1:
            continue
        cells = []
        for n in sizes:
            s = profiles[n][0].get(k)
            cells.append(
                f"{s['calls']:.1f} / {s['blocks']:.0f} ({s['read']:.0f}) / {s['rows']:.1f}"
                f" / {s['ms']:.2f}"
                if s
                else "-"
            )
        print(f"| `{k[:150]}` | " + " | ".join(cells) + " |")
    total = {n: sum(s["blocks"] for s in profiles[n][0].values() if s["top"]) for n in sizes}
    print("| **all top-level** | " + " | ".join(f"{total[n]:.0f} blocks" for n in sizes) + " |")
    print("(a top-level statement's blocks include those of the trigger statements it fires)")
    print("\n### Python functions, cumulative ms per catch-up (cProfile), most grown first")
    print("| function | " + " | ".join(f"{n:,}" for n in sizes) + " |\n|---|" + "---|" * len(sizes))
    funcs = set().union(*(profiles[n][1] for n in sizes))

    def ms(n: int, f: str) -> float:
        return profiles[n][1].get(f, 0.0)

    cpu = "(Python CPU per catch-up, process_time)"
    print(f"| {cpu} | " + " | ".join(f"{ms(n, cpu):.1f}" for n in sizes) + " |")
    for f in sorted(funcs, key=lambda f: -(ms(last, f) - ms(base, f)))[:40]:
        print(f"| {f} | " + " | ".join(f"{ms(n, f):.1f}" for n in sizes) + " |")


TOP_STATEMENTS: dict[str, dict[int, list[str]]] = {}  # step -> size -> its costliest


def statements_of(conn, step: str, n: int, fn: Callable[[], object]) -> float:  # noqa: ANN001
    """`fn`'s time; with pg_stat_statements loaded (--profile-catchup), also its five costliest
    statements (total time, calls, blocks), kept to print at the end: what grows with the
    vault in a maintenance path."""
    loaded = conn.execute(
        "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
    ).fetchone()
    if loaded:
        conn.execute("SELECT pg_stat_statements_reset()")
    seconds = timed(fn)
    if loaded:
        rows = conn.execute(
            "SELECT toplevel, query, calls, shared_blks_hit + shared_blks_read AS blocks,"
            " rows, total_exec_time FROM pg_stat_statements"
            " WHERE query NOT LIKE '%%pg_stat_statements%%'"
            " ORDER BY total_exec_time DESC LIMIT 5"
        ).fetchall()
        TOP_STATEMENTS.setdefault(step, {})[n] = [
            f"{r['total_exec_time'] / 1000:.1f} s, {r['calls']} calls, {r['blocks']} blocks,"
            f" {r['rows']} rows: {'' if r['toplevel'] else '(nested) '}"
            + " ".join(r["query"].split())[:160]
            for r in rows
        ]
    return seconds


DELETE_ROUNDS = 3


def folder_chunks(conn, root: Path, folder: str) -> int:  # noqa: ANN001
    from vaultmem.store import db

    vault = db.find_vault(conn, root)
    assert vault is not None
    row = conn.execute(
        "SELECT count(*) AS n FROM memory_primary WHERE vault_id = %s AND path LIKE %s",
        (vault.id, folder + "/%"),
    ).fetchone()
    return int(row["n"])


def delete_rounds(conn, root: Path, catch_up: Callable[[], None]) -> dict[str, float]:  # noqa: ANN001
    """The two 300-note delete commits, DELETE_ROUNDS times each in alternating order (small
    first, then big first, ...), each folder restored by a revert commit (caught up, not timed)
    between its rounds and left deleted after the last. One commit each was too noisy to judge
    a 1.2x bar (1.03-1.29 at 1k alone). Per chunk as well as per note: `del-big`'s big note
    adds its own 100+ chunks to the 300 notes' ~1,450, work a delete must do whatever plan."""
    chunks = {name: folder_chunks(conn, root, name) for name in ("del-small", "del-big")}
    ms: dict[str, list[float]] = {name: [] for name in chunks}
    for r in range(DELETE_ROUNDS):
        order = ("del-small", "del-big") if r % 2 == 0 else ("del-big", "del-small")
        for name in order:
            git(root, "rm", "-q", "-r", name)
            git(root, "commit", "-q", "-m", f"delete {name}")
            ms[name].append(timed(catch_up) * 1000)
            if r < DELETE_ROUNDS - 1:
                git(root, "revert", "--no-edit", "HEAD")
                catch_up()
    out: dict[str, float] = {}
    for name, times in ms.items():
        out[f"delete 300 ({name}) ms/note"] = statistics.median(times) / 300
        out[f"delete 300 ({name}) ms/chunk"] = statistics.median(times) / chunks[name]
    ratios = [big / small for big, small in zip(ms["del-big"], ms["del-small"], strict=True)]
    out["delete big-first / small-only, a commit"] = statistics.median(ratios)
    out["delete big-first / small-only, a chunk"] = statistics.median(ratios) * (
        chunks["del-small"] / chunks["del-big"]
    )
    return out


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(
    work: Path,
    n: int,
    words: Words,
    maintenance: bool,
    profile: int = 0,
    embed: bool = True,
    rebuild_max: int = 10**9,
) -> dict[str, float]:
    from vaultmem.config import load_settings
    from vaultmem.embed import get_embedder
    from vaultmem.index import ingest
    from vaultmem.index.verify import verify
    from vaultmem.search import Mode, Request, retrieve
    from vaultmem.store import db

    root = work / f"vault-{n}"
    t = time.perf_counter()
    make_vault(root, n, words)
    print(f"  {n}: generated in {time.perf_counter() - t:.0f} s", flush=True)
    settings = load_settings(root)
    out: dict[str, float] = {}

    def catch_up(embed: bool = embed) -> None:
        assert ingest.catch_up(settings, root, embed=embed, wait=True) is not None

    build = timed(lambda: catch_up(embed=False))
    chunks = chunks_of(settings, root)
    out["build notes/s"] = n / build
    out["build chunks/s"] = chunks / build
    out["build chunks per note"] = chunks / n
    if embed:
        # The vectors too (the hash test embedder: no model cost), so that each edit below is a
        # commit's whole catch-up, text and embedding, with an empty backlog as a user's is.
        out["embed backlog s"] = timed(lambda: catch_up(embed=True))
    add_extras(root, words)
    seconds = timed(catch_up)
    out["add 1,600 notes notes/s"] = 1600 / seconds
    total_notes = n + 1600

    with db.connect(settings) as conn:
        conn.autocommit = True
        # Settled, as a user's vault is when they edit a note: after a build autovacuum works
        # through the new rows for minutes (at 50k, while the edits below were timed: one-note
        # catch-ups of 75 and 95 ms in two idle runs for the same blocks read). Both sizes alike.
        for table in ("memory_primary", "memory_lexicon", "memory_notes", "embedding_cache"):
            conn.execute(f"VACUUM (ANALYZE) {table}")
        edits, scans = [], {k: 0 for k in SCANNED}
        for i in range(7):
            edit_one(root, words, i, n)
            before, writes = seq_scans(conn), note_writes(conn)
            edits.append(timed(catch_up))
            after = settled_scans(conn, writes)
            for k in SCANNED:
                scans[k] += after.get(k, 0) - before.get(k, 0)
        out["one-note edit catch-up ms"] = statistics.median(edits) * 1000
        for k in SCANNED:
            out[f"seq scans of {k} (7 edits)"] = scans[k]
        if profile:
            PROFILES[n] = profile_catchups(
                conn, profile, catch_up, lambda i: edit_one(root, words, i, n)
            )

        out.update(delete_rounds(conn, root, catch_up))

        out["verify s"] = timed(lambda: verify(settings, root))
        out["verify --deep s"] = timed(lambda: verify(settings, root, deep=True))

        vault = db.find_vault(conn, root)
        assert vault is not None
        embedder = get_embedder(settings)
        prompts = [" ".join(words.draw(6)) + "?" for _ in range(30)]
        times = []
        for p in prompts:
            request = Request.of(settings, p, mode=Mode.LEXICAL)
            times.append(timed(lambda r=request: retrieve(conn, vault, r, embedder)))
        out["search p50 ms"] = statistics.median(times[5:]) * 1000

        if maintenance:
            git(root, "mv", "moving", "moved")
            git(root, "commit", "-q", "-m", "rename a folder of 1,000 notes")
            out["rename 1,000-note folder s"] = statements_of(conn, "rename", n, catch_up)
            from vaultmem import store

            out["gc s"] = statements_of(conn, "gc", n, lambda: store.collect_garbage(conn))
            if n <= rebuild_max:
                seconds = statements_of(
                    conn, "rebuild", n, lambda: ingest.rebuild(settings, root, embed=False)
                )
                out["rebuild notes/s"] = (total_notes - 600) / seconds
                out["rebuild chunks/s"] = chunks_of(settings, root) / seconds
        out["purge s"] = statements_of(
            conn, "purge", n, lambda: (db.delete_vault(conn, root), conn.commit())
        )
    shutil.rmtree(root, ignore_errors=True)
    return out


def replay(work: Path, limit: int) -> None:
    """Catch up after each of the first `limit` commits of tldr's history: time per 100."""
    from vaultmem.config import load_settings
    from vaultmem.index import ingest

    repo = work / "tldr"
    subprocess.run(["git", "clone", "-q", "-b", "replay-main", str(BUNDLE), str(repo)], check=True)
    commits = git(repo, "rev-list", "--reverse", "--first-parent", "HEAD").split()[:limit]
    settings = load_settings(repo)
    window = time.perf_counter()
    print("\n| commits | catch-up seconds per 100 commits |\n|---|---|")
    for i, c in enumerate(commits, 1):
        git(repo, "reset", "-q", "--hard", c)
        assert ingest.catch_up(settings, repo, embed=False, wait=True) is not None
        if i % 100 == 0:
            print(f"| {i - 99}-{i} | {time.perf_counter() - window:.1f} |", flush=True)
            window = time.perf_counter()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="1000,5000,20000,50000")
    ap.add_argument("--maintenance", action="store_true")
    ap.add_argument("--replay", type=int, default=0, metavar="N")
    ap.add_argument("--profile-catchup", type=int, default=0, metavar="N")
    ap.add_argument("--no-embed", action="store_true")
    ap.add_argument("--rebuild-max", type=int, default=10**9, metavar="N")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    work, external = bench_env("vaultmem-scale-", "hash")
    from vaultmem.store import server

    if args.profile_catchup:
        if external:
            raise SystemExit("--profile-catchup loads pg_stat_statements: the bundled server only")
        enable_statement_stats(Path(os.environ["VAULTMEM_HOME"]))
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.2f} on {os.cpu_count()} cores", flush=True)
    print(f"vectors: {'none (--no-embed)' if args.no_embed else 'the hash test embedder'}")
    results: dict[int, dict[str, float]] = {}
    try:
        words = Words()
        for n in sizes:
            results[n] = measure(
                work,
                n,
                words,
                args.maintenance,
                args.profile_catchup,
                embed=not args.no_embed,
                rebuild_max=args.rebuild_max,
            )
            # Each size's figures as soon as it is measured (the table comes at the end).
            print(
                f"  {n} (load {os.getloadavg()[0]:.2f}): "
                + json.dumps({k: round(v, 2) for k, v in results[n].items()}),
                flush=True,
            )
            for step, by_size in TOP_STATEMENTS.items():  # also at the end, all sizes together
                if n in by_size:
                    print(f"  {n} {step}:\n" + "\n".join(f"    {x}" for x in by_size[n]))
        base = results[sizes[0]]
        print("\n| measure | " + " | ".join(f"{n:,} notes" for n in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for key in base:
            cells = []
            for n in sizes:
                if key not in results[n]:  # a rebuild skipped above --rebuild-max
                    cells.append("-")
                    continue
                v = results[n][key]
                ratio = (
                    f" ({v / base[key]:.2f}x)"
                    if n != sizes[0] and base[key] and not key.startswith("seq")
                    else ""
                )
                cells.append(f"{v:,.1f}{ratio}" if not key.startswith("seq") else f"{v:.0f}")
            print(f"| {key} | " + " | ".join(cells) + " |")
        if PROFILES:
            print_profile(sizes, PROFILES)
        for step, by_size in TOP_STATEMENTS.items():
            print(f"\n### {step}: its five costliest statements (pg_stat_statements)")
            for n, lines in by_size.items():
                print(f"- {n:,} notes:\n" + "\n".join(f"  - {line}" for line in lines))
        if args.replay:
            replay(work, args.replay)
        print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    finally:
        if not external:
            server.stop(Path(os.environ["VAULTMEM_HOME"]))
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
