"""The warm query path: a small local service that keeps the model and a connection loaded, so
the per-prompt hook answers in milliseconds instead of paying for imports and a model load.

Design decisions:
- The service computes exactly what the cold hook computes: each request runs the same
  `context.hook_context` (registered vaults only, the registry and the vault's `.env` read
  afresh every time); only the imports, the embedder and one connection per database stay
  loaded (`WarmResources`).
- One service per environment: the socket's name carries a fingerprint of every variable that
  can change an answer (VAULTMEM_*, DATABASE_URL, PG*, HOME, XDG_*_HOME, *_KEY, *_TOKEN) and of
  vaultmem's own code (`warm_client.fingerprint`), and the hook starts the service with its
  own environment. A hook from another environment, or after an upgrade, never gets an answer
  computed under other settings: it finds no service and starts its own.
- Where: `<vaultmem home>/run/warm-<fingerprint>.sock`, the directory 0700 and the socket 0600;
  the service also checks each peer's uid where the OS reports it. Started on demand by the
  hook (which answers that prompt cold), or by `vaultmem mcp` / `vaultmem warm start`; it stops
  after VAULTMEM_WARM_IDLE seconds without a request, when its socket is taken away, or when
  vaultmem's code changes under it.
- The client half is `warm_client` (os, sys, time, zlib and `_socket` only: no psycopg, numpy
  or model, not even json): the hook imports it first and falls back to the cold path
  whenever the service is absent, slow or unreadable.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from . import service_lock
from .warm_client import (
    MAGIC,
    MAX_MESSAGE_BYTES,
    SPAWN_MARK,
    Endpoint,
    code_signature,
    endpoint,
    private_dir,
    request,
    spawn,
)

if TYPE_CHECKING:
    from ..config import Settings
    from ..embed import Embedder
    from ..search import SecondOpinion
    from ..store.db import Conn

__all__ = ["WarmResources", "endpoint", "serve", "spawn", "start", "status", "stop", "warm_up"]

# How long a starting service waits for the lock of one that is stopping (which notices within
# its one-second accept timeout, then closes its connection and model) before it gives up.
LOCK_PATIENCE_SECONDS = 3.0
# A connection unused for this long is checked before it is handed out.
PING_AFTER_SECONDS = 10.0
# Bounds a query on the warm connection: a stuck statement must not block the service.
STATEMENT_TIMEOUT_MS = 10_000
# How often the background fill of the second opinion's vectors looks for new chunks.
FILL_RECHECK_SECONDS = 60.0


# --- resources kept loaded -------------------------------------------------------------------


class WarmResources:
    """Connections per database URL and one embedder per embedding configuration, kept for the
    life of the process, for callers on several threads at once (the warm service's requests,
    the MCP server's tools).

    Design decision: nothing is held across a request's work. `lock` guards only the
    bookkeeping (the idle connections, the embedders) for the time of a dict operation; a
    connection is leased to one caller at a time (`connection`), another caller gets another
    one, and it goes back to the idle list afterwards. So a slow request (a huge note's scan
    in MCP `get`, a statement waiting on a lock) never stalls the others. Embedders do their
    own locking around the model (one model call at a time), which costs the others a query
    embedding at most."""

    # build_context starts a prompt's query embedding beside its database work (embed.Prefetched).
    prefetch = True
    # Idle connections kept per database; more callers at once open more, closed when returned.
    MAX_IDLE = 2

    def __init__(self, *, fill: bool = False) -> None:
        # Whether this process also fills the second opinion's chunk vectors in the background
        # (the warm service; an MCP server, one per Claude Code session, does not).
        self.fill = fill
        self.lock = threading.Lock()
        self._embedder_lock = threading.Lock()  # held while a model loads, apart from `lock`
        self._idle: dict[str, list[tuple[Conn, float]]] = {}
        self._embedders: dict[tuple[Any, ...], Embedder] = {}
        self._closed = False
        # The second opinion's model (`search.second_opinion`): loaded once, in the background
        # (~1.3 s), so no request waits for it; until then searches are judged without it.
        self._opinion: SecondOpinion | None = None
        self._opinion_loading: threading.Thread | None = None
        self._busy = 0  # connections leased to callers right now (the fill waits for 0)
        self._stop = threading.Event()

    def connection(
        self, settings: Settings, *, start: bool, timeout: int
    ) -> AbstractContextManager[Conn]:
        """A connection to the settings' database for this caller alone (a kept one, or one
        opened now), as a context manager that gives it back afterwards. Raises like
        `db.connect`."""
        from ..store import db

        url = db.database_url(settings, start=start)
        conn = self._take(url)
        if conn is None:
            conn = db.connect_url(url, timeout=timeout, purpose="vaultmem-warm")
            try:
                db.check_readable(conn)  # once per connection: a newer schema is refused
            except BaseException:
                conn.close()
                raise
        return self._lease(url, conn)

    @contextmanager
    def _lease(self, url: str, conn: Conn) -> Iterator[Conn]:
        from psycopg.pq import TransactionStatus

        # The bound on a stuck statement is a cancel request sent from here, not a session
        # `SET statement_timeout`: behind a pooler in transaction mode a session setting would
        # stay on whichever server connection ran it and bound other clients' statements.
        watchdog = threading.Timer(STATEMENT_TIMEOUT_MS / 1000, conn.cancel_safe)
        watchdog.daemon = True
        watchdog.start()
        with self.lock:
            self._busy += 1
        try:
            yield conn
        except BaseException:
            _close(conn)
            raise
        finally:
            watchdog.cancel()
            with self.lock:
                self._busy -= 1
        if conn.closed or conn.broken:
            return
        if conn.info.transaction_status != TransactionStatus.IDLE:
            try:
                conn.rollback()
            except Exception:  # noqa: BLE001 - a connection that cannot roll back is dropped
                _close(conn)
                return
        with self.lock:
            idle = self._idle.setdefault(url, [])
            if not self._closed and len(idle) < self.MAX_IDLE:
                idle.append((conn, time.monotonic()))
                return
        _close(conn)

    def _take(self, url: str) -> Conn | None:
        """An idle connection to `url` that still works, or None."""
        while True:
            with self.lock:
                idle = self._idle.get(url)
                if not idle:
                    return None
                conn, used = idle.pop()
            if conn.closed or conn.broken:
                continue
            if time.monotonic() - used > PING_AFTER_SECONDS:
                try:
                    conn.execute("SELECT 1")
                    conn.commit()
                except Exception:  # noqa: BLE001 - a dead connection: try the next, or open one
                    _close(conn)
                    continue
            return conn

    def embedder(self, settings: Settings) -> Embedder:
        from ..embed import get_embedder

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
            with self._embedder_lock:
                found = self._embedders.get(key)
                if found is None:
                    found = get_embedder(settings)
                    found.keep_warm()  # this process lives long: load once, embed queries fastest
                    self._embedders[key] = found
        return found

    def second_opinion(self, settings: Settings) -> SecondOpinion | None:
        """The loaded second opinion for a search under `settings`, or None: turned off
        (VAULTMEM_SECOND_OPINION=0), not calibrated for the vault's model (or it is the same
        model), still loading (this call starts the load), or unavailable here."""
        # Imported when asked: the hook's client imports this module and needs no embedder.
        from ..embed.second_opinion import wanted

        if not wanted(settings):
            return None
        opinion = self._opinion
        if opinion is None:
            self.load_second_opinion()
        return opinion

    @property
    def second_opinion_state(self) -> str:
        """ "ready", "loading", "unavailable" (it could not load here) or "off" (never asked)."""
        if self._opinion is not None:
            return "ready"
        thread = self._opinion_loading
        if thread is None:
            return "off"
        return "loading" if thread.is_alive() else "unavailable"

    def load_second_opinion(self, *, wait: bool = False) -> None:
        """Start loading the second opinion's model in a background thread (once)."""
        with self.lock:
            thread = self._opinion_loading
            if thread is None:
                thread = threading.Thread(
                    target=self._load_opinion, name="vaultmem-second-opinion", daemon=True
                )
                self._opinion_loading = thread
                thread.start()
        if wait:
            thread.join()

    def _load_opinion(self) -> None:
        from ..search import SecondOpinion

        opinion = SecondOpinion.load()
        if opinion is not None and self.fill:
            threading.Thread(
                target=self._fill_forever,
                args=(opinion,),
                name="vaultmem-second-opinion-fill",
                daemon=True,
            ).start()
        self._opinion = opinion

    def _fill_forever(self, opinion: SecondOpinion) -> None:
        """Fill the second opinion's chunk vectors of every registered vault this service's
        settings would search with it, then again when a search meets a chunk without one,
        or after FILL_RECHECK_SECONDS; at the lowest CPU priority, waiting while any request
        holds a connection."""
        from .. import vaults
        from ..config import load_settings
        from ..embed.second_opinion import wanted
        from ..store import db

        try:  # Linux: a thread's own nice value (the requests keep theirs)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        while not self._stop.is_set():
            try:
                user = vaults.load()
                for entry in user.vaults:
                    if self._stop.is_set():
                        break
                    settings = load_settings(entry.path, user=user, entry=entry)
                    if not wanted(settings):
                        continue
                    with db.connect(settings, start=False, timeout=3) as conn:
                        # As a reader finds it (context.build_context): a shared vault by its
                        # name on the server (filled only where this role may write it: its
                        # owner's), else this installation's vault at the path.
                        if entry.shared is not None:
                            vault = db.find_shared_vault(conn, entry.shared)
                        elif entry.path is not None:
                            vault = db.find_vault(
                                conn, entry.path, installation=settings.installation
                            )
                        else:
                            vault = None
                        if vault is not None:
                            opinion.fill(conn, vault.id, go_on=self._fill_may_go_on)
            except Exception as exc:  # noqa: BLE001 - background work: the next pass retries
                print(f"second opinion fill: {type(exc).__name__}", file=sys.stderr, flush=True)
            # Until a search meets an unfilled chunk (a new commit), or a while has passed.
            opinion.missing.wait(FILL_RECHECK_SECONDS)
            opinion.missing.clear()

    def _fill_may_go_on(self) -> bool:
        """Between two fill batches: wait while a request is being answered; False once the
        service closes."""
        while self._busy and not self._stop.is_set():
            time.sleep(0.02)
        return not self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        if self._opinion is not None:
            self._opinion.missing.set()  # wakes the fill, which then sees the stop
        with self.lock:
            self._closed = True
            held = [c for idle in self._idle.values() for c, _ in idle]
            self._idle.clear()
        for conn in held:
            _close(conn)


