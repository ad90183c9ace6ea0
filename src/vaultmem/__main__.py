"""`python -m vaultmem` and the `vaultmem` command.

`vaultmem claude-hook` (run by Claude Code for every prompt) goes straight to the lean hook in
`claude_hook.py`, without importing click or the CLI; every other command goes to `cli.cli`.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] == ["claude-hook"]:
        from .claude_hook import main as hook_main

        hook_main(sys.argv[2:])  # returns only for --help or bad options: click handles those
    from .cli import cli

    cli()


if __name__ == "__main__":
    main()
