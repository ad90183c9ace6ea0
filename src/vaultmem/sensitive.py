"""Sensitive-content detection: which files must be quarantined instead of indexed, and why.

Design decision: every content rule runs as one compiled regex over the *whole* note (line numbers
come from match offsets), never as a per-line loop. detect-secrets supplies the token-format
detectors (their compiled `denylist` patterns, used directly: no global settings, no network
verification); vaultmem adds the rules notes need and code scanners lack (passwords in prose,
tables and Chinese, connection strings, newer API-key formats, seed phrases). Generic rules
(passwords, high entropy) skip placeholders and hashes, because a quarantined note is a note the
user cannot search. A Finding never holds the secret itself, only a masked preview.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from re import Match, Pattern
from typing import TYPE_CHECKING, Any, cast

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.softlayer import SoftlayerDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from .findings import Finding, mask

if TYPE_CHECKING:
    from .config import Settings

# ---------------------------------------------------------------------------------------------
# Path rules
# ---------------------------------------------------------------------------------------------

# Matched against the lower-cased file name (and each dotted suffix, so `server.key.md` counts).
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "*.ppk",
    "id_rsa*",
    "id_dsa*",
    "id_ed25519*",
    "id_ecdsa*",
    "credentials*",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".htpasswd",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "secrets.y*ml",
    "secrets.json",
    "service-account*.json",
)
SECRET_SUFFIXES = frozenset(
    {".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".ppk", ".env"}
)
SECRET_DIRS = frozenset({".ssh", ".gnupg", ".aws", ".kube", ".docker"})
# Words that contain a keyword but are not about secrets ("Secretary notes.md").
_KEYWORD_FALSE_FRIENDS = ("secretary", "secretaries", "secretariat")
_NAME_SEPARATORS = re.compile(r"[\s_\-.]+")


def _path_findings(path: str, name_keywords: tuple[str, ...]) -> list[Finding]:
    pure = PurePosixPath(path.replace("\\", "/"))
    name = pure.name.lower()
    out: list[Finding] = []
    for part in pure.parts[:-1]:
        if part.lower() in SECRET_DIRS:
            out.append(Finding("secret-folder", "sensitive-path", 0, f"folder {part}"))
            break
    pattern = next((p for p in SECRET_FILE_PATTERNS if fnmatchcase(name, p)), None)
    if pattern is None:
        pattern = next(
            (f"*{s}.*" for s in pure.suffixes[:-1] if s.lower() in SECRET_SUFFIXES), None
        )
    if pattern is not None:
        out.append(Finding("secret-filename", "sensitive-path", 0, f"name matches {pattern}"))
    stem = PurePosixPath(name).stem
    for friend in _KEYWORD_FALSE_FRIENDS:
        stem = stem.replace(friend, " ")
    squashed = _NAME_SEPARATORS.sub("", stem)
    for keyword in name_keywords:
        key = _NAME_SEPARATORS.sub("", keyword.lower())
        if key and key in squashed:
            out.append(
                Finding("sensitive-filename", "sensitive-path", 0, f"name contains {keyword}")
            )
            break
    return out


# ---------------------------------------------------------------------------------------------
# Content rules
# ---------------------------------------------------------------------------------------------

_PLACEHOLDER_WORDS = frozenset(
    """
    changeme change_me change-me password passwd pass pwd secret token key apikey api_key example
    sample placeholder redacted hidden masked none null nil true false yes no on off required
    optional todo tbd tba n/a na string str int bool test dummy foo bar baz xxx xxxx your_password
    yourpassword your-password mypassword my_password my-password your_token your_secret
    password123 undefined empty default same unchanged omitted secret_key your_api_key
    """.split()
)
# Password123 is a real (bad) password elsewhere, but in notes it is overwhelmingly a doc example.
_PLACEHOLDER_RE = re.compile(
    r"""
    ^[*x•·.\-_#?]{3,}$          # ****, xxxx, ••••, ....
    | x{3,} | \*{3,} | •{3,}     # partly masked
    | ^<.*>$ | ^\[.*\]$ | ^\(.*\)$
    | \$\{ | \{\{ | \}\} | \$\( | ^\$[A-Za-z_] | ^%[A-Za-z_(] | ^@@ | ^__\w+__$
    | example | placeholder | changeme | change[_-]me | redacted | your[_-]?(?:own[_-]?)?
      (?:pass|pwd|secret|token|key|api)
    | ^(?:env|secret|vault|op|ssm|keyring):
    """,
    re.IGNORECASE | re.VERBOSE,
)
_CODE_EXPRESSION_RE = re.compile(
    r"[()\[\]{}]|^(?:os|env|process|self|this|config|settings|secrets|args|opts|request|params)\."
    r"|^(?:getenv|input|getpass|prompt)\b",
    re.IGNORECASE,
)
_HEX_RE = re.compile(r"^(?:0x)?[0-9a-fA-F]+$")
_UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
_IDENTIFIER_RE = re.compile(r"^[a-z_][a-z0-9_.]*$")
_CJK_RE = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]")


def is_placeholder(value: str) -> bool:
    """True for values that stand in for a secret in docs: `<pw>`, `${VAR}`, `****`, `changeme`."""
    v = value.strip().strip("\"'`").strip()
    return not v or v.lower() in _PLACEHOLDER_WORDS or bool(_PLACEHOLDER_RE.search(v))


_ENTROPY = Base64HighEntropyString()


def _entropy(value: str) -> float:
    return _ENTROPY.calculate_shannon_entropy(value)


def _char_classes(value: str) -> int:
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    rule_id: str
    value: str
    priority: int  # lower wins when two hits overlap
    preview: str | None = None


class _Note:
    """The text under scan, with cheap gates so a costly regex only runs where it could match.

    A gate is a few lower-case literals at least one of which every match must contain. `full`
    gates skip the regex when no literal occurs in the note; line gates run it only over the
    lines holding a literal (offsets are mapped back), which is what keeps a 1 MB note fast.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        lowered = text.lower()
        # Some characters change length when lower-cased; then gating by offsets is unsafe.
        self.lower = lowered if len(lowered) == len(text) else None
        self._views: dict[tuple[str, ...], tuple[str, list[int], list[int]]] = {}

    def find(
        self, pattern: Pattern[str], gate: tuple[str, ...] = (), lines: bool = False
    ) -> Iterable[tuple[Match[str], int]]:
        """Matches of `pattern`, each with the offset to add to its positions."""
        if not gate or self.lower is None:
            for m in pattern.finditer(self.text):
                yield m, 0
            return
        if not any(word in self.lower for word in gate):
            return
        if not lines:
            for m in pattern.finditer(self.text):
                yield m, 0
            return
        sub, sub_starts, starts = self._view(gate)
        for m in pattern.finditer(sub):
            i = bisect_right(sub_starts, m.start()) - 1
            yield m, starts[i] - sub_starts[i]

    def _view(self, gate: tuple[str, ...]) -> tuple[str, list[int], list[int]]:
        if gate not in self._views:
            assert self.lower is not None
            low, spans = self.lower, set()
            for word in gate:
                pos = low.find(word)
                while pos != -1:
                    end = low.find("\n", pos)
                    end = len(low) if end == -1 else end
                    spans.add((low.rfind("\n", 0, pos) + 1, end))
                    pos = low.find(word, end)
            pieces, sub_starts, starts, at = [], [], [], 0
            for start, end in sorted(spans):
                pieces.append(self.text[start:end])
                sub_starts.append(at)
                starts.append(start)
                at += end - start + 1
            self._views[gate] = ("\n".join(pieces), sub_starts, starts)
        return self._views[gate]


# --- detect-secrets token-format detectors ---------------------------------------------------

_PLUGINS: tuple[tuple[str, type[RegexBasedDetector]], ...] = (
    ("aws-access-key", AWSKeyDetector),
    ("artifactory-token", ArtifactoryDetector),
    ("azure-storage-key", AzureStorageKeyDetector),
    ("basic-auth-url", BasicAuthDetector),
    ("cloudant-credentials", CloudantDetector),
    ("discord-bot-token", DiscordBotTokenDetector),
    ("github-token", GitHubTokenDetector),
    ("gitlab-token", GitLabTokenDetector),
    ("ibm-cloud-iam-key", IbmCloudIamDetector),
    ("ibm-cos-hmac", IbmCosHmacDetector),
    ("jwt", JwtTokenDetector),
    ("mailchimp-key", MailchimpDetector),
    ("npm-token", NpmDetector),
    ("openai-key", OpenAIDetector),
    ("private-key", PrivateKeyDetector),
    ("pypi-token", PypiTokenDetector),
    ("sendgrid-key", SendGridDetector),
    ("slack-token", SlackDetector),
    ("softlayer-credentials", SoftlayerDetector),
    ("square-oauth-secret", SquareOAuthDetector),
    ("stripe-key", StripeDetector),
    ("telegram-bot-token", TelegramBotTokenDetector),
    ("twilio-key", TwilioKeyDetector),
)


_KEYWORDS = ("key", "pwd", "pass", "token")
# rule id -> one gate per denylist pattern: (literals, line mode). Derived from the patterns.
_Gate = tuple[tuple[str, ...], bool]
_PLUGIN_GATES: dict[str, list[_Gate]] = {
    "aws-access-key": [(("akia", "asia", "abia", "acca", "a3t"), False), (("aws",), True)],
    "artifactory-token": [(("akc",), False), ((), False)],
    "azure-storage-key": [(("accountkey=",), False)],
    "basic-auth-url": [(("://",), True)],
    "cloudant-credentials": [
        (("cl",), True),
        (("cl",), True),
        (("cloudant.com",), False),
        (("cloudant.com",), False),
    ],
    "github-token": [(("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), False)],
    "gitlab-token": [
        (("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"), False),
        (("gr1348941",), False),
        (("glcbt-",), False),
        (("glimt-",), False),
        (("glptt-",), False),
        (("glagent-",), False),
        (("gloas-",), False),
    ],
    "ibm-cloud-iam-key": [(_KEYWORDS, True)],
    "ibm-cos-hmac": [(("secret",), True)],
    "jwt": [(("eyj",), False)],
    "mailchimp-key": [(("-us",), False)],
    "npm-token": [(("_authtoken",), False)],
    "openai-key": [(("t3blbkfj",), False)],
    "private-key": [(("private key", "putty-user-key", "ssh2 encrypted"), False)] * 8,
    "pypi-token": [(("pypi-",), False)] * 2,
    "sendgrid-key": [(("sg.",), False)],
    "slack-token": [(("xox",), False), (("hooks.slack.com",), False)],
    "softlayer-credentials": [(("sl",), True), (("api.softlayer.com",), False)],
    "square-oauth-secret": [(("sq0csp-",), False)],
    "stripe-key": [(("k_live_",), False)],
}


def _plugin_patterns() -> tuple[tuple[str, Pattern[str], tuple[str, ...], bool], ...]:
    # Their patterns were written for single lines: MULTILINE keeps ^/$ per line on a whole note.
    out = []
    for rule_id, plugin in _PLUGINS:
        gates = _PLUGIN_GATES.get(rule_id, [])
        # `denylist` is a class attribute (typed as an abstract property upstream).
        patterns = cast("Iterable[Pattern[str]]", plugin.denylist)
        for i, pattern in enumerate(patterns):
            gate, lines = gates[i] if i < len(gates) else ((), False)
            compiled = re.compile(pattern.pattern, pattern.flags | re.MULTILINE)
            out.append((rule_id, compiled, gate, lines))
    return tuple(out)


_PLUGIN_PATTERNS = _plugin_patterns()


def _secret_span(m: Match[str]) -> tuple[int, int, str]:
    """The longest capture group when it is the secret itself, else the whole match.

    detect-secrets reports the first non-empty group, which for some patterns is only a prefix
    (`(ghp|gho)_…` yields "ghp"); a group shorter than 8 characters is taken to be such a prefix.
    """
    groups = [i for i in range(1, (m.re.groups or 0) + 1) if m.group(i)]
    best = max(groups, key=lambda i: len(m.group(i)), default=0)
    if best and len(m.group(best)) >= 8:
        return m.start(best), m.end(best), m.group(best)
    return m.start(), m.end(), m.group()


def _plugin_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate, lines in _PLUGIN_PATTERNS:
        for m, shift in note.find(pattern, gate, lines):
            if rule_id == "basic-auth-url":
                start, end, value = m.start(1), m.end(1), m.group(1)
            else:
                start, end, value = _secret_span(m)
            value = value.strip()
            if rule_id == "jwt" and not JwtTokenDetector.is_formally_valid(value):
                continue
            if rule_id == "basic-auth-url":
                user = m.string[m.string.rfind("/", 0, start) + 1 : start].rstrip(":")
                if is_placeholder(value) or value == user:
                    continue
            elif "example" in value.lower():  # AWS's documented AKIAIOSFODNN7EXAMPLE and kin
                continue
            preview = None
            if rule_id == "private-key":
                preview = f"-----{value}-----"
            yield _Hit(start + shift, end + shift, rule_id, value, 0, preview)


# --- vaultmem's own token formats ------------------------------------------------------------

_TOKEN_RULES: tuple[tuple[str, Pattern[str], tuple[str, ...]], ...] = tuple(
    (rule_id, re.compile(pattern), gate)
    for rule_id, pattern, gate in (
        ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ("sk-ant-",)),
        (
            "openai-key",
            r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{32,}",
            ("sk-",),
        ),
        ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}", ("aiza",)),
        ("github-token", r"\bgithub_pat_[A-Za-z0-9_]{40,}", ("github_pat_",)),
        ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}", ("hf_",)),
        ("slack-token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{20,}", ("xapp-",)),
        (
            "gcp-service-account",
            r"\"private_key\"\s*:\s*\"(-----BEGIN [A-Z ]*PRIVATE KEY-----)",
            ('"private_key"',),
        ),
    )
)


def _token_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate in _TOKEN_RULES:
        for m, _ in note.find(pattern, gate):
            start, end, value = _secret_span(m)
            if rule_id == "gcp-service-account":
                yield _Hit(start, end, rule_id, value, 0, '"private_key": "-----BEGIN…"')
            elif _char_classes(value) >= 2 and "example" not in value.lower():
                yield _Hit(start, end, rule_id, value, 0)


# --- connection strings ----------------------------------------------------------------------

_URL_CREDENTIALS_RE = re.compile(
    r"(?i)\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|rediss?|amqps?|mssql|sqlserver"
    r"|oracle|cockroachdb|clickhouse|jdbc:[a-z]+|s?ftp|smtps?|ldaps?|https?|ssh|git\+\w+)"
    r"(?:\+[a-z0-9]+)?://([^\s:/@]*):([^\s@/]+)@[\w.\-\[\]]"
)


def _url_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_URL_CREDENTIALS_RE, ("://",), lines=True):
        user, password = m.group(1), m.group(2)
        if is_placeholder(password) or password == user:
            continue
        yield _Hit(m.start(2) + shift, m.end(2) + shift, "connection-string-password", password, 1)


# --- passwords written as key: value -------------------------------------------------------

_OPERATOR = r"[*_`'\"\]]*\s*(?P<op>:=|=>|=(?!=)|:(?!//)|：|\s+is\s+)[*_`]*[ \t]*"
_PASSWORD_EN_RE = re.compile(
    r"(?i)(?<![\w.\-])(?P<key>[\w.\-]*?(?P<word>password|passwd|passwort|passphrase|pwd|pass"
    r"|secret|secret[_\-]?key))" + _OPERATOR + r"(?P<rest>[^\n]*)"
)
_PASSWORD_ZH_RE = re.compile(
    r"(?P<key>密码|密碼|口令|pin码|PIN码)[*_`\s]*(?P<op>[:：=]|是|为|為)[*_`]*[ \t]*"
    r"(?P<rest>[^\n]*)"
)
_QUOTES = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "「": "」"}
_TOKEN_END_RE = re.compile(r"[\s|]|[\u3000-\u303f\u3400-\u9fff\uff08-\uff1f]")
_COMMENT_START = ("#", "//", "<!--", "(", "（", "--", ";")


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
    whole = not tail or tail.startswith(_COMMENT_START) or bool(_CJK_RE.match(tail))
    return token, 0, False, whole


def _is_password(value: str, quoted: bool, whole: bool, op: str, key: str) -> bool:
    if len(value) < 4 or is_placeholder(value) or _CJK_RE.search(value):
        return False
    if value.lower() == key.lower() or value.lower().endswith(key.lower()):
        return False  # `password=password`, `password: db_password`
    if not quoted:
        if _CODE_EXPRESSION_RE.search(value) or value.startswith(("/", "~/", "./", "$")):
            return False
        # `password = pw` in code is a variable; `DB_PASSWORD=hunter2` in an env file is not.
        if op.strip() in ("=", ":=") and _IDENTIFIER_RE.match(value) and not key.isupper():
            return False
    strong = len(value) >= 6 and (any(c.isdigit() for c in value) or _char_classes(value) >= 3)
    if op.strip() == "is":
        return strong
    return quoted or whole or strong


def _password_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_PASSWORD_EN_RE, ("pass", "pwd", "secret"), lines=True):
        key, word = m.group("key"), m.group("word").lower()
        if word == "pass" and len(key) > 4 and key[-5] not in "_.-":
            continue  # bypass:, compass:, …
        if word.startswith("secret") and m.group("op").strip() == "is":
            continue  # "the secret is …" is prose
        yield from _password_hit(m, key, shift)
    for m, shift in note.find(_PASSWORD_ZH_RE, ("密码", "密碼", "口令", "pin码"), lines=True):
        yield from _password_hit(m, m.group("key"), shift)


def _password_hit(m: Match[str], key: str, shift: int) -> Iterable[_Hit]:
    value, offset, quoted, whole = _password_value(m.group("rest"))
    if _is_password(value, quoted, whole, m.group("op"), key):
        start = m.start("rest") + offset + shift
        yield _Hit(start, start + len(value), "password-assignment", value, 2)


# Markdown tables: `| db | admin | hunter2 |` under a `password` header, or `| 密码 | hunter2 |`.
_TABLE_KEY_RE = re.compile(
    r"(?i)^[*_`\s]*(?:[\w .\-]*(?:password|passwd|passphrase|pwd|secret)|[^|]*(?:密码|密碼|口令))"
    r"[*_`\s:：]*$"
)


_TABLE_RULE_RE = re.compile(r"\s*:?-{2,}:?\s*")


def _table_cells(line: str) -> list[str] | None:
    stripped = line.strip()
    return stripped.strip("|").split("|") if stripped.startswith("|") else None


def _table_hits(note: _Note) -> Iterable[_Hit]:
    text = note.text
    if "|" not in text:
        return
    lines = text.split("\n")
    header: list[bool] = []
    offset = 0
    for i, line in enumerate(lines):
        start = offset
        offset += len(line) + 1
        cells = _table_cells(line)
        if cells is None:
            header = []
            continue
        if all(_TABLE_RULE_RE.fullmatch(c) for c in cells):
            continue
        is_key = [bool(_TABLE_KEY_RE.match(c)) for c in cells]
        following = _table_cells(lines[i + 1]) if i + 1 < len(lines) else None
        if following and all(_TABLE_RULE_RE.fullmatch(c) for c in following):
            header = is_key  # a header row holds labels, not values
            continue
        candidates = [cells[j + 1] for j, k in enumerate(is_key[:-1]) if k]
        candidates += [c for c, h in zip(cells, header, strict=False) if h]
        for cell in candidates:
            value, _, quoted, _ = _password_value(cell.strip().strip("*_"))
            if _is_password(value, quoted, True, ":", "password"):
                pos = line.find(value)
                yield _Hit(start + pos, start + pos + len(value), "password-assignment", value, 2)


# --- high-entropy values in a secret assignment ----------------------------------------------

_ASSIGNMENT_RE = re.compile(
    r"(?i)(?<![\w.\-])(?P<key>[a-z_][\w.\-]*)[\"'\]]*\s*(?::=|=>|=(?!=)|:(?!//))\s*[\"'`]?"
    r"(?P<value>[A-Za-z0-9+/_\-=.~]{16,})"
)
_SECRET_KEY_WORDS = re.compile(
    r"(?i)secret|token|api[_\-.]?key|access[_\-.]?key|private[_\-.]?key|signing[_\-.]?key"
    r"|auth|credential|passw|(?:^|[_\-.])key$|^key"
)
_NOT_SECRET_KEY_WORDS = re.compile(
    r"(?i)public|pub[_\-]?key|fingerprint|hash|sha|md5|digest|checksum|commit|(?:^|[_\-.])id$"
    r"|uuid|guid|version|path|file|url|uri|endpoint|name|type|size|length|count|max|min|limit"
    r"|ttl|expir|timeout|header|format|algorithm|alg|issuer|audience|scope|region|author"
)


def _entropy_floor(value: str) -> float:
    # A string of n symbols cannot exceed log2(n) bits, so detect-secrets' flat 4.5 misses short
    # keys. Random tokens (even lowercase+digits) land above 0.75 of that ceiling; words and
    # identifiers joined by separators saturate near 4 bits, under the 4.2 cap.
    return min(4.2, 0.75 * math.log2(len(value)))


_DOTTED_NAME_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


_ASSIGNMENT_GATE = ("secret", "token", "key", "auth", "credential", "passw")


def _entropy_hits(note: _Note) -> Iterable[_Hit]:
    for m, shift in note.find(_ASSIGNMENT_RE, _ASSIGNMENT_GATE, lines=True):
        key, value = m.group("key"), m.group("value").rstrip(".")
        if not _SECRET_KEY_WORDS.search(key) or _NOT_SECRET_KEY_WORDS.search(key):
            continue
        if _HEX_RE.match(value) or _UUID_RE.match(value) or is_placeholder(value):
            continue
        if _DOTTED_NAME_RE.match(value):
            continue  # settings.SECRET_KEY: code, not a value
        if len(value) < 16 or _char_classes(value) < 2 or _entropy(value) < _entropy_floor(value):
            continue
        start = m.start("value") + shift
        yield _Hit(start, start + len(value), "high-entropy-secret", value, 3)


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
            and _entropy(value) >= _entropy_floor(value) - 0.5
        ):
            yield _Hit(m.start(1), m.end(1), "bearer-token", value, 3)
    for m, _ in note.find(_BASIC_HEADER_RE, ("authorization",)):
        yield _Hit(m.start(1), m.end(1), "basic-auth-header", m.group(1), 3)


