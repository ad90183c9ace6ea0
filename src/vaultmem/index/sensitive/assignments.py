"""Random values assigned to a secret's name: `AZURE_CLIENT_SECRET="…"`, `api_key: …`,
`访问令牌：…`.

Design decision: the name sets how random the value must be (`values._key_strength`): a
credential's full name (`TWILIO_AUTH_TOKEN`) takes even a hex string, a bare `key` takes only a
value near the entropy ceiling of its length; a value running into more text
(`get_random_secret_key()`) is code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .note import _Hit, _Note
from .values import _is_secret_token

_ASSIGNMENT_RE = re.compile(
    r"(?i)(?<![\w.\-])(?P<key>[a-z_][\w.\-]*)[\"'\])）]*[ \t]*(?::=|=>|=(?!=)|:(?!//)|：)[ \t]*"
    r"(?:(?P<q>[\"'`])(?P<qvalue>[^\s\"'`]{16,})(?P=q)|(?P<value>[A-Za-z0-9+/_\-=.~]{16,}))"
)
_CJK_ASSIGNMENT_RE = re.compile(
    r"(?P<key>密钥|秘钥|金鑰|密鑰|私钥|私鑰|令牌|权杖|權杖|访问令牌|トークン|キー|シークレット|秘密鍵"
    r"|키|토큰|시크릿|액세스\s?키|비밀\s?키)[^:：=\n<>()（）]{0,24}?[:：=][ \t]*"
    r"(?P<value>[A-Za-z0-9+_\-=.~][A-Za-z0-9+/_\-=.~]{15,})"
)
_CJK_ASSIGNMENT_GATE = (
    "密钥", "秘钥", "金鑰", "密鑰", "私钥", "私鑰", "令牌", "权杖", "權杖", "トークン", "キー",
    "シークレット", "秘密鍵", "키", "토큰", "시크릿",
)  # fmt: skip


_ASSIGNMENT_GATE = ("secret", "token", "key", "auth", "credential", "passw", "pat", "sig", "pwd")


def _entropy_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_ASSIGNMENT_RE, _ASSIGNMENT_GATE, lines=True):
        key = m.group("key")
        group = "qvalue" if m.group("qvalue") is not None else "value"
        value = m.group(group).rstrip(".")
        after = m.string[m.end(group) : m.end(group) + 1]
        if after == "(" or (
            group == "value"
            and after not in ("", "\n", " ", "\t", '"', "'", ",", ";", "`", "|", ")")
        ):
            continue  # get_random_secret_key(), a value running into more text
        if _is_secret_token(key, value):
            start = m.start(group) + shift
            yield _Hit(start, start + len(value), "high-entropy-secret", value, 3)
    for m, shift in note.find(_CJK_ASSIGNMENT_RE, _CJK_ASSIGNMENT_GATE, lines=True):
        value = m.group("value")
        if _is_secret_token("secret", value):
            start = m.start("value") + shift
            yield _Hit(start, start + len(value), "high-entropy-secret", value, 3)