def _close(conn: Conn) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001
        pass


def warm_up(resources: WarmResources) -> str:
    """Load what the first request would: the search stack, the default vault's embedder (one
    query embedded) and its connection. Best effort; returns what was warmed, for the log."""
    from .. import vaults
    from ..config import load_settings
    from ..embed.second_opinion import wanted
    from ..search import prepare_generic

    try:
        user = vaults.load()
        entry = vaults.resolve(user)
        settings = load_settings(entry.path if entry else None, user=user)
        embedder = resources.embedder(settings)
        embedder.embed_query("warm up")
        prepare_generic(embedder)  # if no ingest has cached them yet
        if wanted(settings):
            resources.load_second_opinion()  # in the background: ready a second or so later
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
        self.resources = WarmResources(fill=True)
        self.started = time.time()
        self.last_request = time.monotonic()
        self.served = 0
        self.busy_seconds = 0.0  # time spent answering hook requests
        self.cpu_seconds = 0.0  # CPU time (all threads) spent answering them
        self.stopping = False
        self.code = code_signature()
        self._stats = threading.Lock()

    def handle(self, message: bytes) -> tuple[bool, bytes]:
        """One request (header line, then body) -> (ok, reply body or why not)."""
        from ..terminal import clean
        from .context import hook_context
        from .injections import CLAUDE_HOOK_WARM

        header, _, body = message.partition(b"\n")
        words = header.split()
        if header[: len(MAGIC)] != MAGIC or len(words) < 3:
            return False, b"unsupported request"
        op = words[2]
        if op == b"status":
            return True, json.dumps(self.status()).encode()
        if op == b"stop":
            self.stopping = True
            return True, b""
        if op != b"hook":
            return False, b"unsupported request"
        self.last_request = began = time.monotonic()
        cpu = time.process_time()
        # No lock around the work: requests run side by side (WarmResources leases each its own
        # connection), so one slow prompt never makes the others fall back to the cold path.
        try:
            text = hook_context(
                body,
                include_memory=b"memory=0" not in words[3:],
                resources=self.resources,
                source=CLAUDE_HOOK_WARM,
            )
        except Exception as exc:  # noqa: BLE001 - fail open, like the cold hook
            why = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else "error"
            return False, why.encode("utf-8", "replace")
        finally:
            with self._stats:
                self.served += 1
                self.last_request = time.monotonic()
                self.busy_seconds += self.last_request - began
                # The process's CPU time: with requests overlapping it counts theirs too.
                self.cpu_seconds += time.process_time() - cpu
        # Cleaned here, not in the hook process: terminal.clean's `re` would cost every prompt's
        # start-up several milliseconds.
        return True, clean(text).encode("utf-8")

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started": self.started,
            "served": self.served,
            "mean_ms": round(self.busy_seconds * 1000 / self.served, 2) if self.served else None,
            "cpu_ms": round(self.cpu_seconds * 1000 / self.served, 2) if self.served else None,
            "idle_seconds": round(time.monotonic() - self.last_request, 1),
            "idle_limit": self.endpoint.idle,
            "second_opinion": self.resources.second_opinion_state,
            "socket": self.endpoint.socket_path,
        }


