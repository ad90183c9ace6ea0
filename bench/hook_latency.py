"""How much vaultmem's git hooks add to each commit: per-commit wall time with hooks vs without.

Two copies of one medium vault (tldr pages from the replay bundle, else synthetic notes) in a
private VAULTMEM_HOME with its own bundled server. Copy A has no hooks; copy B has the real hooks
(`vaultmem init`, already indexed). Each gets the same tight loop of one-small-note commits
(`git commit` timed alone), so B's background ingesters compete with its own next commits, as
they would for a user. Also times the post-commit hook script on its own. Target: added <= 50 ms.

Run: `python bench/hook_latency.py` (options: --notes 500 --commits 50 --provider hash).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(os.environ.get("VAULTMEM_BENCH_DATA", "/work/shared/data"))
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def run(cmd: list[str], cwd: Path | None = None, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, **kw)


def vaultmem(*args: str) -> str:
    return run([sys.executable, "-m", "vaultmem", *args]).stdout


def notes_source(n: int, work: Path) -> list[tuple[str, str]]:
    """(path, text) of n notes: tldr pages if the bundle is there, else generated ones."""
    bundle = DATA / "tldr-history.bundle"
    if bundle.exists():
        clone = work / "tldr"
        run(["git", "clone", "-q", "-b", "replay-main", str(bundle), str(clone)])
        pages = sorted((clone / "pages").rglob("*.md"))[:n]
        return [(str(p.relative_to(clone)), p.read_text(encoding="utf-8")) for p in pages]
    return [(f"notes/n{i:05}.md", f"# Note {i}\n\n" + "some words " * 80) for i in range(n)]


def make_vault(root: Path, notes: list[tuple[str, str]]) -> None:
    root.mkdir(parents=True)
    run(["git", "init", "-q", "-b", "main"], cwd=root)
    for path, text in notes:
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    run(["git", "add", "-A"], cwd=root)
    run(["git", "commit", "-qm", "medium vault"], cwd=root)


def commit_loop(root: Path, count: int, tag: str, pace: float = 0.0) -> list[float]:
    """`count` commits of one small new note each; the seconds each `git commit` took.

    `pace` seconds pass between commits (untimed), as when a person commits."""
    times = []
    for i in range(count):
        time.sleep(pace)
        (root / "inbox").mkdir(exist_ok=True)
        (root / "inbox" / f"{tag}-{i:03}.md").write_text(f"# {tag} {i}\n\nsmall note {i}\n")
        run(["git", "add", "-A"], cwd=root)
        started = time.perf_counter()
        run(["git", "commit", "-qm", f"{tag} {i}"], cwd=root)
        times.append(time.perf_counter() - started)
    return times


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def wait_indexed(root: Path, timeout: float = 600) -> float:
    """Seconds until the index of `root` reaches HEAD and no pass is pending."""
    head = run(["git", "rev-parse", "HEAD"], cwd=root).stdout.strip()
    pending = root / ".git" / "vaultmem" / "pending"
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        vaults = json.loads(vaultmem("status", "--json"))["vaults"]
        mark = next((v["watermark"] for v in vaults if Path(v["root"]) == root.resolve()), None)
        if mark == head and not pending.exists():
            return time.perf_counter() - started
        time.sleep(0.25)
    raise SystemExit(f"the index of {root} did not reach HEAD within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=500, help="notes in the medium vault")
    parser.add_argument("--commits", type=int, default=50, help="commits per side")
    parser.add_argument("--provider", default="hash", help="embedding provider for the hooks")
    parser.add_argument(
        "--pace", type=float, default=0.0, help="seconds between commits (0: a tight loop)"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vaultmem-bench-"))
    work.chmod(0o755)  # the bundled server runs as its own OS user when run as root
    home = work / "home"
    home.mkdir()
    home.chmod(0o755)
    for name in list(os.environ):
        if name.startswith("VAULTMEM_") or name == "DATABASE_URL":
            del os.environ[name]
    os.environ.update(GIT_ENV)
    os.environ["VAULTMEM_HOME"] = str(home)
    os.environ["VAULTMEM_EMBEDDING_PROVIDER"] = args.provider
    try:
        vaultmem("db", "start")
        notes = notes_source(args.notes, work)
        plain, hooked = work / "plain", work / "hooked"
        make_vault(plain, notes)
        make_vault(hooked, notes)
        t = time.perf_counter()
        vaultmem("init", "--vault", str(hooked))  # hooks + first full index
        print(f"vault: {len(notes)} notes; initial index {time.perf_counter() - t:.1f} s "
              f"({args.provider} embedder)")  # fmt: skip

        without = commit_loop(plain, args.commits, "plain", args.pace)
        with_hooks = commit_loop(hooked, args.commits, "hooked", args.pace)
        settle = wait_indexed(hooked)

        hook = hooked / ".git" / "hooks" / "post-commit"
        alone = []
        for _ in range(20):
            started = time.perf_counter()
            run([str(hook)], cwd=hooked)
            alone.append(time.perf_counter() - started)
        wait_indexed(hooked)

        ms = lambda v: v * 1000  # noqa: E731
        m0, m1 = statistics.median(without), statistics.median(with_hooks)
        loop = f"one every {args.pace:g} s" if args.pace else "tight loop"
        print(f"{args.commits} commits per side, {loop}; load average {os.getloadavg()[0]:.1f} "
              f"on {os.cpu_count()} CPUs")  # fmt: skip
        print(f"{'':26}{'median':>10}{'p95':>10}")
        print(f"{'commit without hooks':26}{ms(m0):>8.1f}ms{ms(p95(without)):>8.1f}ms")
        print(f"{'commit with hooks':26}{ms(m1):>8.1f}ms{ms(p95(with_hooks)):>8.1f}ms")
        print(f"{'post-commit hook alone':26}{ms(statistics.median(alone)):>8.1f}ms"
              f"{ms(p95(alone)):>8.1f}ms")  # fmt: skip
        added, added95 = ms(m1 - m0), ms(p95(with_hooks) - p95(without))
        print(f"added per commit: median {added:+.1f} ms, p95 {added95:+.1f} ms "
              f"(target <= 50 ms: {'met' if added <= 50 else 'MISSED'})")  # fmt: skip
        print(f"index reached HEAD {settle:.1f} s after the last of {args.commits} commits")
    finally:
        subprocess.run([sys.executable, "-m", "vaultmem", "db", "stop"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
