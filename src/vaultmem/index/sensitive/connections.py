"""Credentials a client sends to a server: the password in a connection string (a URL's
`user:password@`, `Password=…;`, `.pgpass` and `.netrc` lines), a credential in a URL's query
(`?access_token=…`), an `Authorization: Bearer` or `Basic` header.

Design decision: a `key=value` password counts only beside the other parameters of a
connection string (host, user, database…), looked for near the match, not on the whole line:
`PWD=/home/ann` is a shell variable, and a line of many parameters is read once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

from .note import _Hit, _Note
from .values import (
    _CODE_EXPRESSION_RE,
    _UUID_RE,
    _char_classes,
    _entropy,
    _entropy_floor,
    _is_doc_jwt,
    _is_wordy,
    _looks_like_password,
    _token_placeholder,
    is_placeholder,
)

# --- connection strings ----------------------------------------------------------------------

_URL_CREDENTIALS_RE = re.compile(
    r"(?i)\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver"
    r"|oracle|cockroachdb|clickhouse|jdbc:[a-z]+|s?ftps?|smtps?|imaps?|pop3s?|ldaps?|https?|wss?"
    r"|ssh|sftp|git\+\w+|svn|nats|kafka|mqtts?|cloudinary|neo4j(?:\+s)?|bolt|couchbases?|elastic)"
    r"(?:\+[a-z0-9]+)?://([^\s:/@]*):([^\s@/]+)@[\w.\-\[\]]"
)
# key=value connection strings: ADO.NET / ODBC (`Password=…;`), libpq (`password='…'`), JDBC
# query strings (`?user=u&password=…`).
_CONN_PARAM_RE = re.compile(
    r"(?i)(?:^|[\s;?&\"'])(?:password|pwd|passwd|pass|sslpassword|sharedaccesskey|accountkey)"
    r"[ \t]*+=[ \t]*+(?:'((?:[^'\\\n]|\\.){1,256})'|\"([^\"\n]{1,256})\"|\{([^}\n]{1,256})\}"
    r"|([^\s;&\"'#]+))"
)
_CONN_CONTEXT_RE = re.compile(
    r"(?i)(?:^|[\s;?&\"'])(?:host|hostaddr|server|data source|user id|uid|user|username|dbname"
    r"|database|initial catalog|port|endpoint|accountname|sharedaccesskeyname)\s*="
)
_PGPASS_RE = re.compile(r"(?m)^[ \t]*[\w.\-\[\]*]+:(?:\d+|\*):[\w.\-*]+:[\w.\-@*]+:(\S+)[ \t]*$")
_NETRC_RE = re.compile(
    r"(?i)\bmachine\s+\S+(?:\s+(?:login|account|port)\s+\S+)*\s+password\s+(\S+)"
)


def _url_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_URL_CREDENTIALS_RE, ("://",), lines=True):
        user, password = m.group(1), m.group(2)
        if is_placeholder(password) or password == user:
            continue
        yield _Hit(m.start(2) + shift, m.end(2) + shift, "connection-string-password", password, 1)
    for m, shift in note.find(_CONN_PARAM_RE, ("pass", "pwd", "sharedaccess", "accountkey"), True):
        group = next(i for i in range(1, 5) if m.group(i) is not None)
        value = m.group(group)
        # The context is looked for near the match, not on the whole (possibly 8k) line: a
        # line of many parameters would otherwise be read once per parameter.
        line_start = max(m.string.rfind("\n", 0, m.start()) + 1, m.start() - 512)
        line_end = m.string.find("\n", m.end(), m.end() + 512)
        line = m.string[line_start : line_end if line_end != -1 else m.end() + 512]
        if m.group()[:1] not in "?&;" and not _CONN_CONTEXT_RE.search(line):
            continue  # `PWD=/home/ann` is a shell variable, not a connection string
        if len(value) >= 4 and not is_placeholder(value) and not _CODE_EXPRESSION_RE.search(value):
            if value.startswith(("$", "%", "/", "~")):
                continue
            start = m.start(group) + shift
            yield _Hit(start, start + len(value), "connection-string-password", value, 1)
    for m, shift in note.find(_PGPASS_RE, (":",), True):
        value = m.group(1)
        if _looks_like_password(value):
            start = m.start(1) + shift
            yield _Hit(start, start + len(value), "pgpass-password", value, 1)
    for m, _ in note.find(_NETRC_RE, ("machine",)):
        value = m.group(1).strip("\"'")
        if not is_placeholder(value) and len(value) >= 4:
            yield _Hit(m.start(1), m.start(1) + len(value), "netrc-password", value, 1)


# --- URL parameters that carry credentials ---------------------------------------------------

_URL_PARAM_RE = re.compile(
    r"(?i)[?&;](?:code|access_token|id_token|refresh_token|client_secret|api_?key|apikey|token"
    r"|auth|sig|signature|secret|password|key|private_token|session|sessionid|x-amz-signature"
    r"|x-goog-signature)=([^&\s#\"'<>)]{16,})"
)


def _url_param_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_URL_PARAM_RE, ("?", "&"), lines=True):
        raw = m.group(1)
        value = unquote(raw)
        if is_placeholder(value) or _UUID_RE.match(value) or _is_wordy(value):
            continue
        if _char_classes(value) < 2 or _entropy(value) < _entropy_floor(value) - 0.6:
            continue
        start = m.start(1) + shift
        yield _Hit(start, start + len(raw), "url-credential-parameter", raw, 2)


# --- Authorization headers ------------------------------------------------------------------

_BEARER_RE = re.compile(r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{20,}=*)")
_BASIC_HEADER_RE = re.compile(
    r"(?i)\bauthorization\s*[:=]\s*[\"']?basic\s+([A-Za-z0-9+/]{8,}={0,2})"
)


def _header_hits(note: _Note) -> Iterable[_Hit]:
    for m, _ in note.find(_BEARER_RE, ("bearer",)):
        value = m.group(1)
        if (
            _char_classes(value) >= 2
            and not is_placeholder(value)
            and not _token_placeholder(value)
            and not _is_doc_jwt(value)
            and _entropy(value) >= _entropy_floor(value) - 0.5
        ):
            yield _Hit(m.start(1), m.end(1), "bearer-token", value, 3)
    for m, _ in note.find(_BASIC_HEADER_RE, ("authorization",)):
        yield _Hit(m.start(1), m.end(1), "basic-auth-header", m.group(1), 3)