# --- wallet seed phrases -------------------------------------------------------------------

_SEED_RE = re.compile(
    r"(?i)(?:seed[ _\-]?phrase|mnemonic|recovery[ _\-]phrase|secret[ _\-]recovery|助记词|助記詞)"
    r"[^\n]{0,40}?[:：]?[\s\"'`]*"
    r"((?:[a-z]{3,8}(?:[\s,、\"'`]+(?:\d{1,2}[.)][ \t]*)?)){11,23}[a-z]{3,8})"
)
_STOPWORDS = frozenset(
    "the and for that this with are was you your not but from have has its can will all any "
    "one our out use how who why what when where which there their they them then than into "
    "also only just very".split()
)


_SEED_GATE = ("seed", "mnemonic", "recovery", "助记词", "助記詞")


def _seed_hits(note: _Note) -> Iterable[_Hit]:
    for m, _ in note.find(_SEED_RE, _SEED_GATE):
        words = re.findall(r"[a-zA-Z]+", m.group(1))
        if len(words) >= 12 and not any(w.lower() in _STOPWORDS for w in words):
            yield _Hit(m.start(1), m.end(1), "seed-phrase", m.group(1), 1)


_CONTENT_RULES = (
    _plugin_hits,
    _token_hits,
    _url_hits,
    _password_hits,
    _table_hits,
    _entropy_hits,
    _header_hits,
    _seed_hits,
)


