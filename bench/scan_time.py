"""Scan time per note by size: the sensitive-content scan (and the whole triage, which the
ingest and MCP `get` run) on single-line and many-line notes of 16 KB, 64 KB and 1 MB.

Prints, per shape: the median of a few runs at each size, the 64 KB / 16 KB ratio (linear: 4,
quadratic: 16), the 1 MB time, and the work the scan handed its regexes (characters per note
character, the longest line any regex saw). The acceptance is a 64 KB single-line note within
4x a 16 KB one and a 1 MB note scanned in under 2 s.

Usage: python bench/scan_time.py [--runs N] [--shape NAME ...]
No database: it calls `triage` and `SensitivePolicy.scan` directly.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import string
import time
from collections.abc import Callable

from vaultmem.index.sensitive import ScanStats, SensitivePolicy
from vaultmem.index.triage import Rules, triage

KB = 1024


def _b64_image(n: int, rng: random.Random) -> str:
    data = base64.b64encode(rng.randbytes(n)).decode()[: n - 40]
    return f"![logo](data:image/png;base64,{data})"


def _words(n: int, rng: random.Random) -> str:
    words = "the river key token password of secret and a cobalt lantern is 42 api".split()
    out, size = [], 0
    while size < n:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _repeat(unit: str) -> Callable[[int, random.Random], str]:
    return lambda n, _rng: (unit * (n // len(unit) + 1))[:n]


def _alnum(n: int, rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def _lines(n: int, rng: random.Random) -> str:
    pw = "Zq9!" + _alnum(10, rng)
    parts, size = [], 0
    while size < n:
        line = rng.choice(
            [
                "A paragraph of ordinary notes about the deploy and the river.",
                "| host | user | password |",
                f"password: {pw}",
                "token: see the vault",
                "key=value pairs: a=1, b=2",
            ]
        )
        parts.append(line)
        size += len(line) + 1
    return "\n".join(parts)[:n]


SHAPES: dict[str, Callable[[int, random.Random], str]] = {
    "base64-image": _b64_image,
    "alnum-run": _alnum,
    "prose-one-line": _words,
    "separators": _repeat("=: |-_`'\"*"),
    "keyword-runs": _repeat("password: key= token secret://a:b@ "),
    "wrapped-lines": lambda n, rng: _alnum(n // 2, rng) + "\\\n" + _alnum(n // 2, rng),
    "many-lines": _lines,
}
SIZES = (16 * KB, 64 * KB, 1024 * KB)


def _median(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES))
    args = parser.parse_args()
    policy, rules = SensitivePolicy(), Rules()
    print(
        f"{'shape':16} {'scan 16K':>9} {'64K':>8} {'1M':>8} {'64K/16K':>8} "
        f"{'triage 1M':>10} {'chars/char':>10} {'longest':>8}  findings"
    )
    for name in args.shape or SHAPES:
        rng = random.Random(28)
        texts = {size: SHAPES[name](size, rng) for size in SIZES}
        scan = {
            size: _median(lambda t=text: policy.scan("n.md", t), args.runs)
            for size, text in texts.items()
        }
        big = texts[SIZES[-1]]
        data = big.encode()
        whole = _median(lambda d=data: triage("n.md", "100644", d, rules), args.runs)
        stats = ScanStats()
        findings = policy.scan("n.md", big, stats=stats)
        rule_ids = sorted({f.rule_id for f in findings})
        print(
            f"{name:16} {scan[SIZES[0]]:8.3f}s {scan[SIZES[1]]:7.3f}s {scan[SIZES[2]]:7.3f}s "
            f"{scan[SIZES[1]] / scan[SIZES[0]]:7.1f}x {whole:9.3f}s "
            f"{stats.total_chars() / len(big):10.1f} {stats.longest_line:8}  "
            f"{len(findings)} {','.join(rule_ids)[:60]}"
        )


if __name__ == "__main__":
    main()
