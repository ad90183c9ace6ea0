"""Terminal safety: text from notes and file names never drives the terminal it is printed on.

A note can hold escape sequences (clear the screen, set the window title, write the clipboard
with OSC 52, make a link with OSC 8) and a file name can hold control characters. `clean` turns
every C0/C1 control character (newline and tab kept where asked), DEL and the bidirectional
overrides into visible `\\xNN` / `\\uNNNN` text, so an escape sequence prints as inert
characters instead of running. `json_safe` does the same for `--json` output, where JSON itself
already escapes C0 but leaves C1 and the bidi controls raw. Standard library only: the per-prompt
hook imports this.
"""

from __future__ import annotations

import re

# C0 except tab/newline, DEL, C1, and the Unicode controls that reorder or hide text.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL_RE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_CONTROL_LINE_RE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")
_JSON_RAW_RE = re.compile(f"[\x7f-\x9f{_BIDI}]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: str, *, newlines: bool = True) -> str:
    """`text` with control characters shown as `\\x1b`-style escapes; newlines and tabs are kept
    unless `newlines` is False (a path or a heading: one line, whatever the name holds)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates
    pattern = _CONTROL_RE if newlines else _CONTROL_LINE_RE
    return pattern.sub(_escape, text)


def json_safe(dumped: str) -> str:
    """A `json.dumps` result with C1 and bidi controls written as `\\uNNNN` (still valid JSON)."""
    return _JSON_RAW_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", dumped)
