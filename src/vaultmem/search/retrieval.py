"""Retrieval: a prompt in, the notes to deliver out. The search room's steps composed: prompt
analysis (`prompt`), the candidate statement (`candidates`), fusion (`fusion`), the relevance
gate (`relevance`) and, for what readers hand out, the check against HEAD (`index.freshness`).

`retrieve` is what every reader calls (`vaultmem query`, `vaultmem context` and the Claude Code
hook, the MCP `search` tool). `judge` and `search` are the ranking and the gate without the
HEAD check, for benchmarks and tests that measure those on their own.

The module is not called `retrieve` because the front door (`vaultmem.search`) exports the
function of that name: a submodule would shadow it as an attribute of the package.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import store
from ..index.freshness import fresh_hits
from .candidates import Candidates, fetch_candidates
from .fusion import fuse
from .hits import Hit
from .modes import Mode
from .profiles import Fusion, fusion_or_default
from .prompt import Prompt, script_of
from .relevance import PROMPT_WINDOW, Drop, Outcome, QueryStats, Verdict, gate, outcome_of

if TYPE_CHECKING:
    import psycopg

    from ..config import Settings
    from ..embed import Embedder
    from ..store.db import Conn, Vault
    from .candidates import AgnosticQuery
    from .second_opinion import SecondOpinion


def fuse_candidates(c: Candidates, fusion: Fusion) -> list[Hit]:
    """One query's candidate rows fused into its ranking (best chunk per note, best first)."""
    return fuse(
        c.rows,
        query=c.query,
        terms=c.terms,
        fusion=fusion,
        use_vector=c.use_vector,
        use_lexical=c.use_lexical,
        use_agnostic=c.use_agnostic,
    )


def query_stats(c: Candidates) -> QueryStats:
    """What the gate needs to know about the query as a whole, from its candidate rows."""
    first = c.rows[0] if c.rows else {}
    script = script_of(c.query)
    return QueryStats(
        script=script,
        cosines=tuple(float(r["vscore"]) for r in c.rows if r["vrank"] is not None),
        terms=tuple(c.terms),
        term_df=tuple(int(d) for d in first.get("term_df") or ()),
        n_chunks=int(first.get("n_chunks") or 0),
        generic_similarity=c.generic_similarity,
        agnostic_generic=c.agnostic_generic,
    )


def by_line(
    conn: psycopg.Connection[Any],
    vault_id: int,
    hits: list[Hit],
    asked: AgnosticQuery,
    opinion: SecondOpinion | None,
    *,
    k: int,
) -> list[Hit]:
    """`hits` with the second opinion read by line over the judged window (the first
    max(k, PROMPT_WINDOW)): each judged hit's cosine becomes the larger of its chunk's and its
    best line's (`memory_primary.agnostic_lines`, read in one query), and `agnostic_line`
    names that line. The model was trained on sentences: in a long chunk's one vector the
    line that answers drowns (bench/README, "Where the long-note and cross-language answers
    are lost"). A judged hit whose lines are not filled yet keeps its chunk's cosine and wakes
    the opinion's fill."""
    import numpy as np

    from ..store import agnostic_vectors

    n = max(k, PROMPT_WINDOW)
    judged = [(i, h) for i, h in enumerate(hits[:n]) if h.agnostic is not None]
    if not judged:
        return hits
    q = np.asarray(asked.vector, dtype=np.float32)
    keys = [(h.path, h.chunk_index) for _, h in judged]
    lines = agnostic_vectors.line_vectors(conn, vault_id, asked.model_id, keys, len(q))
    out = list(hits)
    for i, h in judged:
        matrix = lines.get((h.path, h.chunk_index))
        if matrix is None:
            if opinion is not None:
                opinion.missing.set()
            continue
        if not len(matrix):
            continue  # a chunk of no line long enough to read on its own
        cosines = matrix @ q
        best = int(np.argmax(cosines))
        assert h.agnostic is not None
        out[i] = dataclasses.replace(
            h, agnostic=max(h.agnostic, float(cosines[best])), agnostic_line=best
        )
    return out


