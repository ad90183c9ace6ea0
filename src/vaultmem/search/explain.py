"""Why a note was delivered or dropped, in words: what `vaultmem query --explain` prints and
the page's search box (`vaultmem ui`) shows. Pure: each line is made from a `Hit` or a
`Verdict` alone."""

from __future__ import annotations

from typing import Any

from .relevance import SIGNALS

# Why the gate dropped a note (`Drop` values), for people.
DROP_REASONS = {
    "no-answer": "the vault does not answer this prompt: not enough evidence in its first notes",
    "no-evidence": "below the pointer band: not enough evidence of its own",
    "below-min-score": "fused score under VAULTMEM_MIN_SCORE",
    "beyond-k": "beyond --k",
}


def strongest_signals(v: Any, n: int = 4) -> list[str]:
    """A verdict's `n` strongest signals by what each adds to its score in nats ("lift
    +1.2"), strongest first; none without signals."""
    if v.signals is None or v.calibration is None:
        return []
    values = v.signals.vector_of()
    contrib = sorted(
        (
            (w * x, name)
            for w, x, name in zip(v.calibration.hit_weights, values, SIGNALS, strict=True)
        ),
        key=lambda t: -abs(t[0]),
    )
    return [f"{name} {c:+.1f}" for c, name in contrib[:n] if abs(c) >= 0.05]


def band_line(v: Any, level: float) -> str:
    """Which band a hit fell in and why: its score, the bands, and its strongest signals."""
    cal = v.calibration
    delivery = cal.band(v.score, level)
    band = delivery.value if delivery is not None else "none"
    parts = strongest_signals(v)
    return (
        f"gate: note scores {v.score:.2f} -> {band} band "
        f"({', '.join(parts) or 'no signal'}); prompt scores {v.prompt_score:.2f}"
    )


def explain_line(h: Any) -> str:
    """One hit's score breakdown: each retriever's rank and score, and the gate's evidence."""
    vec = (
        f"vector #{h.vector_rank} (cos {h.vector_score:.3f})"
        if h.vector_rank is not None
        else "vector imputed (not embedded yet)"
        if h.vector_imputed
        else "vector -"
    )
    lex = (
        f"lexical #{h.lexical_rank} (BM25 {h.lexical_score:.4f})"
        if h.lexical_rank is not None
        else "lexical imputed (other script)"
        if h.lexical_imputed
        else "lexical -"
    )

    def nats(x: float | None) -> str:
        return "-" if x is None or x == float("-inf") else f"{x:.1f}"

    return (
        f"{vec}; {lex}; {h.matched_terms} terms matched; evidence: words "
        f"{nats(h.lexical_evidence)}, vector {nats(h.vector_evidence)}; "
        f"fused {h.fused:.5f}; commit {h.commit_sha[:7]}"
    )
