"""What the agent receives for one prompt: the gate's kept notes turned into delivered items
(the chunk whole, the passage that matched, or a one-line pointer) within one character budget.

Every reader builds its answer here (`plan`): `vaultmem context` and the hook (cold and warm),
the wrapper's session hook, `vaultmem query` and MCP `search`, so all of them show the same
items in the same order with the same delivery; `render.render_plan` turns a plan into the
fenced blocks.

Design decisions:
- Passages, not whole chunks. A chunk is up to 1,500 characters; the line that answers is
  often one of them (a conversation, a meeting log). An item is the chunk's best lines by the
  prompt's words (each line scored by the rarity of the search terms it holds, tokenised as the
  index tokenises), widened to its neighbours up to the item's room, with the file lines they
  came from so the agent can `get` around them. A chunk that fits its room goes whole.
- Value first. The best item gets the most room (ROOMS), the gate's pointer band the least; when
  the block is over budget the weakest item shrinks first, then becomes a pointer line, and only
  pointers beyond the budget are left out, each with its reason (`Plan.left_out`). A pointer
  line is at most POINTER_LINE characters: titles and headings are cut, never the path.
- Once per session. A chunk already delivered whole or as a passage in this session (`seen`)
  comes back once as a one-line reminder, not its text again, and after that not at all; a
  pointer is offered once. Both are named in `Plan.left_out` when left out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from ..embed.second_opinion import opinion_lines
from ..index.lexical import matched_words, tokens
from ..search.hits import Delivery
from . import render

if TYPE_CHECKING:
    from ..search import Hit


class Form(StrEnum):
    """How an item reaches the agent."""

    TEXT = "text"  # the matched chunk whole
    PASSAGE = "passage"  # the chunk's lines that matched, with their neighbours
    POINTER = "pointer"  # one line: path, title, heading, why; read it with MCP `get`


# Room (characters of body text) for the text band's items, best first, and for one of the
# gate's passage band: the best answer gets most of the block.
ROOMS = (900, 450, 300)
PASSAGE_ROOM = 220
# Below this much body an item says less than its pointer line: it becomes one.
MIN_BODY = 80
# What a term the gate does not count (a one- or two-letter Latin word) weighs in a line.
UNCOUNTED_WEIGHT = 0.1
# A pointer line's most characters (the path is never cut: a long one makes a longer line).
POINTER_LINE = render.POINTER_LINE


@dataclass(frozen=True)
class Item:
    """One delivered note: where it is, how it is delivered, and what the agent reads."""

    path: str
    title: str
    heading: str
    commit: str
    form: Form
    body: str  # the text delivered ("" for a pointer)
    lines: tuple[int, int] | None  # the file lines the body spans (1-based), where known
    why: str  # the words it shares with the prompt (as indexed), or what else matched
    rank: int  # 1-based place in the gate's kept list
    attrs: Mapping[str, str] = field(default_factory=dict)  # provenance (`source="agent"`…)
    reminder: bool = False  # delivered in full earlier in this session
    key: str = ""  # what `seen` remembers: the path and the chunk's content hash

    @property
    def source(self) -> str | None:
        return self.attrs.get("source")


@dataclass(frozen=True)
class LeftOut:
    """A kept note the block does not hold, and why (the log and `--explain` say it)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Plan:
    items: tuple[Item, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    @property
    def delivered(self) -> tuple[Item, ...]:
        """Items with text (whole or passage), best first."""
        return tuple(i for i in self.items if i.form is not Form.POINTER)

    @property
    def pointers(self) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.form is Form.POINTER)

    @property
    def remembered(self) -> tuple[str, ...]:
        """What a session's ledger records of this plan: chunks given in full, and chunks
        offered as a pointer or a reminder (`offered_key`)."""
        return tuple(i.key for i in self.delivered) + tuple(
            offered_key(i.key) for i in self.pointers
        )


