"""Passwords on command lines: `mysql -pSECRET`, `sshpass -p`, `curl -u user:pass`,
`docker login -p`, `--password=…` and a dozen more tools' options.

Design decision: one pattern per tool, gated by the tool's name and searched only on the lines
holding it, each reading at most 256 characters between the command and its option; a value
that is a variable, a placeholder or code (`$PW`, `<password>`, `stdin`) is no password.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from re import Pattern

from .note import _Hit, _Note
from .values import _CODE_EXPRESSION_RE, is_placeholder

_COMMAND_RULES: tuple[tuple[Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), gate)
    for pattern, gate in (
        # mysql -pSECRET (no space: with a space, -p prompts), mysqldump, mysqladmin
        (
            r"\bmysql(?:dump|admin|sh)?\b[^\n|;]{0,256}?\s-p(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("mysql",),
        ),
        (r"\bsshpass\s+-p\s*(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)", ("sshpass",)),
        (
            r"\b(?:curl|wget|http|xh)\b[^\n|]{0,256}?\s(?:-u|--user)\s*(?P<q>['\"]?)[^\s:'\"]+:(?P<v>[^\s'\"]{3,})(?P=q)",
            ("-u", "--user"),
        ),
        (
            r"\bdocker\s+login\b[^\n|]{0,256}?\s(?:-p|--password)[\s=](?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("docker",),
        ),
        (
            r"\bredis-cli\b[^\n|]{0,256}?\s(?:-a|--pass)\s+(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("redis-cli",),
        ),
        (
            r"\bhtpasswd\s+-[a-zA-Z]*b[a-zA-Z]*\s+\S+\s+\S+\s+(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("htpasswd",),
        ),
        (
            r"\b(?:pass(?:in|out)?|-passin|-passout|-password)\s+pass:(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("pass:",),
        ),
        (
            r"\bsmbclient\b[^\n|]{0,256}?\s(?:-U|--user)[\s=](?P<q>['\"]?)[^\s%'\"]+%(?P<v>[^\s'\"]{3,})(?P=q)",
            ("smbclient",),
        ),
        (r"\bldap\w+\b[^\n|]{0,256}?\s-w\s+(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)", ("ldap",)),
        (r"\bsqlcmd\b[^\n|]{0,256}?\s-P\s+(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)", ("sqlcmd",)),
        (
            r"\b(?:zip|7z|7za|unzip|rar|unrar)\b[^\n|]{0,256}?\s-P?p?\s*(?:-P\s+|-p)(?P<q>['\"]?)(?P<v>[^\s'\"\-][^\s'\"]{2,})(?P=q)",
            ("zip", "7z", "rar"),
        ),
        (
            r"(?:--password|--passwd|--pass|--client-secret|--api-key|--token|--secret)[=\s](?P<q>['\"]?)(?P<v>[^\s'\"]{4,})(?P=q)",
            ("--pass", "--client-secret", "--api-key", "--token", "--secret"),
        ),
        (r"\bnet\s+user\s+\S+\s+(?P<q>['\"]?)(?P<v>[^\s'\"/*]{4,})(?P=q)", ("net user",)),
        (r"\becho\s+(?P<q>['\"]?)(?P<v>[^\s'\"|]{4,})(?P=q)\s*\|\s*sudo\s+-S", ("sudo",)),
        (
            r"\b(?:mongo|mongosh)\b[^\n|]{0,256}?\s(?:-p|--password)\s+(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)",
            ("mongo",),
        ),
        (r"\bpsql\b[^\n|]{0,256}?password=(?P<q>['\"]?)(?P<v>[^\s'\"]{3,})(?P=q)", ("psql",)),
    )
)


def _command_hits(note: _Note) -> Iterable[_Hit]:
    for pattern, gate in _COMMAND_RULES:
        for m, shift in note.find(pattern, gate, lines=True):
            value = m.group("v")
            if is_placeholder(value) or value.startswith(("$", "%", "-", "<", "{")):
                continue
            if _CODE_EXPRESSION_RE.search(value) or value.lower() in ("stdin", "-"):
                continue
            start = m.start("v") + shift
            yield _Hit(start, start + len(value), "password-in-command", value, 2)