def serve(environ: Mapping[str, str] | None = None) -> str:
    """Run the service for this environment in the foreground until it is idle for
    VAULTMEM_WARM_IDLE seconds, stopped, or replaced. Returns why it ended."""
    import signal

    ep = endpoint(environ)
    if ep is None:
        return "the warm service is off (VAULTMEM_WARM_IDLE=0)"
    private_dir(ep.directory)
    # A service on its way out (stopped, idle, replaced) holds the lock until it has closed its
    # resources, and a hook that found its socket gone may start this one meanwhile: wait for
    # that, briefly, rather than give up and leave the hooks cold until the next spawn.
    lock_fd = service_lock.take(ep.path(".lock"), LOCK_PATIENCE_SECONDS)
    if lock_fd is None:
        return "another warm service is running for this environment"
    service = Service(ep)
    prune_stale(ep)
    print(warm_up(service.resources), file=sys.stderr, flush=True)

    def on_term(signum: int, frame: Any) -> None:
        service.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mine: int | None = None
    try:
        try:
            os.unlink(ep.socket_path)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            ep.bind(listener)
        finally:
            os.umask(old)
        os.chmod(ep.socket_path, 0o600)
        mine = os.stat(ep.socket_path).st_ino
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
            if mine is not None and os.stat(ep.socket_path).st_ino == mine:
                os.unlink(ep.socket_path)
        except OSError:
            pass
        service.resources.close()
        os.close(lock_fd)  # lets go of the service lock, now that everything is closed


