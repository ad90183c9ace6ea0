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
from ..errors import ConfigError


class Registered(NamedTuple):
    """The registry entry of a vault and the settings it is indexed with from now on."""

    entry: vaults.VaultEntry
    settings: Settings


def register(
    root: Path, name: str | None = None, *, shared: str | None = None, ref: str | None = None
) -> Registered:
    """Record `root` in the user's registry with the index this environment names (a bundled
    server's home, or VAULTMEM_DATABASE_URL) and return its entry and settings.

    A vault registered already keeps the index recorded for it (so a commit made from a GUI
    client updates the index the user queries), unless none is recorded or `name` (or
    `shared`) is given: then this environment's index is recorded. `shared` makes `root` the
    source of the shared vault of that name (following `ref`, None: HEAD); a shared vault
    lives on a server that several machines reach, so it needs VAULTMEM_DATABASE_URL."""
    settings = load_settings(root)
    entry = vaults.load().by_path(root)
    if shared is not None and not settings.database_url:
        raise ConfigError(
            "a shared vault lives on a server other machines reach: set VAULTMEM_DATABASE_URL "
            "to it (see docs/team.md)"
        )
    if (
        entry is None
        or not (entry.home or entry.database_url)
        or name is not None
        or shared is not None
    ):
        keep_shared = shared if shared is not None else (entry.shared if entry else None)
        entry = vaults.register(
            root,
            name=name,
            home=None if settings.database_url else settings.home,
            database_url=settings.database_url,
            shared=keep_shared,
            ref=ref if shared is not None else (entry.ref if entry else None),
        )
        settings = load_settings(root)
    return Registered(entry, settings)


def register_reader(name: str, alias: str | None = None) -> Registered:
    """Register the shared vault `name` for reading only (no clone on this machine): the
    hook, the wrapper and the MCP server then read it from the server in
    VAULTMEM_DATABASE_URL."""
    settings = load_settings(None)
    if not settings.database_url:
        raise ConfigError(
            "a shared vault is read from a server: set VAULTMEM_DATABASE_URL to it (see "
            "docs/team.md)"
        )
    entry = vaults.register(None, name=alias, shared=name, database_url=settings.database_url)
    return Registered(entry, load_settings(entry=entry))