def _content_findings(text: str) -> list[Finding]:
    note = _Note(text)
    hits = sorted(
        (hit for rule in _CONTENT_RULES for hit in rule(note)),
        key=lambda h: (h.priority, h.start),
    )
    kept: list[_Hit] = []
    for hit in hits:
        # One secret, one finding: a GitHub token is not also a "high-entropy secret".
        if not any(hit.start < k.end and k.start < hit.end for k in kept):
            kept.append(hit)
    kept.sort(key=lambda h: h.start)
    newlines = [m.start() for m in re.finditer("\n", text)] if kept else []
    return [
        Finding(
            h.rule_id,
            "secret",
            bisect_right(newlines, h.start) + 1,
            h.preview or mask(h.value),
        )
        for h in kept
    ]


# ---------------------------------------------------------------------------------------------
# Explicit markers
# ---------------------------------------------------------------------------------------------

_TRUTHY = frozenset({"true", "yes", "y", "on", "1"})
_PRIVATE_KEYS = frozenset({"private", "secret", "sensitive", "confidential"})
_PRIVATE_VISIBILITY = frozenset({"private", "secret", "confidential", "internal-only"})


def _as_strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, Iterable) and not isinstance(value, Mapping | bytes):
        return [str(v) for v in value]
    return [str(value)]


