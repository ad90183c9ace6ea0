"""Files vaultmem reads and writes for the user, never through a symbolic link.

Design decisions:
- Every state file vaultmem owns (the vault registry, the Claude Code settings it edits,
  `~/.claude.json`, the injection log, the vault's `.git/vaultmem/` files, cached ONNX graphs
  and vectors) is replaced whole by `atomic_write`, never edited in place, so a reader sees the
  old file or the new one, never half of either, and a crash leaves no temp file behind.
- The trust boundary: vaultmem never reads or writes a file through a symbolic link on the
  user's behalf. A committed `.claude/settings.json` that links to `~/.docker/config.json`
  must not have the registry credential in it copied into a file git shows, nor a link in
  `.git/vaultmem/` send the hook log elsewhere. The last component is opened with O_NOFOLLOW
  (and its target's mode checked on the descriptor), and with `below` every folder between a
  trusted base (the project, the home, the git directory) and the file is opened the same way,
  one descriptor at a time, so no link can be swapped in between a check and the use. A link
  is refused with `SymlinkRefused`, one line that says what to do.
- Standard library only: the per-prompt hook's path uses these.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import SymlinkRefused

__all__ = ["append_line", "atomic_write", "open_regular", "read_regular", "touch"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
ADVICE = (
    "replace the link with a regular file (a copy of what it points to), then run the command again"
)


def refusal(path: Path, advice: str = ADVICE) -> SymlinkRefused:
    return SymlinkRefused(
        f"{path} is a symbolic link, and vaultmem never reads or writes a file through one: "
        f"{advice}"
    )


@contextlib.contextmanager
def _parent_fd(path: Path, below: Path | None, *, create: int | None) -> Iterator[int]:
    """A descriptor of `path`'s folder. With `below` (a folder above it), every folder from
    there down is opened without following a link (and created with mode `create` when missing
    and `create` is given); without, the folder is opened as the system finds it."""
    parent = path.parent
    parts: tuple[str, ...] = ()
    if below is not None:
        try:
            parts = parent.relative_to(below).parts
        except ValueError:
            below = None
    if below is None:
        if create is not None:
            parent.mkdir(parents=True, exist_ok=True, mode=create)
        fd = os.open(parent, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    else:
        if create is not None:
            below.mkdir(parents=True, exist_ok=True, mode=create)
        fd = os.open(below, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        walked = below
        try:
            for part in parts:
                walked = walked / part
                if part in ("", ".", ".."):
                    raise refusal(walked)
                if create is not None:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, create, dir_fd=fd)
                try:
                    nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=fd)
                except OSError as exc:
                    if _is_link(fd, part):
                        raise refusal(walked) from None
                    raise OSError(exc.errno, exc.strerror, str(walked)) from None
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
    try:
        yield fd
    finally:
        os.close(fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_regular(
    path: Path,
    flags: int,
    mode: int = 0o600,
    *,
    below: Path | None = None,
    advice: str = ADVICE,
) -> int:
    """`os.open(path, flags, mode)` for a regular file, never through a symbolic link (see the
    module's docstring for `below`). Raises SymlinkRefused for a link, OSError otherwise (a
    missing file: FileNotFoundError; something that is not a regular file: ENXIO)."""
    create = 0o700 if flags & os.O_CREAT else None
    with _parent_fd(path, below, create=create) as dfd:
        try:
            # O_NONBLOCK: opening a FIFO planted in a link's place must not hang the caller.
            fd = os.open(path.name, flags | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) or _is_link(dfd, path.name):
                raise refusal(path, advice) from None
            raise OSError(exc.errno, exc.strerror, str(path)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.ENXIO, "not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def read_regular(
    path: Path, *, below: Path | None = None, limit: int | None = None, advice: str = ADVICE
) -> bytes | None:
    """The bytes of the regular file `path` (at most `limit`), or None when it does not exist.
    Never through a symbolic link: one is SymlinkRefused."""
    try:
        fd = open_regular(path, os.O_RDONLY, below=below, advice=advice)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)


def append_line(path: Path, data: bytes, *, below: Path | None = None) -> None:
    """Append `data` to `path` (created 0600), in one write (O_APPEND: concurrent writers never
    interleave a line), never through a symbolic link."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600, below=below)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def touch(path: Path, *, below: Path | None = None) -> None:
    """Create `path` (0600) or update its time, never through a symbolic link."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT, 0o600, below=below)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: str | bytes,
    *,
    mode: int | None = None,
    dir_mode: int = 0o777,
    below: Path | None = None,
    advice: str = ADVICE,
    umask: bool = False,
) -> None:
    """Write `data` to `path` atomically (a temp file in the same folder, then a rename).

    `mode`: the new file's permissions. None keeps an existing file's permissions and gives a
    new file 0600 (these files are the user's own state). `umask`: instead, 0666 less the
    process's umask, as git creates the files of a work tree. Missing folders are created with
    `dir_mode` (less the umask). A `path` that is a symbolic link is refused (SymlinkRefused),
    never replaced by a file or written through; with `below`, so is a link among the folders
    under it. Raises OSError otherwise; the temp file is then removed.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _parent_fd(path, below, create=dir_mode) as dfd:
        try:
            current = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        if current is not None and stat.S_ISLNK(current.st_mode):
            raise refusal(path, advice)
        if mode is None:
            mode = stat.S_IMODE(current.st_mode) if current is not None else 0o600
        tmp = f".{path.name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
            0o666 if umask else 0o600,  # the kernel takes the umask off
            dir_fd=dfd,
        )
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
                if not umask:
                    os.fchmod(fh.fileno(), mode)
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


_last_prune: dict[Path, float] = {}


def prune_stale(directory: Path, *, older_than: float, every: float) -> None:
    """Delete the entries of `directory` not modified for `older_than` seconds, judged by their
    own mtime (a link as itself, never what it points to), at most once per `every` seconds per
    process and folder: a caller that runs for every prompt pays for a scan only now and then.
    Best effort: what cannot be read or removed stays."""
    now = time.time()
    if now - _last_prune.get(directory, -math.inf) < every:
        return
    _last_prune[directory] = now
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for old in entries:
        try:
            if now - old.lstat().st_mtime > older_than:
                old.unlink()
        except OSError:
            pass
