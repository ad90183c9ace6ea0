"""Files vaultmem writes for itself: one atomic write for all of them.

Design decision: every state file vaultmem owns (the vault registry, Claude Code's settings it
edits, cached ONNX graphs and vectors, the drainer's progress) is replaced whole, never edited
in place, so a reader sees the old file or the new one, never half of either, and a crash
leaves no temp file behind. The target is never followed through a symlink: `os.replace`
replaces the link itself (the trust boundary: vaultmem never writes through a symlink).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(
    path: Path, data: str | bytes, *, mode: int | None = None, dir_mode: int = 0o777
) -> None:
    """Write `data` to `path` atomically (temp file in the same directory, then rename).

    `mode`: the new file's permissions. None keeps an existing file's permissions and gives a
    new file 0600 (these files are the user's own state). A missing parent directory is
    created with `dir_mode` (less the umask). Raises OSError; the temp file is then removed.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=dir_mode)
    if mode is None:
        try:
            mode = path.lstat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
