"""Secrets in Markdown tables: a value beside a password label (`| 密码 | hunter2 |`), the
cells under a password or token header, and in a note named for secrets any cell that reads as
a password.

Design decision: a table is read row by row with its header remembered, each row one
candidate against the family's budget; a cell is held to the same bar as a labelled value
(`passwords._is_password`, `values._is_secret_token`), and a label's neighbour that reads as a
price (`| password manager | 5.00 |`) is a subscription, not a credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .note import _Hit, _Note
from .passwords import _CJK_PASSWORD_WORDS, _is_password, _password_value
from .values import _KEBAB_RE, _is_secret_token, _looks_like_password

# Markdown tables: `| db | admin | hunter2 |` under a `password` header, or `| 密码 | hunter2 |`.
_TABLE_KEY_RE = re.compile(
    r"(?i)^[*_`\s]*(?:[\w .\-()]*(?:password|passwd|passphrase|pwd|secret)|[^|]*(?:"
    + _CJK_PASSWORD_WORDS
    + r"))[\w .\-()]*[*_`\s:：]*$"
)
_TABLE_SECRET_KEY_RE = re.compile(
    r"(?i)(?:token|api[_\- ]?key|secret|credential|access[_\- ]?key|private[_\- ]?key|app[_\- ]?key"
    r"|密钥|秘钥|金鑰|密鑰|私钥|私鑰|令牌|トークン|キー|シークレット|키|토큰|시크릿)"
)


_TABLE_RULE_RE = re.compile(r"\s*+:?-{2,}+:?\s*+")
# An amount: digits with two decimals, or a currency sign (5.00, 3,99 €, $12, ¥30).
_PRICE_RE = re.compile(
    r"[$€£¥]?[ ]?\d{1,7}(?:[.,]\d{2})[ ]?(?:[$€£¥%]|[A-Z]{3})?|[$€£¥][ ]?\d{1,7}"
)
_TABLE_LABEL_CHARS = 80  # a header or label cell; longer cells are values


def _table_cells(line: str) -> list[str] | None:
    stripped = line.strip()
    return stripped.strip("|").split("|") if stripped.startswith("|") else None


def _table_hits(note: _Note) -> Iterable[_Hit]:
    text = note.text
    if "|" not in text:
        return
    lines = text.split("\n")
    header: list[bool] = []
    header_secret: list[bool] = []
    offset = 0
    for i, line in enumerate(lines):
        start = offset
        offset += len(line) + 1
        cells = _table_cells(line)
        if cells is None:
            header, header_secret = [], []
            continue
        if not note.spend():
            return
        if all(_TABLE_RULE_RE.fullmatch(c) for c in cells):
            continue
        is_key = [len(c) <= _TABLE_LABEL_CHARS and bool(_TABLE_KEY_RE.match(c)) for c in cells]
        is_secret_key = [len(c) < 60 and bool(_TABLE_SECRET_KEY_RE.search(c)) for c in cells]
        following = _table_cells(lines[i + 1]) if i + 1 < len(lines) else None
        if following and all(_TABLE_RULE_RE.fullmatch(c) for c in following):
            header, header_secret = is_key, is_secret_key  # a header row holds labels
            continue
        # A row label's neighbour is a password unless it reads as a price: `| password
        # manager (family) | 5.00 |` is a subscription, not a credential. Under a password
        # header (below) every value counts.
        beside = [cells[j + 1] for j, k in enumerate(is_key[:-1]) if k]
        beside = [c for c in beside if not _PRICE_RE.fullmatch(c.strip().strip("*_"))]
        candidates = beside + [c for c, h in zip(cells, header, strict=False) if h]
        for cell in candidates:
            value, _, quoted, _ = _password_value(cell.strip().strip("*_"))
            if _is_password(value, quoted, True, ":", "password"):
                pos = line.find(value)
                yield _Hit(start + pos, start + pos + len(value), "password-assignment", value, 2)
        tokens = [c for j, c in enumerate(cells) if any(is_secret_key[:j])]
        tokens += [c for c, h in zip(cells, header_secret, strict=False) if h]
        labels = " ".join(c for c, k in zip(cells, is_secret_key, strict=False) if k)
        for cell in tokens:
            value = cell.strip().strip("*_`'\"")
            if _is_secret_token(labels or "secret", value):
                pos = line.find(value)
                yield _Hit(start + pos, start + pos + len(value), "high-entropy-secret", value, 3)
        if note.strict:
            for cell in cells:
                value = cell.strip().strip("*_`'\"")
                if _looks_like_password(value) and not _KEBAB_RE.match(value):
                    pos = line.find(value)
                    yield _Hit(
                        start + pos,
                        start + pos + len(value),
                        "password-in-sensitive-note",
                        value,
                        4,
                    )
