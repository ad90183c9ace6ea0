"""The hook's half of the warm path: find the warm service for this environment and ask it.

Design decision: every prompt starts a new hook process, and on the warm path its start-up
imports are most of what it costs, so this module imports only os, sys, time, zlib and
`_socket`, the C module under `socket` (whose Python layer pulls in selectors, enum and
collections: most of the client's import time); no json, re, pathlib, dataclasses, hashlib,
and nothing of the search stack. The protocol is
bytes for the same reason: a request is one header line (`vaultmem-warm 1 hook memory=1`) and
the hook JSON as Claude Code sent it; a reply is `ok` or `error <why>` on the first line, then
the text. One request per connection. The registry (`config.toml`) is parsed only when it names
a setting this module needs (VAULTMEM_HOME, VAULTMEM_WARM_IDLE); `config` and `vaults` compute
the same values (tests check they agree). The service itself is in `warm.py`.
"""

from __future__ import annotations

import _socket
import os
import sys
import time
import zlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from _socket import socket
    from collections.abc import Callable, Mapping

MAGIC = b"vaultmem-warm 1"
DEFAULT_IDLE = 1800  # config.SETTINGS["VAULTMEM_WARM_IDLE"]
# Unix socket paths are limited to ~104-108 bytes; past this the address goes through the
# directory's descriptor (/proc/self/fd/N/name) where the OS has one.
MAX_SOCKET_PATH = 100
# The hook starts a missing service at most this often: a service that cannot start must not
# cost every prompt a fork.
SPAWN_EVERY_SECONDS = 30.0
# The file whose age says when a service was last started for this endpoint (the suffix after
# the endpoint's name).
SPAWN_MARK = ".spawned"
MAX_MESSAGE_BYTES = 1 << 20
_FINGERPRINT_NAMES = ("DATABASE_URL", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
_REGISTRY_NAMES = (b"VAULTMEM_HOME", b"VAULTMEM_WARM_IDLE")


def relevant(name: str) -> bool:
    """Whether an environment variable can change the service's answers."""
    return (
        name.startswith(("VAULTMEM_", "PG"))
        or name in _FINGERPRINT_NAMES
        or name.endswith(("_KEY", "_TOKEN"))
    )


def _digest(data: bytes) -> str:
    """96 bits of checksums: tells a user's environments apart (all of them are the user's
    own, behind a 0700 directory, so this needs no cryptographic hash)."""
    return f"{zlib.crc32(data):08x}{zlib.crc32(data, 0x9E3779B9):08x}{zlib.adler32(data):08x}"


def code_signature() -> str:
    """Changes whenever a module of this vaultmem changes (an upgrade, an edit), in any of its
    rooms: every `.py` file under the package, one `scandir` per directory (no os.walk, which
    would cost the warm hook an import)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts = []
    pending = [("", package)]
    while pending:
        prefix, directory = pending.pop()
        with os.scandir(directory) as entries:
            for e in entries:
                if e.name.endswith(".py"):
                    st = e.stat()
                    parts.append(f"{prefix}{e.name}:{st.st_mtime_ns}:{st.st_size}")
                elif e.name != "__pycache__" and e.is_dir(follow_symlinks=False):
                    pending.append((f"{prefix}{e.name}/", e.path))
    return _digest(";".join(sorted(parts)).encode())


def fingerprint(environ: Mapping[str, str]) -> str:
    """What decides the service's answers: vaultmem's code and the relevant environment
    (values included, checksummed, never stored)."""
    material = [code_signature()]
    for name in sorted(n for n in environ if relevant(n)):
        material.append(f"{name}\0{environ[name]}")
    return _digest("\0\0".join(material).encode("utf-8", "surrogateescape"))


def config_file(environ: Mapping[str, str]) -> str:
    """The user's registry, as `vaults.config_path` finds it."""
    if environ.get("VAULTMEM_CONFIG"):
        return os.path.expanduser(environ["VAULTMEM_CONFIG"])
    home = environ.get("HOME") or os.path.expanduser("~")
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return os.path.join(os.path.expanduser(base), "vaultmem", "config.toml")


def registry_settings(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The registry's `[settings]`, read only when it may set what the client needs."""
    try:
        # Never through a symbolic link (files.py; vaults.load refuses one the same way).
        fd = os.open(config_file(environ), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with open(fd, "rb") as fh:
            raw = fh.read()
    except OSError:
        return {}
    if not any(name in raw for name in _REGISTRY_NAMES):
        return {}
    from .. import vaults

    return vaults.load(environ).settings


def user_home(environ: Mapping[str, str]) -> str:
    """`config.user_home`: VAULTMEM_HOME, else $XDG_DATA_HOME/vaultmem, else
    ~/.local/share/vaultmem (the environment first, then the registry's settings)."""
    settings = registry_settings(environ)

    def get(name: str) -> str:
        return environ.get(name) or settings.get(name) or ""

    if get("VAULTMEM_HOME"):
        return os.path.expanduser(get("VAULTMEM_HOME"))
    base = get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(os.path.expanduser(base), "vaultmem")


class Endpoint:
    """Where the service for one environment listens, and its bookkeeping files."""

    __slots__ = ("directory", "name", "idle")

    def __init__(self, directory: str, name: str, idle: int) -> None:
        self.directory = directory  # <vaultmem home>/run
        self.name = name  # "warm-<fingerprint>"
        self.idle = idle  # VAULTMEM_WARM_IDLE for this environment

    def path(self, suffix: str) -> str:
        return os.path.join(self.directory, self.name + suffix)

    @property
    def socket_path(self) -> str:
        return self.path(".sock")

    def _address(self, use: Callable[[str], object]) -> None:
        """Call `use(address)` with an address short enough for a unix socket."""
        full = self.socket_path
        if len(os.fsencode(full)) <= MAX_SOCKET_PATH:
            use(full)
            return
        if not os.path.isdir("/proc/self/fd"):
            raise OSError(f"the socket path {full} is too long for this system")
        fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            use(f"/proc/self/fd/{fd}/{self.name}.sock")
        finally:
            os.close(fd)

    def connect(self, sock: socket) -> None:
        self._address(sock.connect)

    def bind(self, sock: socket) -> None:
        self._address(sock.bind)


def endpoint(environ: Mapping[str, str] | None = None) -> Endpoint | None:
    """The endpoint for this environment; None when the warm path is off (VAULTMEM_WARM_IDLE
    is 0, in the environment or the registry's settings)."""
    env = os.environ if environ is None else environ
    raw = env.get("VAULTMEM_WARM_IDLE") or registry_settings(env).get("VAULTMEM_WARM_IDLE")
    try:
        idle = int(raw) if raw else DEFAULT_IDLE
    except ValueError:
        return None
    if idle <= 0:
        return None
    return Endpoint(os.path.join(user_home(env), "run"), "warm-" + fingerprint(env), idle)


def request(ep: Endpoint, header: bytes, body: bytes, timeout: float) -> tuple[bool, bytes]:
    """Send one request; (the service said ok, the reply's body). Raises OSError (absent,
    refused, timed out) or ValueError (not a warm service's reply)."""
    deadline = time.monotonic() + timeout
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        ep.connect(sock)
        sock.sendall(MAGIC + b" " + header + b"\n" + body)
        sock.shutdown(_socket.SHUT_WR)
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_MESSAGE_BYTES:
                raise ValueError("reply too large")
    finally:
        sock.close()
    status, sep, rest = b"".join(chunks).partition(b"\n")
    if not sep or not status.startswith(MAGIC + b" "):
        raise ValueError("not a vaultmem warm service reply")
    verdict = status[len(MAGIC) + 1 :]
    return verdict == b"ok", rest if verdict == b"ok" else verdict


def ask(payload: bytes, include_memory: bool, timeout: float) -> str | None:
    """The hook's context from the warm service: its text ("" when it had nothing, or failed
    as the cold path would have), or None when no service answered within `timeout` seconds
    (the caller then runs the cold path; a missing service is started for the next prompt)."""
    try:
        ep = endpoint()
    except Exception:  # noqa: BLE001 - an unreadable registry: the cold path says nothing too
        return None
    if ep is None:
        return None
    header = b"hook memory=1" if include_memory else b"hook memory=0"
    try:
        ok, body = request(ep, header, payload, timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        spawn(ep)
        return None
    except (OSError, ValueError):
        return None
    return body.decode("utf-8", "replace") if ok else ""


def private_dir(path: str) -> None:
    """Create `path` 0700, or make sure an existing one is ours and 0700."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def spawn(ep: Endpoint, *, force: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """Start the service for this environment (`environ`, default this process's) in the
    background, detached in its own session, at most once per SPAWN_EVERY_SECONDS unless
    `force`. True if one was started."""
    try:
        private_dir(ep.directory)
        marker = ep.path(SPAWN_MARK)
        if not force:
            try:
                if time.time() - os.stat(marker).st_mtime < SPAWN_EVERY_SECONDS:
                    return False
            except FileNotFoundError:
                pass
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))
        os.utime(marker)
        import subprocess

        log = ep.path(".log")
        with open(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as err:
            subprocess.Popen(
                [sys.executable, "-m", "vaultmem", "warm", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=ep.directory,
                start_new_session=True,
                close_fds=True,
                env=None if environ is None else dict(environ),
            )
        return True
    except OSError:
        return False
