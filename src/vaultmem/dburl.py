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
_PARAM_RE = re.compile(
    r"(?P<key>(?:^|(?<=[\s?&;]))(?:password|passwd|pwd|sslpassword)\s*=\s*)"
    r"(?P<value>'(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^\s&;#]*)",
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
    `postgresql://u:***@h/db`, whatever the password holds), in `?password=` parameters and in
    key=value strings (`host=h password='a b'` -> `host=h password=***`)."""
    out: list[str] = []
    pos = 0
    for m in _SCHEME_RE.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.end()])
        rest_start = m.end()
        end = _url_end(text, rest_start)
        out.append(_redact_authority(text[rest_start:end]))
        pos = end
    out.append(text[pos:])
    return _PARAM_RE.sub(lambda p: p.group("key") + MASK, "".join(out))


def _url_end(text: str, start: int) -> int:
    """Where a URL starting at `start` (just after `://`) ends: at whitespace, or a quote that
    closes a quoted URL in a message."""
    m = re.compile(r"[\s\"'<>]").search(text, start)
    return m.start() if m else len(text)


def _redact_authority(rest: str) -> str:
    """`user:secret@host/db?x` -> `user:***@host/db?x`, splitting at the authority's last `@`."""
    # The authority ends at the first '/' or '?' after its last '@'; an '@' inside the query
    # (`?application_name=a@b`) belongs to the query, not to the password.
    query = rest.find("?")
    at = rest.rfind("@", 0, query if query != -1 else len(rest))
    if at == -1:
        at = rest.rfind("@")
        if at == -1 or (query != -1 and "=" in rest[query:at]):
            return _redact_hostless(rest)
    userinfo, host = rest[:at], rest[at + 1 :]
    user, colon, _password = userinfo.partition(":")
    return f"{user}{':' + MASK if colon else ''}@{host}"


def _redact_hostless(rest: str) -> str:
    """`user:secret` cut short before its `@host` (a URL pasted half): what follows the colon is
    not a port, so it is taken for a password."""
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if authority.startswith("[") or ":" not in authority:
        return rest
    user, _, after = authority.partition(":")
    if after.isdigit() or not after:
        return rest
    return f"{user}:{MASK}{rest[len(authority) :]}"
