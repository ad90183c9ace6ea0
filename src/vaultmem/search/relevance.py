"""The relevance gate: which of a query's fused hits (`fusion`) reach the user, and why the
others do not (`Verdict`, `Drop`).

Content-free prompts never get here (`prompt.is_content_free`: nothing is searched). A query
injects something only if one of its first GATE_WINDOW hits carries enough evidence (enough
rare query terms, or a vector similarity above the model's noise floor, less what a prompt
like generic coding work owes: `fusion.Evidence`); then `min_score` applies to the normalised
fused score and hits far below the best are dropped.

The module is not called `gate` because the front door (`vaultmem.search`) exports the
function of that name: a submodule would shadow it as an attribute of the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .fusion import Fusion, Hit


class Drop(StrEnum):
    """Why the gate left a hit out."""

    NO_EVIDENCE = "no-evidence"  # none of the query's first hits has enough evidence
    BELOW_MIN_SCORE = "below-min-score"  # fused score under VAULTMEM_MIN_SCORE
    FAR_BELOW_BEST = "far-below-best"  # fused score under relative_cut x the best one
    BEYOND_K = "beyond-k"  # relevant enough, but k better hits came first


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one hit: kept, or dropped and why."""

    hit: Hit
    drop: Drop | None = None

    @property
    def kept(self) -> bool:
        return self.drop is None


# The query-level decision looks at this many hits, whatever k is: what k = 5 (the hook) and
# k = 10 (nDCG@10) receive is then the same list cut at different lengths.
GATE_WINDOW = 5


def gate(
    hits: Sequence[Hit],
    *,
    fusion: Fusion,
    min_score: float = 0.0,
    k: int = 5,
    level: float = 0.0,
) -> list[Verdict]:
    """Decide which hits (best first) reach the user: a verdict per hit, in order.

    The query injects something only if one of its first GATE_WINDOW hits has at least
    `fusion.min_evidence + level` nats of evidence (`Evidence`): that is the question "does
    this vault hold an answer at all?", decided on the evidence that adapts to the index (how
    rare the matched words are in it) and the language pair (how similar unrelated text of
    that pair is for this model). When it does, the ranking is kept as fused, cut only where
    a hit's score is below VAULTMEM_MIN_SCORE or far below the best one, and at `k`.
    """
    need = fusion.min_evidence + level
    window = hits[:GATE_WINDOW]
    if not window or max(h.evidence for h in window) < need:
        return [Verdict(h, Drop.NO_EVIDENCE) for h in hits]
    floor = hits[0].score * fusion.relative_cut
    out: list[Verdict] = []
    kept = 0
    for h in hits:
        if h.score < min_score:
            out.append(Verdict(h, Drop.BELOW_MIN_SCORE))
        elif h.score < floor:
            out.append(Verdict(h, Drop.FAR_BELOW_BEST))
        elif kept >= k:
            out.append(Verdict(h, Drop.BEYOND_K))
        else:
            out.append(Verdict(h))
            kept += 1
    return out
