"""This installation's id: what tells one machine's (and user's) vaults from another's on a
shared server.

Design decision: the id is a random UUID recorded in the user's registry
(`vaults.config_path()`, an `[installations]` table), keyed by the machine's host name. The
registry is the one file every command and git hook reads (the hooks name it), so a commit from a
GUI client or `env -i` acts as the same installation as the user's shell. Keyed by host because
people sync `~/.config` between machines with their dotfiles: two machines that shared an id
would share vault rows again, which is what the id prevents. A vault row on the server belongs to
an installation and its path (`store.db.register_vault`), so two laptops that both keep
`~/notes` get two rows. VAULTMEM_INSTALLATION_ID pins it (a container whose host name changes at
every start but which is the same installation).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .vaults import UserConfig

ENV = "VAULTMEM_INSTALLATION_ID"


def host() -> str:
    """This machine's name, as the registry keys installations."""
    return socket.gethostname() or "localhost"


def _parse(text: str) -> str | None:
    try:
        return str(uuid.UUID(text.strip()))
    except ValueError:
        return None


def current(
    environ: Mapping[str, str] | None = None,
    *,
    user: UserConfig | None = None,
    create: bool = True,
) -> str | None:
    """This installation's id: VAULTMEM_INSTALLATION_ID, else the one the registry records for
    this host, created (and recorded) on first use unless `create` is False (then None when
    there is none yet)."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        pinned = _parse(env[ENV])
        if pinned is None:
            from .errors import ConfigError

            raise ConfigError(f"{ENV} must be a UUID, got {env[ENV]!r}: fix it in the environment")
        return pinned
    from . import vaults

    user = user if user is not None else vaults.load(environ)
    found = _parse(user.installations.get(host(), ""))
    if found is not None or not create:
        return found
    vaults.record_installation(host(), str(uuid.uuid4()), environ)
    recorded = _parse(vaults.load(environ).installations.get(host(), ""))
    assert recorded is not None
    return recorded
