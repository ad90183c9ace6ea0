"""This installation's id: what tells one machine's (and user's) vaults from another's on a
shared server.

Design decision: the id is a random UUID kept in the user's vaultmem home (`installation-id`,
0600), not in the registry file: people sync `~/.config` between machines with their dotfiles,
and two machines that shared an id would share vault rows again, which is what the id is for
preventing. A vault row on the server belongs to an installation and its path
(`store.db.register_vault`), so two laptops that both keep `~/notes` get two rows. The file is
created on first use, atomically; a reader (the per-prompt hook) only reads it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "installation-id"


def id_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where this installation's id lives: in the user's vaultmem home (`config.user_home`)."""
    from .config import user_home

    return user_home(environ=environ) / FILE_NAME


def _parse(text: str) -> str | None:
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


ENV = "VAULTMEM_INSTALLATION_ID"


def current(environ: Mapping[str, str] | None = None, *, create: bool = True) -> str | None:
    """This installation's id: VAULTMEM_INSTALLATION_ID (a container whose home is new at
    every start, but is the same installation), else the one kept in the home, created on
    first use unless `create` is False (then None when there is none yet). A file that does
    not hold a UUID is replaced by a new id."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        pinned = _parse(env[ENV])
        if pinned is None:
            from .errors import ConfigError

            raise ConfigError(f"{ENV} must be a UUID, got {env[ENV]!r}: fix it in the environment")
        return pinned
    path = id_path(environ)
    damaged = False
    try:
        found = _parse(path.read_text(encoding="ascii", errors="replace"))
        damaged = found is None
    except OSError:
        found = None
    if found is not None or not create:
        return found
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE_NAME}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(str(uuid.uuid4()) + "\n")
        os.chmod(tmp, 0o600)
        if damaged:
            os.replace(tmp, path)  # a damaged file: replace it
        else:
            # Create-if-absent with the whole content at once: of two first uses at the same
            # moment, one link wins and both read its id.
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
    finally:
        Path(tmp).unlink(missing_ok=True)
    again = current(environ, create=False)
    assert again is not None
    return again
