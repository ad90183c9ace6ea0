"""The `vaultmem` command line: parse arguments, call the library, print results.

One module per command group; `base` holds the group itself and what every command shares.
No logic lives here beyond choosing what to print: library errors (VaultmemError subclasses)
are turned into one line on stderr and the error's exit code, in one place
(`base.VaultmemGroup.invoke`).
"""

from __future__ import annotations

# Each module adds its commands to the group when imported.
from . import agent, audit, database, hooks, indexing, retrieval, team, ui, vaults  # noqa: F401
from .base import cli

__all__ = ["cli", "main"]


def main() -> None:
    cli()