STALE_SECONDS = 7 * 86400


def prune_stale(ep: Endpoint, now: float | None = None) -> None:
    """Remove other environments' bookkeeping files (lock, log, spawn mark) left for a week
    with no socket beside them: each vaultmem upgrade or new environment leaves a set."""
    now = time.time() if now is None else now
    try:
        names = os.listdir(ep.directory)
    except OSError:
        return
    live = {n.removesuffix(".sock") for n in names if n.endswith(".sock")}
    for name in names:
        stem = name.split(".", 1)[0]
        if not name.startswith("warm-") or stem == ep.name or stem in live:
            continue
        path = os.path.join(ep.directory, name)
        try:
            if now - os.stat(path).st_mtime > STALE_SECONDS:
                os.unlink(path)
        except OSError:
            pass


def _should_stop(service: Service, inode: int) -> str:
    if service.stopping:
        return "stopped"
    if time.monotonic() - service.last_request > service.endpoint.idle:
        return f"idle for {service.endpoint.idle} s"
    try:
        if os.stat(service.endpoint.socket_path).st_ino != inode:
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
    return int(uid) == os.getuid()


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
                if size > MAX_MESSAGE_BYTES:
                    return
            ok, body = service.handle(b"".join(chunks))
            verdict = b"ok" if ok else b"error " + body.replace(b"\n", b" ")[:500]
            conn.sendall(MAGIC + b" " + verdict + b"\n" + (body if ok else b""))
        except OSError:
            pass


def status(environ: Mapping[str, str] | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """The service for this environment: {"running": False, ...} or its status."""
    ep = endpoint(environ)
    if ep is None:
        return {"running": False, "enabled": False}
    try:
        ok, body = request(ep, b"status", b"", timeout)
        found = json.loads(body) if ok else None
    except (OSError, ValueError):
        found = None
    if not isinstance(found, dict):
        return {"running": False, "enabled": True, "socket": ep.socket_path}
    return {"running": True, "enabled": True, **found}


def start(environ: Mapping[str, str] | None = None, wait: float = 60.0) -> dict[str, Any]:
    """Start the service for this environment unless it runs; wait until it answers."""
    ep = endpoint(environ)
    if ep is None:
        return {"running": False, "enabled": False}
    found = status(environ, timeout=1.0)
    if found["running"]:
        return found
    spawn(ep, force=True, environ=environ)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(0.1)
        found = status(environ, timeout=1.0)
        if found["running"]:
            return found
    return found


def stop(environ: Mapping[str, str] | None = None, wait: float = 10.0) -> bool:
    """Ask the service for this environment to stop, and wait (up to `wait` seconds) until it
    has let go of its lock, so that a hook right after may start another. True if one was
    running."""
    ep = endpoint(environ)
    if ep is None:
        return False
    try:
        ok, _ = request(ep, b"stop", b"", 2.0)
    except (OSError, ValueError):
        return False
    if not ok:
        return False
    service_lock.wait_until_free(ep.path(".lock"), wait)
    # The spawn mark keeps hooks from starting a service that keeps failing more than once per
    # SPAWN_EVERY_SECONDS; a service stopped on purpose did not fail, so the next hook may
    # start one at once instead of answering cold until the mark is old enough.
    try:
        os.unlink(ep.path(SPAWN_MARK))
    except OSError:  # none to clear (a service started by hand, `warm serve`)
        pass
    return True
