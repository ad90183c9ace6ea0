"""Database URLs: accept the forms people paste, and never show their passwords.

Design decision: parsing is SQLAlchemy's (`sqlalchemy.engine.make_url`), so a URL copied from a
SQLAlchemy application (`postgresql+psycopg://`, `postgresql+asyncpg://`, percent-encoded
passwords) becomes the libpq URL psycopg takes, with nothing hand-parsed. SQLAlchemy costs a
few hundred milliseconds to import, so it is imported only for such URLs and for redaction,
never on the per-prompt hook's path. Redaction does not trust any parser to agree with libpq
(libpq splits `user:p@ss@host` at the first `@`, SQLAlchemy too, and both then put part of the
password in the host): everything between `://user:` and the *last* `@` of the authority is
hidden, and so is every `password=` parameter, in URLs and key=value strings alike.
"""

from __future__ import annotations

import re

from .errors import ConfigError

MASK = "***"

_SCHEME_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://")
# password=... in a query string or a key=value DSN: quoted ('a b', with \' escapes) or bare.
# A bare value runs on over spaces until the next `key=` (libpq would reject `password=a b`, but
# the text around it must not show `b`): hiding a sentence's tail is the price of never less.
# A value already hidden (`***`) stays as it is, so redacting twice changes nothing.
_PARAM_RE = re.compile(
    r"(?P<key>(?:^|(?<=[\s?&;]))(?:password|passwd|pwd|sslpassword)\s*=\s*)"
    r"(?P<value>\*\*\*(?![^\s&;#])|'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?"
    r"|[^\s&;#]*(?:[ \t]+(?![\w.\-]+[ \t]*=)[^\s&;#]+)*)",
    re.IGNORECASE,
)


def normalise_database_url(url: str) -> str:
    """A URL psycopg can connect with: SQLAlchemy's `postgresql+driver://` forms become
    `postgresql://`; libpq URLs and key=value strings are returned as they are.

    Raises ConfigError for a URL that names another database than PostgreSQL."""
    url = url.strip()
    m = _SCHEME_RE.match(url)
    if m is None:
        return url  # a key=value conninfo string, or empty
    scheme = m.group("scheme").lower()
    if scheme in ("postgresql", "postgres"):
        return url
    dialect = scheme.split("+", 1)[0]
    if dialect not in ("postgresql", "postgres"):
        raise ConfigError(
            f"the database URL is for {dialect}, not PostgreSQL: set VAULTMEM_DATABASE_URL to "
            "a postgresql:// URL of a server with pgvector, or leave it empty for the bundled one"
        )
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"the database URL {redact_url(url)} cannot be parsed: check VAULTMEM_DATABASE_URL"
        ) from None
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def redact_url(text: str) -> str:
    """`text` with every database password hidden: in URLs (`postgresql://u:pw@h/db` ->
    `postgresql://u:***@h/db`, whatever the password holds: `@`, `:`, `/`, `?`, spaces), in
    `?password=` parameters and in key=value strings (`host=h password='a b'` ->
    `host=h password=***`). When it cannot tell where a password ends, it hides more, never
    less."""
    out: list[str] = []
    pos = 0
    for m in _SCHEME_RE.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.end()])
        start = m.end()
        # The password may hold spaces: its URL can reach the next scheme or the line's end.
        nxt = _SCHEME_RE.search(text, start)
        line_end = text.find("\n", start)
        limit = min(nxt.start() if nxt else len(text), line_end if line_end != -1 else len(text))
        shown, end = _redact_authority(text, start, limit)
        out.append(shown)
        pos = end
    out.append(text[pos:])
    return _PARAM_RE.sub(lambda p: p.group("key") + MASK, "".join(out))


_END_RE = re.compile(r"[\s\"'<>]")
_USER_RE = re.compile(r"[^:@/?#\s\"'<>]*")


def _url_end(text: str, start: int, limit: int) -> int:
    """Where a URL's host part starting at `start` ends: at whitespace, or a quote that closes
    a quoted URL in a message."""
    m = _END_RE.search(text, start, limit)
    return m.start() if m else limit


def _redact_authority(text: str, start: int, limit: int) -> tuple[str, int]:
    """The URL starting at `start` (just after `://`) with its password hidden, and where it
    ends. A `user:` prefix starts a password; it ends at the `@` before the host: the first
    `@`, extended over later ones while no `/` or `?` comes between (`p@ss@host` is one
    password; in `pw@host/db?x=a@b` the second `@` is the query's)."""
    user = _USER_RE.match(text, start, limit)
    assert user is not None
    colon = user.end()
    if colon >= limit or text[colon] != ":":
        return text[start : _url_end(text, start, limit)], _url_end(text, start, limit)
    ats = [i for i in range(colon, limit) if text[i] == "@"]
    if not ats:
        return _redact_hostless(text, start, colon, limit)
    at = ats[0]
    for later in ats[1:]:
        between = text[at + 1 : later]
        if "/" in between or "?" in between:
            break
        at = later
    end = _url_end(text, at + 1, limit)
    return f"{text[start:colon]}:{MASK}@{text[at + 1 : end]}", end


def _redact_hostless(text: str, start: int, colon: int, limit: int) -> tuple[str, int]:
    """`user:secret` cut short before its `@host` (a URL pasted half), or `host:port`: what
    follows the colon is a port when it is digits alone, else it is taken for a password and
    hidden to the end of the authority (spaces included: a password may hold them)."""
    after = text[colon + 1 : limit]
    port = re.match(r"\d*(?=[/?#\s\"'<>]|$)", after)
    if port is not None:
        end = _url_end(text, start, limit)
        return text[start:end], end
    cut = re.search(r"[/?#]", after)
    end = colon + 1 + (cut.start() if cut else len(after))
    tail_end = _url_end(text, end, limit)
    return f"{text[start:colon]}:{MASK}{text[end:tail_end]}", tail_end
