"""The warm query path: a small local service that keeps the model and a connection loaded, so
the per-prompt hook answers in milliseconds instead of paying for imports and a model load.

Design decisions:
- The service computes exactly what the cold hook computes: each request runs the same
  `context.hook_context` (registered vaults only, the registry and the vault's `.env` read
  afresh every time); only the imports, the embedder and one connection per database stay
  loaded (`WarmResources`).
- One service per environment: the socket's name carries a fingerprint of every variable that
  can change an answer (VAULTMEM_*, DATABASE_URL, PG*, HOME, XDG_*_HOME, *_KEY, *_TOKEN) and of
  vaultmem's own code, and the hook starts the service with its own environment. A hook from
  another environment, or after an upgrade, never gets an answer computed under other
  settings: it finds no service and starts its own.
- Where: `<vaultmem home>/run/warm-<fingerprint>.sock`, the directory 0700 and the socket 0600;
  the service also checks each peer's uid where the OS reports it. Started on demand by the
  hook (which answers that prompt cold), or by `vaultmem mcp` / `vaultmem warm start`; it stops
  after VAULTMEM_WARM_IDLE seconds without a request, when its socket is taken away, or when
  vaultmem's code changes under it.
- The client half (`ask`, `endpoint`) uses the standard library only (no psycopg, numpy or
  model): the hook imports it first and falls back to the cold path whenever the service is
  absent, slow or unreadable. One request per connection: a JSON object, then the reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import Settings
    from .db import Conn
    from .embed import Embedder

PROTOCOL = 1
# Unix socket paths are limited to ~104-108 bytes; past this the address goes through the
# directory's descriptor (/proc/self/fd/N/name) where the OS has one.
MAX_SOCKET_PATH = 100
# The hook starts a missing service at most this often (a service that cannot start must not
# cost every prompt a fork).
SPAWN_EVERY_SECONDS = 30.0
MAX_REPLY_BYTES = 1 << 20
# A connection unused for this long is checked before it is handed out.
PING_AFTER_SECONDS = 10.0
# Bounds a query on the warm connection: a stuck statement must not block the service.
STATEMENT_TIMEOUT_MS = 10_000

_FINGERPRINT_NAMES = ("DATABASE_URL", "HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


def _relevant(name: str) -> bool:
    return (
        name.startswith(("VAULTMEM_", "PG"))
        or name in _FINGERPRINT_NAMES
        or name.endswith(("_KEY", "_TOKEN"))
    )


def code_signature() -> str:
    """Changes whenever a module of this vaultmem changes (an upgrade, an edit)."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    with os.scandir(here) as entries:
        for e in sorted(entries, key=lambda e: e.name):
            if e.name.endswith(".py"):
                h.update(f"{e.name}:{e.stat().st_mtime_ns}:{e.stat().st_size};".encode())
    return h.hexdigest()[:16]


def fingerprint(environ: Mapping[str, str]) -> str:
    """A short hash of what decides the service's answers: the relevant environment (values
    included, hashed, never stored) and vaultmem's code."""
    h = hashlib.sha256(code_signature().encode())
    for name in sorted(n for n in environ if _relevant(n)):
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        h.update(environ[name].encode("utf-8", "surrogateescape") + b"\0")
    return h.hexdigest()[:20]


