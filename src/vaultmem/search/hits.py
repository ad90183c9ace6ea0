"""What a search hands out: a note's best chunk with where its score came from (`Hit`), and
how a kept one reaches the agent (`Delivery`). Values only, below fusion (which makes hits) and
the relevance gate (which judges them), so that neither imports the other for them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Delivery(StrEnum):
    """How a kept hit reaches the user."""

    TEXT = "text"  # the note's text, in the fenced block (its best lines when it is long)
    # its few lines that hold the prompt's words (`agent.delivery`): evidence between the two
    PASSAGE = "passage"
    POINTER = "pointer"  # one line: path, title, heading, why; the agent reads it with `get`


@dataclass(frozen=True)
class Hit:
    """One note's best chunk, with where its score came from."""

    path: str
    chunk_index: int
    heading: str
    text: str
    title: str
    commit_sha: str
    tags: tuple[str, ...]
    score: float  # fused score normalised so 1.0 = ranked first by every retriever used
    fused: float  # raw weighted RRF sum
    vector_rank: int | None  # 1-based rank among vector candidates (chunks)
    vector_score: float | None  # cosine similarity
    lexical_rank: int | None  # 1-based rank among full-text candidates (chunks)
    lexical_score: float | None  # Okapi BM25
    lexical_imputed: bool  # lexical contribution imputed (cross-script candidate)
    vector_imputed: bool  # vector contribution imputed (chunk not embedded yet)
    matched_terms: int  # distinct query terms found in the chunk
    # What the relevance gate weighs, in nats (`lexical_evidence`, `vector_evidence`): None
    # where that retriever has nothing to say about this hit.
    lexical_evidence: float | None = None
    vector_evidence: float | None = None
    matched: frozenset[str] = frozenset()  # the query terms the chunk holds
    note_script: str | None = None  # the chunk's dominant script (`prompt.script_of`)
    # How the gate delivers it (`relevance.gate`): text or pointer; None before the gate.
    delivery: Delivery | None = None
    content_hash: str = ""  # the chunk's (memory_primary.content_hash)
    # The second opinion's cosine between prompt and chunk (`second_opinion`: a language-agnostic
    # model); None where it was not asked (a cold process, a hit beyond the judged window).
    agnostic: float | None = None
    # Which of the chunk's lines (an index into `embed.second_opinion.opinion_lines(text)`) the
    # second opinion puts closest to the prompt, where it read them (a judged hit whose lines
    # are filled); `agnostic` is then the larger of that line's cosine and the chunk's.
    agnostic_line: int | None = None
    # Each line of `text`'s file line number (0: unknown); () for a chunk indexed before
    # chunks carried them (`index.markdown.Chunk.lines`).
    line_map: tuple[int, ...] = ()

    def breakdown(self) -> dict[str, Any]:
        # No evidence at all is -inf here; JSON has no infinity, so it is reported as null.
        return {
            k: None if isinstance(v, float) and not math.isfinite(v) else v
            for k, v in asdict(self).items()
            if k not in {"text", "tags", "heading", "title", "matched", "content_hash", "line_map"}
        }
