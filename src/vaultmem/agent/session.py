"""What one Claude Code session has already been given, so a chunk is delivered in full once.

The hook knows the session id (its payload's `session_id`); the cold hook process and the warm
service both answer it, so the ledger is a small file per session under vaultmem's home, not
memory. It holds only keys (a path and a chunk's content hash: `delivery.seen_key`), never
text. A lost update (two prompts of one session at once) only means a chunk is given twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# A session's ledger is forgotten this long after its last prompt.
KEEP_SECONDS = 24 * 3600
# A ledger holds at most this many keys (the oldest go first): bounded work per prompt.
MAX_KEYS = 2000


@dataclass(frozen=True)
class SessionLedger:
    path: Path

    @classmethod
    def of(cls, home: Path, session: str) -> SessionLedger:
        name = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return cls(home / "run" / "sessions" / name)

    def seen(self) -> frozenset[str]:
        return frozenset(self._keys())

    def _keys(self) -> list[str]:
        try:
            if self.path.is_symlink():
                return []
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [k for k in data if isinstance(k, str)] if isinstance(data, list) else []

    def add(self, keys: Iterable[str]) -> None:
        """Remember `keys` (best effort: a ledger that cannot be written only costs repeats)."""
        new = [k for k in keys if k]
        if not new:
            return
        keys_now = list(dict.fromkeys([*self._keys(), *new]))[-MAX_KEYS:]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".ledger-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(keys_now, fh)
            os.replace(tmp, self.path)  # replaces a planted link, never writes through it
            _prune(self.path.parent)
        except OSError:
            return


_last_prune: dict[Path, float] = {}


def _prune(directory: Path) -> None:
    now = time.time()
    if now - _last_prune.get(directory, 0.0) < 3600:
        return
    _last_prune[directory] = now
    for old in directory.iterdir():
        try:
            if now - old.lstat().st_mtime > KEEP_SECONDS:
                old.unlink()
        except OSError:
            pass