def _norm_tag(tag: str) -> str:
    return tag.strip().lstrip("#").strip().lower()


def _marker_findings(
    front_matter: Mapping[str, Any], tags: Iterable[str], private_tags: tuple[str, ...]
) -> list[Finding]:
    out: list[Finding] = []
    for key, value in front_matter.items():
        k = str(key).strip().lower()
        values = [v.strip().lower() for v in _as_strings(value)]
        if (k in _PRIVATE_KEYS and any(v in _TRUTHY for v in values)) or (
            k in ("visibility", "access") and any(v in _PRIVATE_VISIBILITY for v in values)
        ):
            out.append(Finding("front-matter-private", "private", 0, f"{key}: {value}"))
            break
    wanted = {_norm_tag(t) for t in private_tags if _norm_tag(t)}
    all_tags = [_norm_tag(t) for t in tags]
    for raw in _as_strings(front_matter.get("tags")) + _as_strings(front_matter.get("tag")):
        all_tags += [_norm_tag(t) for t in re.split(r"[,\s]+", raw) if t]
    for tag in all_tags:
        if tag in wanted or any(tag.startswith(w + "/") for w in wanted):
            out.append(Finding("private-tag", "private", 0, f"#{tag}"))
            break
    return out


def _front_matter_secret_findings(front_matter: Mapping[str, Any], seen: set[str]) -> list[Finding]:
    """Safety net for callers that scan only the body: check `key: value` pairs themselves."""
    out: list[Finding] = []
    for key, value in front_matter.items():
        for v in _as_strings(value):
            for f in _content_findings(f"{key}: {v}"):
                if f.masked not in seen:
                    seen.add(f.masked)
                    out.append(Finding(f.rule_id, f.category, 0, f.masked))
    return out


