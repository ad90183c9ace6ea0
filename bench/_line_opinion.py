"""A design probe for issue 41: the second opinion read line by line (`delivery.py --by-line`).

Universal Sentence Encoder was trained on sentences. On a 1,500-character chunk of a meeting log
its vector is the average of forty turns, and the one line that answers a Chinese question
drowns: on `_meetings` the answering chunk's cosine to the question (median 0.11) is below the
best other chunk's (0.15), so the gate reads no evidence and the prompt is judged unanswered.
The same model on the chunk's lines puts the answering line first for 81 % of the Chinese
questions (the chunk: 5 %).

The probe gives each judged hit of a warm dump (`_devset.load_or_dump_warm`), before the gate
reads it, the best cosine of its lines (`max`), or the larger of that and the chunk's own
(`chunkmax`); the warm calibration is then refitted leave-one-corpus-out as usual. Only the
signals change: the second opinion's candidate list stays the chunks'. The product reads it
as `chunkmax` does (`search.retrieval.by_line`, with the lines `opinion_lines` defines, so a
calibration fitted here applies to it): a vector per line kept beside the chunk's (the fill
embeds ~1.5 ms a line), and the judged window's line vectors read per prompt.

Line vectors are cached under VAULTMEM_BENCH_DIR by text.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np
from _corpora import bench_dir

from vaultmem.embed.second_opinion import opinion_lines

MODES = ("max", "chunkmax")
# The judged window, as the product reads it by line (`search.retrieval.by_line`: the first
# max(k, PROMPT_WINDOW) hits, k = 5); the hits after it are never delivered.
JUDGED = 5
# The product's definition of a chunk's lines, so the probe's calibration applies to it.
lines_of = opinion_lines


class LineVectors:
    """The second opinion's vectors of lines and prompts, cached by text."""

    def __init__(self, opinion: Any) -> None:
        self.model = opinion.embedder
        self.path = bench_dir() / f"line-vectors-{self.model.model_id.replace(':', '_')}.pkl"
        self.vectors: dict[str, np.ndarray] = (
            pickle.loads(self.path.read_bytes()) if self.path.is_file() else {}
        )

    def need(self, texts: Sequence[str]) -> None:
        todo = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        for i in range(0, len(todo), 256):
            part = todo[i : i + 256]
            for text, vec in zip(part, self.model.embed_documents(part), strict=True):
                self.vectors[text] = np.asarray(vec, dtype=np.float32)
        if todo:
            self.path.write_bytes(pickle.dumps(self.vectors))

    def __getitem__(self, text: str) -> np.ndarray:
        return self.vectors[text]


def by_line(searched: Sequence[Any], vectors: LineVectors, mode: str) -> list[Any]:
    """`searched` (a warm dump) with each judged hit's second-opinion cosine read by line."""
    asked = [s for s in searched if not s.content_free and s.hits and s.stats.cosines]
    vectors.need(
        [s.prompt.text for s in asked]
        + [ln for s in asked for h in s.hits[:JUDGED] for ln in lines_of(h.text)]
    )
    out = []
    for s in searched:
        if s not in asked:
            out.append(s)
            continue
        q = vectors[s.prompt.text]
        hits = list(s.hits)
        for i, h in enumerate(hits[:JUDGED]):
            lines = lines_of(h.text)
            if h.agnostic is None or not lines:
                continue
            best = float(max(vectors[ln] @ q for ln in lines))
            hits[i] = dataclasses.replace(
                h, agnostic=best if mode == "max" else max(best, h.agnostic)
            )
        out.append(dataclasses.replace(s, hits=hits))
    return out
