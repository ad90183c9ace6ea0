"""Who may read what: the grants on shared vaults, and the listing `vaultmem vaults list` shows.

Design decision: PostgreSQL's own machinery decides, never vaultmem's code. Each role that
connects reads only what row-level security lets it (schema.sql: a vault's owner, and for a
shared vault each role in `vault_readers` and the members of such a role), so a grant is one
row there, written under the same policies (only the vault's owner may add or remove one), and
a query vaultmem forgot to filter still returns nobody else's notes. The role that owns the
tables, and a superuser, see everything: the single-user default is unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from ..errors import ConfigError
from .db import Conn

__all__ = ["VaultAccess", "access_list", "current_role", "grant", "revoke"]


@dataclass(frozen=True)
class VaultAccess:
    """One vault as this role sees it: whose it is, who else may read it."""

    id: int
    name: str
    shared: bool
    owner: str
    mine: bool  # this role may write it (its owner, or a member of the owning role)
    readers: list[str]
    # A private vault's installation (one vaultmem home on one machine) and its folder there:
    # the same path registered on two machines is two vaults of the same name.
    installation: str | None = None
    root: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def current_role(conn: Conn) -> str:
    row = conn.execute("SELECT current_user AS u").fetchone()
    conn.commit()
    return str(row["u"]) if row else ""


def _shared_vault_id(conn: Conn, name: str) -> int:
    row = conn.execute(
        "SELECT id, vaultmem_may_write(owner) AS mine FROM vaults WHERE shared AND name = %s",
        (name,),
    ).fetchone()
    if row is None:
        raise ConfigError(
            f"no shared vault named {name!r} is visible to this role: `vaultmem vaults list` "
            "shows the vaults it can see (only a shared vault can be granted)"
        )
    if not row["mine"]:
        raise ConfigError(f"shared vault {name!r} belongs to another role: its owner grants it")
    return int(row["id"])


def _role_oid(conn: Conn, role: str) -> int:
    row = conn.execute("SELECT oid FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if row is None:
        raise ConfigError(
            f"there is no role {role!r} on this server: create it first (CREATE ROLE {role} "
            "LOGIN PASSWORD '...' IN ROLE vaultmem_member), then grant again"
        )
    return int(row["oid"])


def grant(conn: Conn, vault: str, role: str) -> bool:
    """Let `role` (and its members) read the shared vault `vault`. False if it already could.
    Commits."""
    vid = _shared_vault_id(conn, vault)
    oid = _role_oid(conn, role)
    try:
        cur = conn.execute(
            "INSERT INTO vault_readers (vault_id, reader) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (vid, oid),
        )
    except psycopg.errors.InsufficientPrivilege:
        conn.rollback()
        raise ConfigError(f"only the owner of {vault!r} may grant it") from None
    conn.commit()
    return cur.rowcount > 0


def revoke(conn: Conn, vault: str, role: str) -> bool:
    """Withdraw `role`'s grant on `vault`. False if it had none. Commits."""
    vid = _shared_vault_id(conn, vault)
    oid = _role_oid(conn, role)
    cur = conn.execute("DELETE FROM vault_readers WHERE vault_id = %s AND reader = %s", (vid, oid))
    conn.commit()
    return cur.rowcount > 0


def access_list(conn: Conn) -> list[VaultAccess]:
    """Every vault this role may read, with its owner and the roles granted to read it."""
    rows = conn.execute(
        """
        SELECT v.id, v.name, v.shared, v.owner::regrole::text AS owner,
               vaultmem_may_write(v.owner) AS mine, v.installation::text AS installation, v.root,
               coalesce(array_agg(r.reader::regrole::text ORDER BY r.reader::regrole::text)
                        FILTER (WHERE r.reader IS NOT NULL), '{}') AS readers
          FROM vaults v LEFT JOIN vault_readers r ON r.vault_id = v.id
         GROUP BY v.id ORDER BY v.shared DESC, v.name, v.id
        """
    ).fetchall()
    conn.commit()
    return [
        VaultAccess(
            r["id"],
            r["name"],
            r["shared"],
            r["owner"],
            r["mine"],
            list(r["readers"]),
            None if r["shared"] else r["installation"],
            None if r["shared"] else r["root"],
        )
        for r in rows
    ]
