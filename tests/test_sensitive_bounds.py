"""The sensitive scan's work is bounded: per line, per note and per rule family, in the
ingest's triage and in MCP `get`'s `decide` alike. Checked with what the scan handed its regexes
(ScanStats: a deterministic measure), never with a clock: bench/scan_time.py prints the times."""

from __future__ import annotations

import base64
import random
import string
import threading
from collections.abc import Callable

import pytest

from vaultmem.index import decision, gitdiff, sensitive
from vaultmem.index.sensitive import (
    RULE_CANDIDATES,
    SCAN_LINE_CHARS,
    TOO_COMPLEX,
    ScanStats,
    SensitivePolicy,
)
from vaultmem.index.sensitive import note as scanned_note
from vaultmem.index.triage import Index, Quarantine, Rules, triage

POLICY = SensitivePolicy()


def _alnum(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


# The shapes that made the old rules quadratic or worse: a long token run ending a line with
# another after it (the wrapped-line rule), runs of blanks after a label, an inline image, a
# key followed by a long lowercase run (the code-name rule, exponential), repeated openers.
SHAPES: dict[str, Callable[[int], str]] = {
    "wrapped": lambda n: _alnum(n - 20) + "\\\nAbcdefgh12345678 tail\n",
    "blank-runs": lambda n: ("password" + " " * 200 + "x ") * (n // 210),
    "image": lambda n: (
        "![x](data:image/png;base64,"
        + base64.b64encode(random.Random(1).randbytes(n * 3 // 4)).decode()
        + ")"
    ),
    "openers": lambda n: ("<private " + "eyJ" + "curl -u " + "password={") * (n // 30),
    "label-spaces": lambda n: "a" + " " * (n - 10) + ": x",
}


def _stats(text: str) -> ScanStats:
    stats = ScanStats()
    POLICY.scan("n.md", text, stats=stats)
    return stats


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_no_regex_is_handed_a_line_longer_than_the_window(shape: str) -> None:
    text = SHAPES[shape](60_000)
    stats = _stats(text)
    assert stats.longest_line <= SCAN_LINE_CHARS
    # Every family searches at most a window's worth of overlap more than the note, per regex:
    # linear in the note, whatever the shape.
    assert stats.total_chars() <= 60 * len(text)


def test_work_per_note_character_does_not_grow_with_the_note() -> None:
    small, big = SHAPES["wrapped"](16_384), SHAPES["wrapped"](131_072)
    per_small = _stats(small).total_chars() / len(small)
    per_big = _stats(big).total_chars() / len(big)
    assert per_big <= per_small * 1.5


def _finishes(fn: Callable[[], object]) -> bool:
    """Run `fn` in a thread and wait for it to say it is done (a generous wait: the old
    code-name pattern backtracked exponentially and never came back)."""
    done = threading.Event()

    def run() -> None:
        fn()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(120)


def test_a_long_lowercase_value_under_a_secret_key_is_scanned() -> None:
    text = "api_key = " + "abcdefghij" * 8 + "1\nSECRET = " + "q" * 90 + "Z\n"
    assert _finishes(lambda: POLICY.scan("n.md", text))


def test_a_note_with_too_many_candidates_is_quarantined_as_too_complex(monkeypatch) -> None:
    assert RULE_CANDIDATES >= 50_000  # a long real table stays well within the budget
    monkeypatch.setattr(scanned_note, "RULE_CANDIDATES", 500)
    text = "password: x\n" * 510
    findings = POLICY.scan("n.md", text)
    complex_ = [f for f in findings if f.rule_id == TOO_COMPLEX]
    assert complex_ and complex_[0].category == "unscanned"
    assert "too complex to scan" in complex_[0].masked
    outcome = triage("n.md", "100644", text.encode(), Rules())
    assert isinstance(outcome, Quarantine)
    assert TOO_COMPLEX in [f.rule_id for f in outcome.findings]


def test_a_note_longer_than_the_scan_bound_is_quarantined_unscanned(monkeypatch) -> None:
    monkeypatch.setattr(sensitive, "SCAN_NOTE_CHARS", 10_000)
    outcome = triage("n.md", "100644", ("ordinary prose line\n" * 1000).encode(), Rules())
    assert isinstance(outcome, Quarantine)
    assert [f.rule_id for f in outcome.findings] == [TOO_COMPLEX]
    assert "characters; the scan stops at 10,000" in outcome.findings[0].masked


def test_an_inline_image_is_indexed_and_a_secret_beside_it_still_found() -> None:
    image = SHAPES["image"](100_000)
    assert isinstance(triage("n.md", "100644", image.encode(), Rules()), Index)
    token = "ghp_" + _alnum(36, seed=3)
    # The token sits across the first window edge of the long line: the overlap holds it.
    line = image[: SCAN_LINE_CHARS - 10] + " " + token + " " + image[SCAN_LINE_CHARS:]
    outcome = triage("n.md", "100644", line.encode(), Rules())
    assert isinstance(outcome, Quarantine)
    assert [(f.rule_id, f.line) for f in outcome.findings] == [("github-token", 1)]


def test_a_secret_seen_in_two_windows_is_one_finding() -> None:
    token = "ghp_" + _alnum(36, seed=4)
    line = "x" * (SCAN_LINE_CHARS - 1000) + " " + token + " " + "y" * 20_000
    findings = POLICY.scan("n.md", f"intro\n{line}\n")
    assert [(f.rule_id, f.line) for f in findings] == [("github-token", 2)]


def test_mcp_gets_decision_is_the_bounded_scan(conn, monkeypatch) -> None:
    """MCP `get` asks `decision.decide`, which runs the same bounded triage: a note with a
    60,000-character line is decided with no regex handed more than a window."""
    longest: list[int] = []
    windowed = scanned_note._windowed

    def spy(text: str) -> tuple[str, list[int], list[int], list[int], int]:
        out = windowed(text)
        longest.append(out[4])
        return out

    monkeypatch.setattr(scanned_note, "_windowed", spy)
    data = SHAPES["wrapped"](60_000).encode()
    entry = gitdiff.TreeEntry("long.md", "100644", "0" * 40)
    outcome = decision.decide(conn, 0, entry, Rules(), lambda: data)
    assert isinstance(outcome, Index)
    assert longest and max(longest) <= SCAN_LINE_CHARS
