"""`python -m vaultmem`: the same as the `vaultmem` command."""

from .cli import cli

cli()