@dataclass(frozen=True)
class Endpoint:
    """Where the service for one environment listens, and its bookkeeping files."""

    directory: Path
    name: str  # "warm-<fingerprint>"
    idle: int  # VAULTMEM_WARM_IDLE for this environment

    @property
    def socket(self) -> Path:
        return self.directory / f"{self.name}.sock"

    @property
    def lock(self) -> Path:
        return self.directory / f"{self.name}.lock"

    @property
    def spawned(self) -> Path:
        return self.directory / f"{self.name}.spawned"

    @property
    def log(self) -> Path:
        return self.directory / f"{self.name}.log"

    @contextmanager
    def address(self) -> Iterator[str]:
        """The socket address to bind or connect to (short, whatever the directory's length)."""
        full = str(self.socket)
        if len(os.fsencode(full)) <= MAX_SOCKET_PATH:
            yield full
            return
        if not os.path.isdir("/proc/self/fd"):
            raise OSError(f"the socket path {full} is too long for this system")
        fd = os.open(self.directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            yield f"/proc/self/fd/{fd}/{self.socket.name}"
        finally:
            os.close(fd)


def endpoint(environ: Mapping[str, str] | None = None) -> Endpoint | None:
    """The endpoint for this environment, or None when the warm path is off
    (VAULTMEM_WARM_IDLE=0). Reads the registry's `[settings]` as settings do."""
    from . import vaults
    from .config import SETTINGS, default_home

    env = os.environ if environ is None else environ
    merged = {**vaults.load(env).settings, **env}
    raw = merged.get("VAULTMEM_WARM_IDLE") or SETTINGS["VAULTMEM_WARM_IDLE"][0]
    try:
        idle = int(raw)
    except ValueError:
        return None
    if idle <= 0:
        return None
    return Endpoint(default_home(merged) / "run", f"warm-{fingerprint(env)}", idle)


# --- client (standard library only) ------------------------------------------------------------


def request(ep: Endpoint, message: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send one request and return the reply. Raises OSError (absent, refused, timed out) or
    ValueError (an unreadable reply)."""
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        with ep.address() as address:
            sock.connect(address)
        sock.sendall(json.dumps(message).encode("ascii"))
        sock.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        size = 0
        while True:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REPLY_BYTES:
                raise ValueError("reply too large")
    reply = json.loads(b"".join(chunks))
    if not isinstance(reply, dict) or reply.get("protocol") != PROTOCOL:
        raise ValueError("not a vaultmem warm service reply")
    return reply


def ask(payload: bytes, include_memory: bool, timeout: float) -> str | None:
    """The hook's context from the warm service: its text ("" when it had nothing, or failed
    as the cold path would have), or None when no service answered in `timeout` seconds (the
    caller then runs the cold path; a missing service is started for the next prompt)."""
    try:
        ep = endpoint()
    except Exception:  # noqa: BLE001 - an unreadable registry: the cold path reports nothing too
        return None
    if ep is None:
        return None
    message = {
        "protocol": PROTOCOL,
        "op": "hook",
        "memory": include_memory,
        "payload": payload.decode("utf-8", "surrogateescape"),
    }
    try:
        reply = request(ep, message, timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        spawn(ep)
        return None
    except (OSError, ValueError):
        return None
    if reply.get("ok"):
        text = reply.get("text")
        return text if isinstance(text, str) else None
    return ""


def spawn(ep: Endpoint, *, force: bool = False) -> bool:
    """Start the service for this environment in the background (detached, its own session).
    At most once per SPAWN_EVERY_SECONDS unless `force`. True if a process was started."""
    try:
        _private_dir(ep.directory)
        if not force:
            try:
                if time.time() - ep.spawned.stat().st_mtime < SPAWN_EVERY_SECONDS:
                    return False
            except FileNotFoundError:
                pass
        ep.spawned.touch(mode=0o600)
        os.utime(ep.spawned)
        import subprocess

        with open(ep.log, "ab") as err:
            os.chmod(ep.log, 0o600)
            subprocess.Popen(
                [sys.executable, "-m", "vaultmem", "warm", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=str(ep.directory),
                start_new_session=True,
                close_fds=True,
            )
        return True
    except OSError:
        return False


def _private_dir(path: Path) -> None:
    """Create `path` 0700, or make sure an existing one is ours and 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


# --- resources kept loaded -------------------------------------------------------------------


class WarmResources:
    """One open connection per database URL and one embedder per embedding configuration,
    kept for the life of the process. Not thread-safe: callers hold `lock` around a use."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.RLock()
        self._conns: dict[str, tuple[Conn, float]] = {}
        self._embedders: dict[tuple[Any, ...], Embedder] = {}

    def connection(
        self, settings: Settings, *, start: bool, timeout: int
    ) -> AbstractContextManager[Conn]:
        """The kept connection for the settings' database (opened now if there is none or it
        died), as a context manager that keeps it open. Raises like `db.connect`."""
        from . import db

        url = db.database_url(settings, start=start)
        conn = self._checked(url)
        if conn is None:
            conn = db.connect_url(url, timeout=timeout)
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            conn.commit()
        self._conns[url] = (conn, time.monotonic())
        return self._lease(url, conn)

    @contextmanager
    def _lease(self, url: str, conn: Conn) -> Iterator[Conn]:
        from psycopg.pq import TransactionStatus

        try:
            yield conn
        except BaseException:
            self._drop(url)
            raise
        if conn.closed or conn.broken:
            self._drop(url)
        elif conn.info.transaction_status != TransactionStatus.IDLE:
            conn.rollback()

    def _checked(self, url: str) -> Conn | None:
        held = self._conns.get(url)
        if held is None:
            return None
        conn, used = held
        if conn.closed or conn.broken:
            self._drop(url)
            return None
        if time.monotonic() - used > PING_AFTER_SECONDS:
            try:
                conn.execute("SELECT 1")
                conn.commit()
            except Exception:  # noqa: BLE001 - a dead connection: open a new one
                self._drop(url)
                return None
        return conn

    def _drop(self, url: str) -> None:
        held = self._conns.pop(url, None)
        if held is not None:
            try:
                held[0].close()
            except Exception:  # noqa: BLE001
                pass

    def embedder(self, settings: Settings) -> Embedder:
        from .embed import get_embedder

        key = (
            settings.embedding_provider,
            settings.embedding_model,
            settings.embedding_base_url,
            settings.embedding_api_key_var,
            hashlib.sha256(settings.embedding_api_key.encode()).hexdigest(),
            settings.embedding_timeout,
            settings.embedding_max_retries,
            settings.embedding_batch_size,
        )
        found = self._embedders.get(key)
        if found is None:
            found = self._embedders[key] = get_embedder(settings)
        return found

    def close(self) -> None:
        for url in list(self._conns):
            self._drop(url)


def warm_up(resources: WarmResources) -> str:
    """Load what the first request would: the search stack, the default vault's embedder (one
    query embedded) and its connection. Best effort; returns what was warmed, for the log."""
    from . import query, vaults  # noqa: F401 - imported to be loaded
    from .config import load_settings

    try:
        user = vaults.load()
        entry = vaults.resolve(user)
        settings = load_settings(entry.path if entry else None, user=user)
        embedder = resources.embedder(settings)
        embedder.embed_query("warm up")
        with resources.connection(settings, start=False, timeout=3):
            pass
        return f"warmed {embedder.model_id} for {entry.name if entry else 'no vault'}"
    except Exception as exc:  # noqa: BLE001 - the first request will say what is wrong
        return f"warm-up incomplete: {exc}"


# --- the service -------------------------------------------------------------------------------


class Service:
    """The warm service's state: what it serves, since when, and how it stops."""

    def __init__(self, ep: Endpoint) -> None:
        self.endpoint = ep
        self.resources = WarmResources()
        self.started = time.time()
        self.last_request = time.monotonic()
        self.served = 0
        self.stopping = False
        self.code = code_signature()

    def handle(self, message: Any) -> dict[str, Any]:
        from .context import hook_context
        from .injections import CLAUDE_HOOK_WARM

        if not isinstance(message, dict) or message.get("protocol") != PROTOCOL:
            return {"ok": False, "error": "unsupported request"}
        op = message.get("op")
        if op == "status":
            return {"ok": True, **self.status()}
        if op == "stop":
            self.stopping = True
            return {"ok": True}
        if op != "hook" or not isinstance(message.get("payload"), str):
            return {"ok": False, "error": "unsupported request"}
        payload = message["payload"].encode("utf-8", "surrogateescape")
        self.last_request = time.monotonic()
        with self.resources.lock:
            try:
                text = hook_context(
                    payload,
                    include_memory=bool(message.get("memory", True)),
                    resources=self.resources,
                    source=CLAUDE_HOOK_WARM,
                )
            except Exception as exc:  # noqa: BLE001 - fail open, like the cold hook
                return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            finally:
                self.served += 1
                self.last_request = time.monotonic()
        return {"ok": True, "text": text}

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "served": self.served,
            "idle_seconds": round(time.monotonic() - self.last_request, 1),
            "idle_limit": self.endpoint.idle,
            "socket": str(self.endpoint.socket),
        }


