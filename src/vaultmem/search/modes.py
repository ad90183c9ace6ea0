"""Which retrievers a search runs: the `Mode` of `vaultmem query --mode` and every search call.

A module of its own, importing nothing but the standard library, so that the CLI can build its
`--mode` choice from the enum at import time without loading numpy, psycopg or the search
machinery (`vaultmem.search` loads its other modules only when they are used).
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """Vector search and full-text search fused, or one of them alone."""

    HYBRID = "hybrid"
    VECTOR = "vector"
    LEXICAL = "lexical"

    @property
    def uses_vector(self) -> bool:
        return self is not Mode.LEXICAL

    @property
    def uses_lexical(self) -> bool:
        return self is not Mode.VECTOR

    @classmethod
    def of(cls, value: str) -> Mode:
        """`value` (a Mode or its string) as a Mode; ValueError naming the choices if it is none.

        Callers outside the package may still pass the plain strings ("lexical")."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"mode must be one of {choices}, got {value!r}") from None
