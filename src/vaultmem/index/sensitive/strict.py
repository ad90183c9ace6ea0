"""Passwords in a note named for secrets (`passwords.md`, `密码.md`): any `label: value` line,
or `login: alice / Walnut6324*`, whose value reads as a password.

Design decision: a name never quarantines a note by itself (notes *about* passwords stay
searchable); it lowers the bar of the content scan instead. Labels of a document's metadata
(`Status: Draft-v2`, `Ticket: SEC-2041`) still never count.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from .note import _Hit, _Note
from .values import _KEBAB_RE, _key_words, _looks_like_password

_LABELLED_RE = re.compile(
    r"(?m)^[ \t>*\-+]*+(?P<label>[^\n:：=|]{1,40}?)[*_`]*+[ \t]*+(?:[:：=]|(?<=[ \t])/)"
    r"[ \t]*+[*_`'\"]*+"
    r"(?P<value>[^\s'\"`|*]{6,64}+)[*_`'\"]*+[ \t]*+$"
)
# `login: alice / Walnut6324*`: a user and a password after one label.
_SLASH_PAIR_RE = re.compile(
    r"(?m)^[ \t>*\-+]*+(?P<label>[^\n:：=|/]{1,40}?)[*_`]*+[ \t]*+[:：=][ \t]*+[^\s/]{1,64}+"
    r"[ \t]*+/[ \t]*+(?P<value>[^\s'\"`|]{6,64}+)[ \t]*+$"
)


_TICKET_RE = re.compile(r"^[A-Z][A-Z0-9]{1,9}-\d{1,6}$")
# Labels of a document's metadata, never of a secret.
_NOT_SECRET_LABELS = frozenset(
    "status owner owners ticket issue jira version reviewer reviewers author authors date "
    "updated created algorithm rfc endpoint order priority type scope region link links "
    "team milestone release due draft state revision ref".split()
)


def _strict_hits(note: _Note) -> Iterable[_Hit]:
    if not note.strict:
        return
    for m, _ in itertools.chain(note.find(_LABELLED_RE), note.find(_SLASH_PAIR_RE, ("/",))):
        value = m.group("value")
        if set(_key_words(m.group("label"))) & _NOT_SECRET_LABELS or _TICKET_RE.match(value):
            continue  # `Status: Draft-v2`, `Ticket: SEC-2041` in a design note
        if _looks_like_password(value) and not _KEBAB_RE.match(value):
            yield _Hit(m.start("value"), m.end("value"), "password-in-sensitive-note", value, 4)