def seen_key(hit: Hit) -> str:
    return f"{hit.path}\0{hit.content_hash}"


def offered_key(key: str) -> str:
    """What the ledger remembers of a chunk offered as a pointer or a reminder."""
    return f"offered\0{key}"


def plan(
    hits: Sequence[Hit],
    *,
    prompt: str = "",
    weights: Mapping[str, float] | None = None,
    budget: int = 2500,
    provenance: Mapping[str, Mapping[str, str]] | None = None,
    seen: Collection[str] = (),
    passage_coverage: float = math.inf,
) -> Plan:
    """The items for `hits` (the gate's kept hits, best first) within `budget` characters of
    rendered output (both blocks, tags and all).

    `weights` are the search terms' rarity in the vault (`QueryStats.rarity`): a line holding a
    rare term is a better passage than one holding a common one. `seen` holds the keys
    (`seen_key`) of chunks delivered earlier in this session. A hit of the gate's passage band
    gets PASSAGE_ROOM, and a pointer if its lines hold none of the prompt's words (unless it is
    in another language: its match is by meaning). One of the pointer band gets such a passage
    too when the passage itself holds at least `passage_coverage` of the prompt's word rarity
    (the judging calibration's, `Calibration.passage_coverage`): the evidence of the lines,
    not of the note as a whole."""
    weights = weights or {}
    items: list[Item] = []
    left: list[LeftOut] = []
    text_rank = 0
    for rank, hit in enumerate(hits, 1):
        if not hit.text.strip():
            continue
        attrs = dict((provenance or {}).get(hit.path) or {})
        key = seen_key(hit)
        why = reason(hit, prompt, weights)
        base = Item(
            hit.path,
            hit.title,
            hit.heading,
            hit.commit_sha,
            Form.POINTER,
            "",
            None,
            why,
            rank,
            attrs,
            key=key,
        )
        if key in seen:
            if offered_key(key) in seen:  # its reminder too: nothing new to say
                left.append(LeftOut(hit.path, "given earlier in this session"))
            else:
                items.append(replace(base, why="given earlier in this session", reminder=True))
            continue
        if hit.delivery is Delivery.TEXT:
            cut = passage(hit, weights, ROOMS[min(text_rank, len(ROOMS) - 1)])
            text_rank += 1
        elif hit.delivery is Delivery.PASSAGE:
            cut = passage(hit, weights, PASSAGE_ROOM)
            if not cut.located and not _other_script(hit):
                items.append(base)  # its lines hold none of the prompt's words: say where it is
                continue
        elif math.isfinite(passage_coverage) and hit.matched:
            cut = passage(hit, weights, PASSAGE_ROOM)
            if not (cut.located and cut.coverage >= passage_coverage):
                items.append(base)
                continue
        else:
            items.append(base)
            continue
        items.append(
            replace(
                base, form=Form.TEXT if cut.whole else Form.PASSAGE, body=cut.text, lines=cut.lines
            )
        )
    for item in [i for i in items if i.form is Form.POINTER and not i.reminder]:
        if offered_key(item.key) in seen:
            items.remove(item)
            left.append(LeftOut(item.path, "offered earlier in this session"))
    return fit(items, hits, weights, budget, left)


def _other_script(hit: Hit) -> bool:
    return hit.lexical_imputed


