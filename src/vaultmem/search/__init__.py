"""The search room: find the notes of one vault that answer a prompt, and decide whether any do.

A prompt is analysed (`prompt`: content-free prompts search nothing), one SQL statement fetches
its vector and full-text candidates (`candidates`: HNSW cosine and BM25), they are fused into
one hit per note with the evidence each carries (`fusion`; `hits` holds the values, `profiles`
each model's fusion weights and gate calibrations), and the
relevance gate decides what reaches the user (`relevance`; `embed.generic` tells prompts about
generic coding work apart; a long-lived process adds a language-agnostic `second_opinion`).
`retrieve` (`retrieval`: one frozen `Request` in, a `Retrieval` out) composes the steps for the
readers (`vaultmem query`, `vaultmem context` and the Claude Code hook, MCP `search`) and
leaves out notes HEAD no longer holds.

This module is the room's front door: other rooms, the CLI and the benchmarks import from
`vaultmem.search`, not from its modules (tests too, except where a module's own internals are
what they test: the candidate SQL, a function they count calls of). The names load lazily, on
first use, so that `from vaultmem.search import Mode` (the CLI's option list, at import time)
loads neither numpy nor psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .candidates import Candidates, fetch_candidates, has_vectors
    from .fusion import fuse, prepare_generic
    from .hits import Delivery, Hit
    from .modes import Mode
    from .profiles import FUSION_PROFILES, Fusion, fusion_for
    from .prompt import Prompt, is_content_free, script_of
    from .relevance import (
        SIGNALS,
        Calibration,
        Drop,
        Outcome,
        QueryStats,
        Signals,
        Verdict,
        calibration_for,
        gate,
        outcome_of,
        signals,
    )
    from .retrieval import (
        Request,
        Retrieval,
        fuse_candidates,
        judge,
        query_stats,
        retrieve,
        search,
        with_second_opinion,
    )
    from .second_opinion import SecondOpinion

__all__ = [
    "FUSION_PROFILES",
    "SIGNALS",
    "Calibration",
    "Candidates",
    "Delivery",
    "Drop",
    "Fusion",
    "Hit",
    "Mode",
    "Outcome",
    "Prompt",
    "QueryStats",
    "Request",
    "Retrieval",
    "SecondOpinion",
    "Signals",
    "Verdict",
    "calibration_for",
    "fetch_candidates",
    "fuse",
    "fuse_candidates",
    "fusion_for",
    "gate",
    "has_vectors",
    "is_content_free",
    "judge",
    "outcome_of",
    "prepare_generic",
    "query_stats",
    "retrieve",
    "script_of",
    "search",
    "signals",
    "with_second_opinion",
]

# Where each exported name lives.
_HOME = {
    "Candidates": "candidates",
    "fetch_candidates": "candidates",
    "has_vectors": "candidates",
    "fuse": "fusion",
    "prepare_generic": "fusion",
    "Delivery": "hits",
    "Hit": "hits",
    "FUSION_PROFILES": "profiles",
    "Fusion": "profiles",
    "fusion_for": "profiles",
    "Mode": "modes",
    "Prompt": "prompt",
    "is_content_free": "prompt",
    "script_of": "prompt",
    "SIGNALS": "relevance",
    "Calibration": "relevance",
    "Drop": "relevance",
    "Outcome": "relevance",
    "QueryStats": "relevance",
    "Signals": "relevance",
    "Verdict": "relevance",
    "calibration_for": "relevance",
    "gate": "relevance",
    "outcome_of": "relevance",
    "signals": "relevance",
    "Request": "retrieval",
    "Retrieval": "retrieval",
    "fuse_candidates": "retrieval",
    "judge": "retrieval",
    "query_stats": "retrieval",
    "retrieve": "retrieval",
    "search": "retrieval",
    "with_second_opinion": "retrieval",
    "SecondOpinion": "second_opinion",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # `from .home import name`, through the import statement's own machinery rather than
    # importlib.import_module, which `python -X importtime` does not see: the hook's tests and
    # benchmarks read that output to know what a prompt loaded.
    module = __import__(home, globals(), None, [name], 1)
    value = getattr(module, name)
    globals()[name] = value  # found once: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