# ---------------------------------------------------------------------------------------------
# The policy
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SensitivePolicy:
    """Decides whether a note must be quarantined instead of indexed; see `scan`."""

    name_keywords: tuple[str, ...] = (
        "password",
        "passwd",
        "secret",
        "credential",
        "private-key",
        "密码",
        "密碼",
        "口令",
        "私钥",
    )
    private_tags: tuple[str, ...] = ("private",)

    @classmethod
    def from_settings(cls, settings: Settings) -> SensitivePolicy:
        return cls(
            name_keywords=tuple(settings.name_keywords), private_tags=tuple(settings.private_tags)
        )

    def scan(
        self,
        path: str,
        text: str,
        front_matter: Mapping[str, Any] | None = None,
        tags: Iterable[str] = (),
    ) -> list[Finding]:
        """Every reason `path` must not be indexed; empty means index it.

        Path findings first (line 0), then explicit markers (line 0), then content findings in
        text order. `text` is the whole note (front matter included, so line numbers match the
        file); front matter values are checked again on their own in case the caller passes only
        the body.
        """
        front_matter = front_matter or {}
        findings = _path_findings(path, self.name_keywords)
        findings += _marker_findings(front_matter, tags, self.private_tags)
        content = _content_findings(text)
        findings += content
        findings += _front_matter_secret_findings(front_matter, {f.masked for f in content})
        return findings
