"""Registering a vault for indexing: the rule `vaultmem init`, `vaultmem vaults add` and
`vaultmem hooks install` share for recording a vault in the user's registry.

Lives in the index room rather than in `vaults.py` because the rule needs the settings
(`config.load_settings`), and `config` already imports `vaults`: the registry file stays a leaf.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .. import vaults
from ..config import Settings, load_settings


class Registered(NamedTuple):
    """The registry entry of a vault and the settings it is indexed with from now on."""

    entry: vaults.VaultEntry
    settings: Settings


def register(root: Path, name: str | None = None) -> Registered:
    """Record `root` in the user's registry with the index this environment names (a bundled
    server's home, or VAULTMEM_DATABASE_URL) and return its entry and settings.

    A vault registered already keeps the index recorded for it (so a commit made from a GUI
    client updates the index the user queries), unless none is recorded or `name` is given:
    then this environment's index is recorded."""
    settings = load_settings(root)
    entry = vaults.load().by_path(root)
    if entry is None or not (entry.home or entry.database_url) or name is not None:
        entry = vaults.register(
            root,
            name=name,
            home=None if settings.database_url else settings.home,
            database_url=settings.database_url,
        )
        settings = load_settings(root)
    return Registered(entry, settings)