def with_second_opinion(
    hits: list[Hit], stats: QueryStats, opinion: SecondOpinion | None, *, k: int
) -> tuple[list[Hit], QueryStats]:
    """For a search that asked the second opinion: the query's stats with the median of its
    cosines over the judged window (the first max(k, PROMPT_WINDOW) hits), which makes the
    gate weigh it. Where a judged chunk has no such cosine yet (not filled: a note just
    committed) the search is judged without it: its hits lose their cosines, and the
    opinion's background fill is woken."""
    window = hits[: max(k, PROMPT_WINDOW)]
    if not window:
        return hits, stats
    if any(h.agnostic is None for h in window):
        if opinion is not None:
            opinion.missing.set()
        return [dataclasses.replace(h, agnostic=None) for h in hits], stats
    median = statistics.median(h.agnostic for h in window[:PROMPT_WINDOW] if h.agnostic is not None)
    return hits, dataclasses.replace(stats, agnostic_median=median)


def delivered(verdicts: list[Verdict]) -> list[Hit]:
    """The kept hits, best first, each marked with its delivery (text or pointer)."""
    return [dataclasses.replace(v.hit, delivery=v.delivery) for v in verdicts if v.kept]


def judge(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str | Prompt,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: Mode = Mode.HYBRID,
    min_score: float = 0.0,
    fusion: Fusion | None = None,
    candidates: int | None = None,
    gate_level: float = 0.0,
    second_opinion: SecondOpinion | None = None,
) -> list[Verdict]:
    """Every candidate note for `query`, best first, with the gate's verdict on it.

    What `search` keeps is the kept ones; `vaultmem query --explain` shows the rest and why.
    A content-free prompt has no candidates: nothing is searched (a `Prompt` brings that
    decision with it; a string is analysed here).
    """
    mode = Mode.of(mode)
    prompt = Prompt.coerce(query)
    if prompt.content_free:
        return []
    fusion = fusion_or_default(fusion, embedder)
    # The second opinion, where the profile is calibrated with it: its own candidate list and
    # every candidate's cosine by it come with the candidate statement.
    asked = (
        second_opinion.query(prompt.text, candidates=fusion.agnostic_weight > 0)
        if second_opinion is not None and fusion.second_calibration is not None
        else None
    )
    c = fetch_candidates(
        conn,
        vault_id,
        prompt.text,
        embedder,
        k=k,
        path_prefix=path_prefix,
        tag=tag,
        mode=mode,
        candidates=candidates,
        fusion=fusion,
        agnostic=asked,
    )
    hits, stats = fuse_candidates(c, fusion), query_stats(c)
    if c.use_agnostic and asked is not None:
        hits = by_line(conn, vault_id, hits, asked, second_opinion, k=k)
        hits, stats = with_second_opinion(hits, stats, second_opinion, k=k)
    return gate(
        hits,
        fusion=fusion,
        stats=stats,
        min_score=min_score,
        k=k,
        level=gate_level,
    )


def search(
    conn: psycopg.Connection[Any],
    vault_id: int,
    query: str | Prompt,
    embedder: Embedder | None,
    *,
    k: int = 5,
    path_prefix: str | None = None,
    tag: str | None = None,
    mode: Mode = Mode.HYBRID,
    min_score: float = 0.0,
    fusion: Fusion | None = None,
    candidates: int | None = None,
    gated: bool = True,
    gate_level: float = 0.0,
    second_opinion: SecondOpinion | None = None,
) -> list[Hit]:
    """The `k` best notes for `query` in the vault, one hit (best chunk) per note, best first.

    mode: hybrid (vector + full text, fused), vector or lexical. Hybrid silently becomes
    lexical when no chunk has a vector from this embedder yet (the query is then not embedded).
    The relevance gate (`relevance.gate`) decides what is returned; `gate_level` is
    VAULTMEM_GATE. `gated=False` returns the fused ranking as it is (no content-free check, no
    gate), for benchmarks that compare the two. Nothing here checks the hits against HEAD:
    what a reader hands out comes from `retrieve`.
    """
    kw: dict[str, Any] = dict(
        k=k, path_prefix=path_prefix, tag=tag, mode=mode, fusion=fusion, candidates=candidates
    )
    if gated:
        verdicts = judge(
            conn,
            vault_id,
            query,
            embedder,
            min_score=min_score,
            gate_level=gate_level,
            second_opinion=second_opinion,
            **kw,
        )
        return delivered(verdicts)
    fusion = fusion_or_default(kw.pop("fusion"), embedder)
    text = query.text if isinstance(query, Prompt) else query
    c = fetch_candidates(conn, vault_id, text, embedder, fusion=fusion, **kw)
    return fuse_candidates(c, fusion)[:k]


