"""Secrets hidden by their layout: encoded in base64 (a Kubernetes Secret's data) or cut over
two lines (`KEY=abc…` with the rest alone on the next line).

Design decision: no rules of their own. The decoded value or the joined line is a child of the
note (same budget) and is scanned again by the families that could read it: connection
strings, passwords and tokens for base64; tokens and assignments for a wrapped line.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

from .assignments import _entropy_hits
from .connections import _url_hits
from .note import _Hit, _Note
from .passwords import _password_hits
from .tokens import _plugin_hits, _token_hits

# Rules worth running on a decoded base64 value (a wrapped connection string or password).
_DECODED_RULES = (_url_hits, _password_hits, _token_hits)


_BASE64_RE = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{24,4096}={0,2}(?![A-Za-z0-9+/=])")
_DECODED_RULES_GATE = ("://", "password", "passwd", "pwd", "secret", "token", "key")


def _base64_hits(note: _Note) -> Iterable[_Hit]:
    """A connection string or key=value secret hidden in base64 (a Kubernetes Secret's data)."""
    for m, _ in note.find(_BASE64_RE):
        raw = m.group()
        if len(raw) % 4 == 1 or note.cut(m.start(), m.end()):
            continue  # not base64, or a run longer than a window (an inline image)
        try:
            decoded = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            continue
        if not decoded.isprintable() and not all(c.isprintable() or c in "\n\t\r" for c in decoded):
            continue
        inner = note.child(decoded)
        if not inner.has(_DECODED_RULES_GATE):
            continue
        if any(True for rule in _DECODED_RULES for _ in rule(inner)):
            yield _Hit(m.start(), m.end(), "base64-encoded-secret", raw, 1)


# The token ending a line, then the rest of it alone on the next. Each run of token characters
# is tried once (it must start a run, and is taken whole): no split of a long line is retried.
_WRAPPED_LINE_RE = re.compile(
    r"(?m)(?<![A-Za-z0-9+/_\-])(?P<tail>[A-Za-z0-9+/_\-]{16,}+)[\"']?[ \t]*\\?[ \t]*(?P<nl>\n)"
    r"[ \t]*[\"']?(?P<second>[A-Za-z0-9+/_\-=]{8,}+)[\"']?[ \t]*$"
)
# How much of the first line before its last token is read again with it: the label
# (`AZURE_CLIENT_SECRET="…`) and then some.
_WRAPPED_LEAD = 256


def _wrapped_hits(note: _Note) -> Iterable[_Hit]:
    """A key cut over two lines (`KEY=abc…` then the rest alone on the next line, or two
    concatenated string literals): scan the joined line with the token and assignment rules."""
    if "-----BEGIN" in note.text:
        return  # PEM bodies are wrapped by design; the private-key rule sees them
    for m, _ in note.find(_WRAPPED_LINE_RE):
        if note.joint(m.start("nl")):
            continue  # a long line cut into windows, not two lines
        line_start = m.string.rfind("\n", 0, m.start("tail")) + 1
        lead = m.string[max(line_start, m.start("tail") - _WRAPPED_LEAD) : m.start("tail")]
        first = lead + m.group("tail")
        joined = note.child(first + m.group("second"))
        for rule in (_token_hits, _plugin_hits, _entropy_hits):
            for hit in rule(joined):
                if hit.end > len(first):
                    yield _Hit(m.start("second"), m.end("second"), "wrapped-secret", hit.value, 1)
                    break
            else:
                continue
            break
