"""Secrets in running prose: a credential's name, a few words, then the value, with no `:` or
`=` between (`authenticates with token 7Hq…`, `AccessKey Secret 是 …`).

Design decision: with no operator to anchor it, a value must be random like a key
(`values._is_secret_token` under the strongest name) and the words between the name and it must
not say it is an id, a hash or a name.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from .note import _Hit, _Note
from .values import _NOT_SECRET_WORDS, _is_code_name, _is_secret_token, _key_words

_PROSE_LABELS_LATIN = (
    r"auth[ _\-]?token|access[ _\-]?token|api[ _\-]?(?:key|token|secret)|client[ _\-]?secret"
    r"|app[ _\-]?secret|secret(?:[ _\-]?key)?|token|jeton|clave(?:[ _]secreta)?|chave"
    r"|schlüssel|geheimnis|segreto|sleutel"
)
_PROSE_SECRET_RE = re.compile(
    r"(?i)(?<![\w\-])(?P<label>" + _PROSE_LABELS_LATIN + r")(?![\w])"
    r"(?P<gap>[^\n.;:=$。；：]{0,48}?)(?<![A-Za-z0-9+/_\-=.~$])"
    r"(?P<value>[A-Za-z0-9][A-Za-z0-9+/_\-~]{15,}+={0,2}+)(?![=$]|\.\w)"
)
_PROSE_SECRET_CJK_RE = re.compile(
    r"(?P<label>密钥|秘钥|金鑰|密鑰|令牌|权杖|權杖|トークン|シークレット|秘密鍵|토큰|시크릿|비밀\s?키)"
    r"(?P<gap>[^\n。；$]{0,24}?)(?<![A-Za-z0-9+/_\-=.~$])"
    r"(?P<value>[A-Za-z0-9][A-Za-z0-9+/_\-~]{15,}+={0,2}+)(?![=$]|\.\w)"
)
_PROSE_GATE = ("token", "secret", "api", "key", "jeton", "clave", "chave", "schlüssel", "geheim")
_PROSE_CJK_GATE = (
    "密钥", "秘钥", "金鑰", "密鑰", "令牌", "权杖", "權杖", "トークン", "シークレット", "秘密鍵",
    "토큰", "시크릿", "비밀",
)  # fmt: skip


def _prose_hits(note: _Note) -> Iterable[_Hit]:
    """`account 4471 authenticates with token 7Hq…`, `AccessKey Secret 是 …`: a value after a
    credential's name in a sentence, with no `:` or `=` between (the assignment rules read
    those). The value must be random like a key (`_is_secret_token`), and the words between must
    not say it is an id, a hash or a name."""
    found = itertools.chain(
        note.find(_PROSE_SECRET_RE, _PROSE_GATE, lines=True),
        note.find(_PROSE_SECRET_CJK_RE, _PROSE_CJK_GATE, lines=True),
    )
    for m, shift in found:
        value = m.group("value").rstrip(".~-=")
        after = m.string[m.end("value") : m.end("value") + 1]
        if after in ("(", "@", "/") or set(_key_words(m.group("gap"))) & _NOT_SECRET_WORDS:
            continue
        # Every label here names a credential (in whatever language): the strongest key.
        if _is_code_name(value) or not _is_secret_token("secret_token", value):
            continue
        start = m.start("value") + shift
        yield _Hit(start, start + len(value), "secret-in-prose", value, 3)