def fit(
    items: list[Item],
    hits: Sequence[Hit],
    weights: Mapping[str, float],
    budget: int,
    left: list[LeftOut] | None = None,
) -> Plan:
    """Shrink the weakest items until the rendered blocks fit `budget`: a passage loses lines,
    then becomes a pointer; pointers beyond the budget (or MAX_POINTERS) are left out (added to
    `left`, the notes already left out and why)."""
    by_path = {h.path: h for h in hits}
    left = list(left or [])
    # Too many pointer lines: the weakest beyond MAX_POINTERS go (k is 5 by default: rare).
    pointers = [i for i in items if i.form is Form.POINTER]
    for extra in pointers[render.MAX_POINTERS :]:
        items.remove(extra)
        left.append(LeftOut(extra.path, f"more than {render.MAX_POINTERS} pointers"))
    while items and (over := render.plan_size(items) - budget) > 0:
        shrunk = False
        for idx in range(len(items) - 1, -1, -1):
            item = items[idx]
            if item.form is Form.POINTER:
                continue
            room = len(render.escape_text(item.body)) - over - 1
            if room >= MIN_BODY:
                cut = passage(by_path[item.path], weights, room)
                if cut.text and len(cut.text) < len(item.body):
                    items[idx] = replace(item, form=Form.PASSAGE, body=cut.text, lines=cut.lines)
                    shrunk = True
                    break
            items[idx] = replace(item, form=Form.POINTER, body="", lines=None)
            shrunk = True
            break
        if not shrunk:
            gone = items.pop()  # every item a pointer line and still over: the weakest goes
            left.append(LeftOut(gone.path, f"over the block's budget of {budget} characters"))
    return Plan(tuple(items), tuple(left))


@dataclass(frozen=True)
class Cut:
    text: str
    lines: tuple[int, int] | None
    whole: bool  # the chunk's whole text
    located: bool  # chosen by the prompt's words (else the chunk's first lines)
    coverage: float = 0.0  # the share of the prompt's word rarity its lines hold


def passage(hit: Hit, weights: Mapping[str, float], room: int) -> Cut:
    """The chunk's best lines for the prompt within `room` characters (escaped).

    Each line scores the rarity of the prompt's terms it holds; the best line is widened to the
    neighbour that scores more (after it on a tie) while the passage fits. A chunk whose lines
    hold none of them (another language: the match was by meaning) gives the line the second
    opinion read closest to the prompt (`Hit.agnostic_line`), else its first lines."""
    lines = hit.text.strip("\n").split("\n")
    offset = _leading_blank(hit.text)
    size = [len(render.escape_text(line)) + 1 for line in lines]
    matched = hit.matched
    total = sum(weights.values())
    # The prompt's terms each line holds: tokenised once, for the scores and the coverage.
    held = [set(tokens(line)) & matched if matched else set() for line in lines]

    def cover(lo: int, hi: int) -> float:
        terms = set().union(*held[lo : hi + 1])
        return sum(weights.get(t, 0.0) for t in terms) / total if total > 0 else 0.0

    if sum(size) - 1 <= room:
        whole_cov = cover(0, len(lines) - 1) if matched else 0.0
        return Cut(
            hit.text.strip("\n"), _span(hit, offset, 0, len(lines) - 1), True, True, whole_cov
        )
    scores = [sum(weights.get(t, UNCOUNTED_WEIGHT) for t in terms) for terms in held]
    best = max(range(len(lines)), key=lambda i: (scores[i], -i))
    located = scores[best] > 0
    if not located:
        anchor = _opinion_anchor(hit, lines)
        first = next((i for i, line in enumerate(lines) if line.strip()), 0)
        best = anchor if anchor is not None else first
    if size[best] - 1 > room:
        return Cut(
            _cut_line(lines[best], matched, room),
            _span(hit, offset, best, best),
            False,
            located,
            cover(best, best) if located else 0.0,
        )
    lo = hi = best
    used = size[best] - 1
    while True:
        before = lo - 1 if lo > 0 and used + size[lo - 1] <= room else None
        after = hi + 1 if hi + 1 < len(lines) and used + size[hi + 1] <= room else None
        if before is None and after is None:
            break
        if after is not None and (before is None or scores[after] >= scores[before] or not located):
            hi = after
            used += size[after]
        else:
            assert before is not None
            lo = before
            used += size[before]
    while lo < hi and not lines[lo].strip():
        lo += 1
    while hi > lo and not lines[hi].strip():
        hi -= 1
    return Cut(
        "\n".join(lines[lo : hi + 1]),
        _span(hit, offset, lo, hi),
        False,
        located,
        cover(lo, hi) if located else 0.0,
    )


