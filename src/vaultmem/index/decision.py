"""One file's fate with the user's reviews applied: `triage`, then the allowance a review
recorded for that very version (`vaultmem audit allow`).

`triage` is pure and knows nothing of reviews; every caller that acts on a file's fate (the
ingester, `verify --deep`, the MCP `get` tool) needs the reviewed decision, so `decide` is the
one place that combines the two. The audit's `rescan` deliberately calls `triage` alone: it
shows why a file is quarantined, whether or not a review allowed it.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import store
from ..store.db import Conn
from .gitdiff import TreeEntry
from .triage import Outcome, Quarantine, Rules, triage, triage_path


def decide(
    conn: Conn,
    vault_id: int,
    entry: TreeEntry,
    rules: Rules,
    read: Callable[[], bytes | None],
) -> Outcome:
    """What becomes of `entry` (a file of a commit's tree): `Index`, `Skip`, `Ignore` or
    `Quarantine`, with an allowance for this path at this blob turning a `Quarantine` into what
    `Quarantine.allow()` says.

    `read` returns the blob's bytes (None when they cannot be read: the file is then skipped as
    unreadable); it is called only when the path alone does not decide, so a file that can never
    be a note costs no read. Reads the allowance in the caller's transaction."""
    outcome = triage_path(entry.path, entry.mode, rules)
    if outcome is None:
        outcome = triage(entry.path, entry.mode, read(), rules)
    if isinstance(outcome, Quarantine) and store.is_allowed(conn, vault_id, entry.path, entry.blob):
        outcome = outcome.allow()
    return outcome
