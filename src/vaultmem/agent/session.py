"""What one Claude Code session has already been given, so a chunk is delivered in full once.

The hook knows the session id (its payload's `session_id`); the cold hook process and the warm
service both answer it, so the ledger is a small file per session under vaultmem's home, not
memory. It holds only keys (a path and a chunk's content hash: `delivery.seen_key`), never
text. A lost update (two prompts of one session at once) only means a chunk is given twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import SymlinkRefused
from ..files import atomic_write, prune_stale, read_regular

# A session's ledger is forgotten this long after its last prompt (looked for once an hour).
KEEP_SECONDS = 24 * 3600
# A ledger holds at most this many keys (the oldest go first): bounded work per prompt.
MAX_KEYS = 2000


@dataclass(frozen=True)
class SessionLedger:
    home: Path  # vaultmem's home: nothing below it is read or written through a link
    path: Path

    @classmethod
    def of(cls, home: Path, session: str) -> SessionLedger:
        name = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return cls(home, home / "run" / "sessions" / name)

    def seen(self) -> frozenset[str]:
        return frozenset(self._keys())

    def _keys(self) -> list[str]:
        try:
            data = json.loads(read_regular(self.path, below=self.home) or b"[]")
        except (OSError, ValueError, SymlinkRefused):
            return []
        return [k for k in data if isinstance(k, str)] if isinstance(data, list) else []

    def add(self, keys: Iterable[str]) -> None:
        """Remember `keys` (best effort: a ledger that cannot be written only costs repeats)."""
        new = [k for k in keys if k]
        if not new:
            return
        keys_now = list(dict.fromkeys([*self._keys(), *new]))[-MAX_KEYS:]
        try:
            atomic_write(
                self.path, json.dumps(keys_now), below=self.home, mode=0o600, dir_mode=0o700
            )
        except (OSError, SymlinkRefused):
            return
        prune_stale(self.path.parent, older_than=KEEP_SECONDS, every=3600)
