"""`python -m vaultmem` and the `vaultmem` command.

`vaultmem claude-hook` (run by Claude Code for every prompt) goes straight to the lean hook in
`claude_hook.py`, without importing click or the CLI; every other command goes to `cli.cli`,
with stdout made safe for a reader that goes away (`vaultmem status | head -2`).
"""

from __future__ import annotations

import os
import sys

# Not `typing`: `vaultmem claude-hook` runs for every prompt, and typing (with the re, functools
# and collections it pulls in) was the largest import of the warm hook's start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


class _PipeSafeStdout:
    """stdout that, once its reader has gone (`| head`), drops further output instead of
    raising: the command finishes and exits with its own status, with no "Broken pipe" error."""

    def __init__(self, real: TextIO) -> None:
        self._real = real
        self.broken = False

    def _break(self) -> None:
        self.broken = True
        try:
            # Later writes (and the interpreter's last flush) go nowhere, quietly.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._real.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._real.write(text)
            except BrokenPipeError:
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._real.flush()
            except BrokenPipeError:
                self._break()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def main() -> None:
    if sys.argv[1:2] == ["claude-hook"]:
        from .agent.claude_hook import main as hook_main

        hook_main(sys.argv[2:])  # returns only for --help or bad options: click handles those
    sys.stdout = _PipeSafeStdout(sys.stdout)
    from .cli import cli

    cli()


if __name__ == "__main__":
    main()