@dataclass(frozen=True)
class Retrieval:
    """What one prompt retrieved from a vault: the notes to deliver, and the gate's verdicts."""

    # Kept by the gate and still at HEAD as indexed, best first: what a reader hands out, each
    # with its delivery (`Hit.delivery`: text or pointer).
    hits: tuple[Hit, ...]
    # The gate's verdict on every candidate note, best first (none for a content-free prompt).
    # A kept note that HEAD no longer holds is in `verdicts` as kept but not in `hits`.
    verdicts: tuple[Verdict, ...] = ()

    @property
    def rarity(self) -> dict[str, float]:
        """Each search term's rarity (idf) in the vault: what a passage is chosen by."""
        stats = self.verdicts[0].stats if self.verdicts else None
        return stats.rarity if stats is not None else {}

    @property
    def passage_coverage(self) -> float:
        """The judging calibration's `passage_coverage` (inf without a verdict)."""
        cal = self.verdicts[0].calibration if self.verdicts else None
        return cal.passage_coverage if cal is not None else math.inf

    @property
    def outcome(self) -> Outcome:
        """Notes (some full text), pointers only, or nothing: what the prompt delivers."""
        return outcome_of(self.hits)

    @property
    def dropped(self) -> tuple[tuple[Hit, Drop], ...]:
        """The notes the gate found not relevant enough and why, best first (not those that
        were only beyond k): what `vaultmem query --explain` lists."""
        return tuple(
            (v.hit, v.drop)
            for v in self.verdicts
            if v.drop is not None and v.drop is not Drop.BEYOND_K
        )


@dataclass(frozen=True)
class Request:
    """One search as a reader asks it: the prompt, how many notes, which part of the vault,
    and the gate's settings (`Request.of` reads them from the user's settings)."""

    prompt: str | Prompt
    k: int = 5
    path_prefix: str | None = None
    tag: str | None = None
    mode: Mode = Mode.HYBRID
    min_score: float = 0.0  # VAULTMEM_MIN_SCORE
    gate_level: float = 0.0  # VAULTMEM_GATE
    second_opinion: SecondOpinion | None = None

    @classmethod
    def of(cls, settings: Settings, prompt: str | Prompt, **options: Any) -> Request:
        """A request with the gate's settings from `settings` (its min score and level)."""
        return cls(prompt, min_score=settings.min_score, gate_level=settings.gate, **options)


def retrieve(
    conn: Conn,
    vault: Vault,
    request: Request,
    embedder: Embedder | None,
) -> Retrieval:
    """The notes a reader may hand out for `request`: the gate's kept hits (`judge`), less
    those whose note HEAD no longer holds as indexed.

    A HEAD that moved without a hook (a reset, a checkout, an update-ref) leaves the index
    behind: its stale hits are left out and the catch-up a git hook would run is started in the
    background (`index.freshness.fresh_hits`). That check runs for every prompt, content-free
    ones (no hits) included, so a reader also notices a moved HEAD when it found nothing.
    """
    verdicts = judge(
        conn,
        vault.id,
        request.prompt,
        embedder,
        k=request.k,
        path_prefix=request.path_prefix,
        tag=request.tag,
        mode=request.mode,
        min_score=request.min_score,
        gate_level=request.gate_level,
        second_opinion=request.second_opinion,
    )
    kept = delivered(verdicts)
    if vault.shared:
        # A shared vault is what its index holds, as committed on its branch: a reader has no
        # clone of it (and its source's HEAD is not what it follows).
        return Retrieval(tuple(kept), tuple(verdicts))
    # A reset or checkout that ran no hook: never hand out a note HEAD no longer holds.
    watermark = store.state(conn, vault.id).watermark
    conn.commit()
    fresh = fresh_hits(conn, vault.id, vault.root, watermark, kept)
    return Retrieval(tuple(fresh), tuple(verdicts))
