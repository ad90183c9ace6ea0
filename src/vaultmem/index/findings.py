"""Light value types for sensitive-content findings: `Finding` and the `mask` that previews it.

Kept apart from the detector (the `sensitive` package) so that modules which only store or
print findings (`store`, `audit`, the per-prompt hook's imports) never pay for importing
detect-secrets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Category = Literal["secret", "private", "sensitive-path", "unscanned"]


@dataclass(frozen=True)
class Finding:
    """One reason a note is sensitive. `masked` is a preview that never holds the whole secret."""

    rule_id: str
    category: str  # a Category: "secret" | "private" | "sensitive-path" | "unscanned"
    line: int  # 1-based line in the scanned text; 0 for path and front-matter rules
    masked: str


def mask(value: str) -> str:
    """`AKIAABCDEFGHIJKLMNOP` -> `AKIA…[20 chars]`: at most a quarter of the value, never over 4."""
    shown = value[: min(4, len(value) // 4)]
    return f"{shown}…[{len(value)} chars]"