def serve(environ: Mapping[str, str] | None = None) -> str:
    """Run the service for this environment in the foreground until it is idle for
    VAULTMEM_WARM_IDLE seconds, stopped, or replaced. Returns why it ended."""
    import fcntl
    import signal
    import threading

    ep = endpoint(environ)
    if ep is None:
        return "the warm service is off (VAULTMEM_WARM_IDLE=0)"
    _private_dir(ep.directory)
    lock = open(ep.lock, "a")  # noqa: SIM115 - held for the life of the process
    os.chmod(ep.lock, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return "another warm service is running for this environment"
    service = Service(ep)
    print(warm_up(service.resources), file=sys.stderr, flush=True)

    def on_term(signum: int, frame: Any) -> None:
        service.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ep.socket.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            with ep.address() as address:
                listener.bind(address)
        finally:
            os.umask(old)
        os.chmod(ep.socket, 0o600)
        mine = ep.socket.stat().st_ino
        listener.listen(32)
        listener.settimeout(1.0)
        service.last_request = time.monotonic()
        why = ""
        while not why:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                conn = None
            if conn is not None:
                threading.Thread(target=_serve_one, args=(service, conn), daemon=True).start()
            why = _should_stop(service, mine)
        return why
    finally:
        listener.close()
        try:
            if ep.socket.stat().st_ino == mine:
                ep.socket.unlink()
        except (OSError, UnboundLocalError):
            pass
        service.resources.close()
        lock.close()


def _should_stop(service: Service, inode: int) -> str:
    if service.stopping:
        return "stopped"
    if time.monotonic() - service.last_request > service.endpoint.idle:
        return f"idle for {service.endpoint.idle} s"
    try:
        if service.endpoint.socket.stat().st_ino != inode:
            return "its socket was replaced"
    except OSError:
        return "its socket was removed"
    if code_signature() != service.code:
        return "vaultmem's code changed"
    return ""


def _peer_is_me(conn: socket.socket) -> bool:
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None or not hasattr(os, "getuid"):
        return True  # the socket's 0600 mode and the 0700 directory still apply
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _serve_one(service: Service, conn: socket.socket) -> None:
    with conn:
        try:
            if not _peer_is_me(conn):
                return
            conn.settimeout(5.0)
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    return
            try:
                message = json.loads(b"".join(chunks))
            except ValueError:
                message = None
            reply = {"protocol": PROTOCOL, **service.handle(message)}
            conn.sendall(json.dumps(reply, ensure_ascii=True).encode("ascii"))
        except OSError:
            pass


def status(environ: Mapping[str, str] | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """The service for this environment: {"running": False, ...} or its status."""
    ep = endpoint(environ)
    if ep is None:
        return {"running": False, "enabled": False}
    try:
        reply = request(ep, {"protocol": PROTOCOL, "op": "status"}, timeout)
    except (OSError, ValueError):
        return {"running": False, "enabled": True, "socket": str(ep.socket)}
    return {"running": True, "enabled": True, **{k: v for k, v in reply.items() if k != "ok"}}


def start(environ: Mapping[str, str] | None = None, wait: float = 60.0) -> dict[str, Any]:
    """Start the service for this environment unless it runs; wait until it answers."""
    ep = endpoint(environ)
    if ep is None:
        return {"running": False, "enabled": False}
    found = status(environ, timeout=1.0)
    if found["running"]:
        return found
    spawn(ep, force=True)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.1)
        found = status(environ, timeout=1.0)
        if found["running"]:
            return found
    return found


def stop(environ: Mapping[str, str] | None = None) -> bool:
    """Ask the service for this environment to stop. True if one was running."""
    ep = endpoint(environ)
    if ep is None:
        return False
    try:
        request(ep, {"protocol": PROTOCOL, "op": "stop"}, 2.0)
    except (OSError, ValueError):
        return False
    return True
