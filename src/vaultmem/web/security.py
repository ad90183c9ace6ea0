"""The web room's guard: every request must come from this machine's browser, for this server.

Design decision: one ASGI middleware decides every request before any page code runs, from
values fixed at start: the random per-start token (as Jupyter's: `?token=` once, then an
HttpOnly, SameSite=Strict cookie named after the port, so two servers never share one), the
Host the server answers to (127.0.0.1 or localhost at its own port: a DNS-rebinding page
names its own host and is refused), and for every change (a POST) the Origin (or, when a
browser sends none, the Referer) of this server. The CSRF field every form carries is an HMAC
of the token, checked by the page code that reads the form (`check_csrf`). Every answer gets
a Content-Security-Policy with no script source at all: the pages need none, so a note's text
that got past the escaping still could not run.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


@dataclass(frozen=True)
class Secret:
    """The per-start token and the port it is bound to."""

    port: int
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def cookie(self) -> str:
        return f"vaultmem-ui-{self.port}"

    @property
    def csrf(self) -> str:
        """The value every form's `csrf` field must hold: derived, so it is not the token."""
        return hmac.new(self.token.encode(), b"csrf", hashlib.sha256).hexdigest()

    def ident(self, value: str) -> str:
        """A stable, opaque id for `value` (a quarantined path may hold a token in its name:
        pages name files by this id, never by the path)."""
        key = hmac.new(self.token.encode(), b"ids", hashlib.sha256).digest()
        digest = hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return digest.hexdigest()[:24]

    def hosts(self) -> frozenset[str]:
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    def origins(self) -> frozenset[str]:
        return frozenset(f"http://{h}" for h in self.hosts())

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?token={self.token}"


def check_csrf(secret: Secret, value: object) -> bool:
    return isinstance(value, str) and hmac.compare_digest(value, secret.csrf)


class Guard:
    """ASGI middleware: token, Host, Origin; security headers on every answer."""

    def __init__(self, app: ASGIApp, secret: Secret) -> None:
        self.app = app
        self.secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if headers.get("host") not in self.secret.hosts():
            await _refuse(send, "this server answers only to its own address (127.0.0.1)")
            return
        if scope["method"] not in ("GET", "HEAD", "POST"):
            await _refuse(send, "method not allowed", 405)
            return
        if scope["method"] == "POST" and not self._same_origin(headers):
            await _refuse(send, "a change must come from this server's own page")
            return
        given = query.get("token")
        if given is not None and scope["method"] == "GET":
            if not hmac.compare_digest(given, self.secret.token):
                await _refuse(send, "wrong token: use the URL `vaultmem ui` printed")
                return
            # The token leaves the address bar (and the history) at once; the cookie carries it.
            rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
            location = scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{self.secret.cookie}={self.secret.token}; Path=/; HttpOnly; SameSite=Strict"
            await _answer(
                send,
                303,
                b"",
                [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            )
            return
        jar = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except Exception:  # a malformed cookie header is no token
            jar = SimpleCookie()
        morsel = jar.get(self.secret.cookie)
        if morsel is None or not hmac.compare_digest(morsel.value, self.secret.token):
            await _refuse(send, "no valid token: open the URL `vaultmem ui` printed")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _same_origin(self, headers: dict[str, str]) -> bool:
        origin = headers.get("origin")
        if origin is None:
            referer = headers.get("referer")
            if referer is None:
                return False
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        return origin in self.secret.origins()


async def _answer(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *extra,
                *HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, why: str, status: int = 403) -> None:
    await _answer(send, status, f"{status}: {why}\n".encode(), [])
