"""Passwords under a label: `password: value`, `密码：value`, `Kennwort ist value`, in English,
Chinese, Japanese, Korean and the password words of a dozen other languages; and a label alone
on its line (`**Password:**`, `密码`) with the value on the next.

Design decision: the label decides the bar. After `:` or `=` a quoted value, or one that is all
the line has to say, is a password; after a copula (`is`, `是`, `は`) only a strong one (a digit,
or three kinds of character with a symbol), because that is prose. Code (`password = pw`,
`getpass()`, `useClientSecretFromEnvironment`) never counts. `tables.py` reuses the same bar.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from re import Match

from .note import _Hit, _Note
from .values import (
    _ALGORITHM_RE,
    _CJK_RE,
    _CODE_EXPRESSION_RE,
    _IDENTIFIER_RE,
    _WIDE,
    _char_classes,
    _is_code_name,
    _looks_like_password,
    is_placeholder,
)

# --- passwords written as key: value -------------------------------------------------------

# Possessive runs: a long run of spaces is read once, not once per way to split it.
_OPERATOR = (
    r"[*_`'\"\])）]*+[ \t]*+(?P<op>:=|=>|=(?!=)|:(?!//)|：|(?<=[ \t])is[ \t]++)[*_`]*+[ \t]*+"
)
# English and, because notes travel, the password words of other languages written in Latin
# or Cyrillic script (German, French, Spanish, Portuguese, Italian, Dutch, Polish, Nordic,
# Turkish, Vietnamese, Russian...).
_PASSWORD_WORDS_LATIN = (
    r"password|passwd|passwort|passphrase|passcode|pwd|pw|pass|pin|secret|secret[_\-]?key"
    r"|kennwort|mot\s+de\s+passe|mdp|contrase[ñn]a|senha|parola\s+d[ie']\s*ordine|wachtwoord"
    r"|has[łl]o|l[öo]senord|adgangskode|passord|salasana|[şs]ifre|jelsz[óo]|heslo|m[ậa]t\s+kh[ẩa]u"
    r"|пароль|парола|лозинка"
)
_PASSWORD_EN_RE = re.compile(
    r"(?i)(?<![\w.\-:/])(?P<key>[\w.\-]*?(?P<word>"
    + _PASSWORD_WORDS_LATIN
    + r"))"
    + _OPERATOR
    + r"(?P<rest>[^\n]{0,256})"
)
# Chinese (simplified and traditional), Japanese, Korean: label, optional separator, value.
# 암호 (Korean "password") is also the stem of 암호학/암호화 (cryptography, encryption).
_CJK_PASSWORD_WORDS = (
    r"密码|密碼|口令|pin码|PIN码|PIN碼|パスワード|暗証番号|パスコード|パスフレーズ|비밀번호|비번"
    r"|패스워드|암호(?![학화문])|비밀\s?번호|รหัสผ่าน|كلمة المرور|סיסמה|पासवर्ड"
)
_PASSWORD_CJK_RE = re.compile(
    r"(?P<key>" + _CJK_PASSWORD_WORDS + r")[*_`\s]*"
    r"(?P<op>[:：=]|是|为|為|は|[은는]|\s)[*_`]*[ \t]*(?P<rest>[^\n]{0,256})"
)
_QUOTES = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "「": "」", "『": "』"}
_TOKEN_END_RE = re.compile(f"[\\s|]|[{_WIDE}]")
_COMMENT_START = ("#", "//", "<!--", "(", "（", "-- ", ";")
_WIDE_START_RE = re.compile(f"^[{_WIDE}]")


def _password_value(rest: str) -> tuple[str, int, bool, bool]:
    """Value, its offset in `rest`, whether quoted, whether it is all the line has to say."""
    if rest[:1] in _QUOTES:
        close = rest.find(_QUOTES[rest[0]], 1)
        if close > 0:
            return rest[1:close], 1, True, True
    m = _TOKEN_END_RE.search(rest)
    token = rest[: m.start()] if m else rest
    tail = rest[len(token) :].strip()
    token = token.rstrip(",;.*_`)]>")
    whole = not tail or tail.startswith(_COMMENT_START) or bool(_WIDE_START_RE.match(tail))
    return token, 0, False, whole


def _is_password(value: str, quoted: bool, whole: bool, op: str, key: str) -> bool:
    if len(value) < 4 or is_placeholder(value) or _CJK_RE.search(value):
        return False
    if value.lower() == key.lower() or value.lower().endswith(key.lower()):
        return False  # `password=password`, `password: db_password`
    if not quoted:
        if _CODE_EXPRESSION_RE.search(value) or value.startswith(("/", "~/", "./", "$", "%")):
            return False
        if _is_code_name(value):
            return False  # `client_secret: useClientSecretFromEnvironment`, `PASS: TestLogin`
        # `password = pw` in code is a variable; `DB_PASSWORD=hunter2` in an env file is not.
        if op.strip() in ("=", ":=") and _IDENTIFIER_RE.match(value) and not key.isupper():
            return False
    # Strong: a digit, or three kinds of character with a real symbol (`Read-Host` and
    # `my-app.service` are code and names, not passwords).
    symbols = {c for c in value if not c.isalnum()} - set("-_.")
    strong = len(value) >= 6 and (
        any(c.isdigit() for c in value) or (_char_classes(value) >= 3 and bool(symbols))
    )
    if op.strip() in ("is", "") or op in ("是", "为", "為", "は", "은", "는"):
        return strong and not _ALGORITHM_RE.match(value)
    return quoted or whole or strong


_PASSWORD_GATE = (
    "pass", "pwd", "pw:", "pw=", "pw ", "pw：", "pin:", "pin ", "pin=", "pin：", "secret",
    "kennwort", "mot de", "mdp", "contrase", "senha", "parola", "wachtwoord", "hasło", "haslo",
    "senord", "adgangskode", "salasana", "ifre", "jelsz", "heslo", "khẩu", "khau", "пароль",
    "парола", "лозинка",
)  # fmt: skip
_CJK_PASSWORD_GATE = (
    "密码", "密碼", "口令", "pin码", "pin碼", "パスワード", "暗証番号", "パスコード",
    "パスフレーズ",
    "비밀번호", "비번", "패스워드", "암호", "비밀", "รหัสผ่าน", "كلمة", "סיסמה", "पासवर्ड",
)  # fmt: skip


def _password_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_PASSWORD_EN_RE, _PASSWORD_GATE, lines=True):
        key, word = m.group("key"), m.group("word").lower()
        op = m.group("op")
        if word == "pass" and len(key) > 4 and key[-5] not in "_.-":
            continue  # bypass:, compass:, …
        if word in ("pw", "pin", "mdp") and len(key) > len(word):
            continue  # pw/pin only as a word of their own: not "npw", "spin"
        if word.startswith("secret") and op.strip() == "is":
            continue  # "the secret is …" is prose
        if word in ("pin",) and not re.match(r"\s*\d{4,8}\b", m.group("rest")):
            continue  # PIN: only digits
        yield from _password_hit(note, m, key, shift)
    for m, shift in note.find(_PASSWORD_CJK_RE, _CJK_PASSWORD_GATE, lines=True):
        yield from _password_hit(note, m, m.group("key"), shift)


def _password_hit(note: _Note, m: Match[str], key: str, shift: int) -> Iterable[_Hit]:
    rest = m.group("rest")
    value, offset, quoted, whole = _password_value(rest)
    at_end = m.string[m.end("rest") : m.end("rest") + 1] in ("", "\n")
    if not value.strip() and at_end and m.group("op").strip() in (":", "：", "="):
        # The label alone on its line ("password:"): the value may be on the next line.
        yield from _next_line_password(note, m.end("rest") + shift)
        return
    if _is_password(value, quoted, whole, m.group("op"), key):
        start = m.start("rest") + offset + shift
        yield _Hit(start, start + len(value), "password-assignment", value, 2)


_LIST_MARK_RE = re.compile(r"^(?:[-*+>][ \t]++)++")


def _next_line_password(note: _Note, pos: int) -> Iterable[_Hit]:
    text = note.text
    for _ in range(3):  # a blank line and a code fence may sit between the label and the value
        if pos >= len(text) or note.joint(pos):
            return
        end = text.find("\n", pos + 1)
        end = len(text) if end == -1 else end
        line = text[pos + 1 : end]
        if line.strip().startswith(("```", "~~~")):
            pos = end
            continue
        stripped = _LIST_MARK_RE.sub("", line.strip()[:200]).strip().strip("`'\"")
        if stripped:
            if " " not in stripped and _looks_like_password(stripped):
                if not _CJK_RE.search(stripped):
                    start = pos + 1 + line.find(stripped)
                    yield _Hit(start, start + len(stripped), "password-assignment", stripped, 2)
            return
        pos = end


# --- a label alone on its line, the password on the next ----------------------------------

# `Password`, `**Password:**`, `## Password`, `- WiFi password below`, `The root password for
# the NAS is:`, `Kennwort für den Server`, `密码`: a short line naming a password and nothing
# else; the value is then the next line (see `_next_line_password`).
_SHORT_LINE_RE = re.compile(r"(?m)^[^\n]{1,100}+$")
_PASSWORD_WORD_RE = re.compile(
    r"(?i)(?<![\w])(?:" + _PASSWORD_WORDS_LATIN + r")s?(?![\w])|" + _CJK_PASSWORD_WORDS
)
_LABEL_DECOR = "#>*-+_`~ \t"
_LABEL_END_RE = re.compile(
    r"(?i)(?:[ \t]*+(?:[:：=\-–—↓]|is|ist|est|es|below|unten|ci-dessous))++$"
)


def _label_line_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_SHORT_LINE_RE, _PASSWORD_GATE + _CJK_PASSWORD_GATE, lines=True):
        label = _LABEL_END_RE.sub("", m.group().strip(_LABEL_DECOR)).strip(_LABEL_DECOR)
        if (
            not label
            or label.endswith(("?", ".", "。", "？"))
            or not _PASSWORD_WORD_RE.search(label)
        ):
            continue
        words = label.split()
        if len(words) > 8 or any(_looks_like_password(w.strip("()[]")) for w in words):
            continue  # a sentence, or a line that holds its value (the assignment rules read it)
        yield from _next_line_password(note, m.end() + shift)