def _opinion_anchor(hit: Hit, lines: list[str]) -> int | None:
    """The index in `lines` (the chunk's) of the line the second opinion read closest to the
    prompt (`Hit.agnostic_line`, an index into `opinion_lines`); None where it read none."""
    if hit.agnostic_line is None:
        return None
    read = opinion_lines(hit.text)
    if hit.agnostic_line >= len(read):
        return None
    target = read[hit.agnostic_line]
    nth = read[: hit.agnostic_line].count(target)  # the same line may come more than once
    found = [i for i, line in enumerate(lines) if line.strip() == target]
    return found[nth] if nth < len(found) else None


def _leading_blank(text: str) -> int:
    n = 0
    for line in text.split("\n"):
        if line.strip():
            break
        n += 1
    return n


def _span(hit: Hit, offset: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The file lines of the chunk's lines lo..hi (after `offset` leading blank lines)."""
    numbers = [n for n in hit.line_map[offset + lo : offset + hi + 1] if n > 0]
    if not numbers or len(hit.line_map) < offset + hi + 1:
        return None
    return min(numbers), max(numbers)


def _cut_line(line: str, matched: frozenset[str], room: int) -> str:
    """A window of one over-long line around its first matched word, within `room` escaped
    characters, marked "…" where cut (one pass over the window: bounded by `room`)."""
    words = [w for w, _ in matched_words(line, matched)]
    at = max(0, line.lower().find(words[0].lower())) if words else 0
    room = max(0, room - 2)  # the two marks
    start = max(0, at - room // 3)
    used, end = 0, start
    while end < len(line):
        width = len(render.escape_text(line[end]))
        if used + width > room:
            break
        used += width
        end += 1
    out = line[start:end]
    return ("…" if start > 0 else "") + out + ("…" if end < len(line) else "")


# --- reasons ---------------------------------------------------------------------------------

MAX_WHY_WORDS = 4
MAX_WHY_WORD = 24


def reason(hit: Hit, prompt: str, weights: Mapping[str, float] | None = None) -> str:
    """Why the note may answer: the prompt's words the chunk really holds (tokenised as the
    index tokenises: a CJK stretch only as far as its bigrams matched), rarest in the vault
    first, as the prompt spells them (normalised); else that it matched by meaning. Never the
    prompt itself, never a word that did not match."""
    weights = weights or {}
    found = [
        (word, max(weights.get(t, 0.0) for t in terms))
        for word, terms in matched_words(prompt[:4000], hit.matched)
        if len(word) <= MAX_WHY_WORD
    ]
    found.sort(key=lambda wt: -wt[1])  # stable: the prompt's order among equals
    shown = [w for w, _ in found]
    if shown:
        return "shares: " + ", ".join(shown[:MAX_WHY_WORDS])
    if hit.lexical_imputed:
        return "close in meaning, in another language"
    return "close in meaning"


def term_weights(rarity: Mapping[str, float] | None) -> dict[str, float]:
    """Rarity (idf) per term, floored at UNCOUNTED_WEIGHT: a word in most chunks still tells
    one line from another."""
    return {t: max(w, UNCOUNTED_WEIGHT) for t, w in (rarity or {}).items() if math.isfinite(w)}


def item_json(item: Item) -> dict[str, object]:
    """One item as `vaultmem context --json` and `vaultmem query --json` print it."""
    notes, pointers = render.plan_entries([item])
    return {
        "rank": item.rank,
        "path": item.path,
        "delivery": item.form.value,
        "chars": len((notes or pointers)[0]),
        "lines": list(item.lines) if item.lines is not None else None,
        "heading": item.heading,
        "title": item.title,
        "why": item.why,
        "reminder": item.reminder,
        **({"source": item.source} if item.source else {}),
    }
