"""The note under scan: a bounded view of its text, the gates that skip a regex where it cannot
match, and the budget of candidate matches each rule family may examine.

Design decision: the work of a scan is bounded per input whatever the pattern. No regex is
ever handed a line longer than SCAN_LINE_CHARS (a longer line is cut into overlapping
windows), a note longer than SCAN_NOTE_CHARS is not scanned, and each rule family may examine
RULE_CANDIDATES matches per started megabyte; a note past a bound is quarantined as "too
complex to scan", never indexed unscanned. Every rule family reads the note through `_Note` and
reports `_Hit`s in its offsets, which `source_span` maps back to the note.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from re import Match, Pattern


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    rule_id: str
    value: str
    priority: int  # lower wins when two hits overlap
    preview: str | None = None


# --- bounds on the work of a scan ------------------------------------------------------------
# Python's regex engine backtracks, so even a careful pattern can cost the square of the line
# it is given. No rule is ever handed a line longer than SCAN_LINE_CHARS: a longer line is cut
# into windows of that width, each repeating the last SCAN_OVERLAP characters of the one
# before, so any secret up to SCAN_OVERLAP characters long is whole in some window. The work
# of each rule is then at most (note length / window step) x (cost of one window): linear in
# the note whatever the pattern. Two more bounds hold per note: its length, and the number of
# candidate matches each rule family may examine (per megabyte, so a long table is fine and a
# note made of nothing but keywords is not). A note past either is not scanned to the end and
# is quarantined as "too complex to scan", never indexed unscanned.
SCAN_LINE_CHARS = 8192
SCAN_OVERLAP = 2048
SCAN_NOTE_CHARS = 8_000_000
RULE_CANDIDATES = 50_000  # per family, per started megabyte
TOO_COMPLEX = "too-complex-to-scan"


@dataclass
class ScanStats:
    """What a scan handed its regexes: the deterministic measure of its work (tests, bench)."""

    chars: dict[str, int] = field(default_factory=dict)  # rule family -> characters searched
    candidates: dict[str, int] = field(default_factory=dict)  # rule family -> matches examined
    longest_line: int = 0  # the longest line any regex was given
    too_complex: list[tuple[str, str]] = field(default_factory=list)  # (rule family, why)

    def total_chars(self) -> int:
        return sum(self.chars.values())


def _windowed(text: str) -> tuple[str, list[int], list[int], list[int], int]:
    """(view, joints, segment starts in the view, the same in `text`, longest view line).

    The view is `text` with every line over SCAN_LINE_CHARS cut into overlapping windows, one
    per view line; `joints` are the view offsets of the newlines that cut added."""
    lines = text.split("\n")
    longest = max(map(len, lines))
    if longest <= SCAN_LINE_CHARS:
        return text, [], [0], [0], longest
    step = SCAN_LINE_CHARS - SCAN_OVERLAP
    pieces: list[str] = []
    joints: list[int] = []
    seg_view: list[int] = []
    seg_text: list[int] = []
    vpos = tpos = 0
    for line in lines:
        if len(line) <= SCAN_LINE_CHARS:
            if not seg_view or vpos - seg_view[-1] != tpos - seg_text[-1]:
                seg_view.append(vpos)
                seg_text.append(tpos)
            pieces.append(line)
            vpos += len(line) + 1
        else:
            starts = [*range(0, len(line) - SCAN_LINE_CHARS, step), len(line) - SCAN_LINE_CHARS]
            for k, start in enumerate(starts):
                if k:
                    joints.append(vpos - 1)
                seg_view.append(vpos)
                seg_text.append(tpos + start)
                pieces.append(line[start : start + SCAN_LINE_CHARS])
                vpos += SCAN_LINE_CHARS + 1
        tpos += len(line) + 1
    return "\n".join(pieces), joints, seg_view, seg_text, SCAN_LINE_CHARS


class _Note:
    """The text under scan, with cheap gates so a costly regex only runs where it could match.

    A gate is a few lower-case literals at least one of which every match must contain. `full`
    gates skip the regex when no literal occurs in the note; line gates run it only over the
    lines holding a literal (offsets are mapped back), which is what keeps a 1 MB note fast.
    `strict` is set for a note whose name says it holds secrets (`passwords.md`, `密码.md`):
    its `label: value` lines and table cells are held to a lower bar.

    `text` is the bounded view of the note (see SCAN_LINE_CHARS): rules work on it and report
    offsets in it; `source_span` maps them back to the note. `rule` names the rule family that
    is running, whose candidates `find` counts against RULE_CANDIDATES.
    """

    def __init__(self, text: str, strict: bool = False, stats: ScanStats | None = None) -> None:
        self.source = text
        self.text, self._joints, self._seg_view, self._seg_text, longest = _windowed(text)
        self.strict = strict
        self.stats = stats if stats is not None else ScanStats()
        self.stats.longest_line = max(self.stats.longest_line, longest)
        self.rule = "other"
        self.stopped: set[str] = set()
        self.budget = RULE_CANDIDATES * (1 + len(text) // 1_000_000)
        lowered = self.text.lower()
        # Some characters change length when lower-cased; then gating by offsets is unsafe.
        self.lower = lowered if len(lowered) == len(self.text) else None
        self._views: dict[tuple[str, ...], tuple[str, list[int], list[int]]] = {}

    def child(self, text: str) -> _Note:
        """A text derived from this note (a decoded value, two joined lines), scanned under the
        same budget."""
        inner = _Note(text, stats=self.stats)
        inner.rule, inner.budget, inner.stopped = self.rule, self.budget, self.stopped
        return inner

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        if len(self._seg_view) == 1:
            return start, end
        i = bisect_right(self._seg_view, start) - 1
        j = bisect_right(self._seg_view, max(start, end - 1)) - 1
        return (
            self._seg_text[i] + start - self._seg_view[i],
            self._seg_text[j] + end - self._seg_view[j],
        )

    def joint(self, pos: int) -> bool:
        """True if the newline at view offset `pos` was added by cutting a long line."""
        if not self._joints:
            return False
        i = bisect_right(self._joints, pos) - 1
        return i >= 0 and self._joints[i] == pos

    def cut(self, start: int, end: int) -> bool:
        """True if a match at [start, end) runs into a window's edge: it may go on beyond."""
        return bool(self._joints) and (self.joint(start - 1) or self.joint(end))

    def has(self, gate: tuple[str, ...]) -> bool:
        low = self.lower if self.lower is not None else self.text.lower()
        return any(word in low for word in gate)

    def _searched(self, chars: int) -> None:
        self.stats.chars[self.rule] = self.stats.chars.get(self.rule, 0) + chars

    def spend(self, n: int = 1) -> bool:
        """Count `n` candidates for the running rule family; False once it is over budget."""
        if self.rule in self.stopped:
            return False
        used = self.stats.candidates.get(self.rule, 0) + n
        self.stats.candidates[self.rule] = used
        if used > self.budget:
            self.stopped.add(self.rule)
            why = f"more than {self.budget:,} candidate matches for the {self.rule} rules"
            self.stats.too_complex.append((self.rule, why))
            return False
        return True

    def find(
        self, pattern: Pattern[str], gate: tuple[str, ...] = (), lines: bool = False
    ) -> Iterable[tuple[Match[str], int]]:
        """Matches of `pattern`, each with the offset to add to its positions."""
        if self.rule in self.stopped:
            return
        if not gate or self.lower is None:
            sub, shift = self.text, 0
        elif not any(word in self.lower for word in gate):
            return
        elif not lines:
            sub, shift = self.text, 0
        else:
            sub, sub_starts, starts = self._view(gate)
            self._searched(len(sub))
            for m in pattern.finditer(sub):
                if not self.spend():
                    return
                i = bisect_right(sub_starts, m.start()) - 1
                yield m, starts[i] - sub_starts[i]
            return
        self._searched(len(sub))
        for m in pattern.finditer(sub):
            if not self.spend():
                return
            yield m, shift

    def _view(self, gate: tuple[str, ...]) -> tuple[str, list[int], list[int]]:
        if gate not in self._views:
            assert self.lower is not None
            low, spans = self.lower, set()
            for word in gate:
                pos = low.find(word)
                while pos != -1:
                    end = low.find("\n", pos)
                    end = len(low) if end == -1 else end
                    spans.add((low.rfind("\n", 0, pos) + 1, end))
                    pos = low.find(word, end)
            pieces, sub_starts, starts, at = [], [], [], 0
            for start, end in sorted(spans):
                pieces.append(self.text[start:end])
                sub_starts.append(at)
                starts.append(start)
                at += end - start + 1
            self._views[gate] = ("\n".join(pieces), sub_starts, starts)
        return self._views[gate]
