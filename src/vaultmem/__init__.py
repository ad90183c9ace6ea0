"""vaultmem: long-term memory for coding agents from a git-versioned Markdown vault."""

__version__ = "0.1.0"
