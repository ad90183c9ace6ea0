"""Sensitive-content detection: which files must be quarantined instead of indexed, and why.

Design decision: every content rule runs as one compiled regex over the *whole* note (line numbers
come from match offsets), never as a per-line loop. detect-secrets supplies part of the
token-format detectors (their compiled `denylist` patterns, used directly: no global settings, no
network verification); vaultmem adds about seventy vendor formats of its own, written from the
vendors' documented shapes, and the rules notes need and code scanners lack: passwords in prose,
tables and commands in English, Chinese, Japanese and Korean (and the password words of a dozen
other languages), connection strings of every shape, `.netrc` and `.pgpass` lines, secrets
wrapped in base64 or over two lines, seed phrases. Generic rules (passwords, high entropy) skip
placeholders, hashes, algorithm names and code, because a quarantined note is a note the user
cannot search.

Names: a file or folder that is secret by nature (`.env*`, `.netrc`, `credentials*`, `secrets/`,
`私密/`) is quarantined whatever it holds; a keyword in a name (`passwords.md`, `密码.md`) only
makes the content scan stricter, so notes *about* passwords or cryptography stay searchable. A
Finding never holds the secret itself, only a masked preview.

One module on purpose (about 1,500 lines, most of it rule tables and their regexes): every rule
family works on the same `_Note` view (offsets to line numbers, the gates that skip a family
when no keyword is present) and shares the same judgements (placeholders, entropy, code), and
the base64 rule re-runs the URL, password and token families on decoded text; the families are
tuned together against one corpus (tests/sensitive_corpus*.py), so a change to a shared guard is
read next to every rule it affects.
"""

from __future__ import annotations

import base64
import functools
import itertools
import math
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from re import Match, Pattern
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote

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

from ..text import WIDE_CHAR_RE, WIDE_CLASS
from .findings import Finding, mask

if TYPE_CHECKING:
    from ..config import Settings

# ---------------------------------------------------------------------------------------------
# Path rules
# ---------------------------------------------------------------------------------------------

# Matched against the lower-cased file name, and against it without its note extension (so
# `env.local.md` and `.env.production.md` count), and each dotted suffix (`server.key.md`).
SECRET_FILE_PATTERNS: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    "env.*",
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
    "credentials",
    "credentials[._-]*",
    ".netrc",
    "_netrc",
    "netrc",
    ".pgpass",
    ".htpasswd",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "secrets.y*ml",
    "secrets.json",
    "secrets.toml",
    "secrets.env",
    "service-account*.json",
    "*.tfvars",
    "terraform.tfstate*",
)
SECRET_SUFFIXES = frozenset(
    {".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx", ".ppk", ".env"}
)
_NOTE_SUFFIXES = (".md", ".markdown", ".txt")
# Folders that hold secrets by nature, or that the user named private (any case).
SECRET_DIRS = frozenset(
    {
        ".ssh",
        ".gnupg",
        "credentials",
        ".credentials",
        ".aws",
        ".kube",
        ".docker",
        "secrets",
        "secret",
        ".secrets",
        "private",
        ".private",
        "私密",
        "隐私",
        "隱私",
        "机密",
        "機密",
        "秘密",
        "비밀",
        "기밀",
    }
)
# Words that contain a keyword but are not about secrets ("Secretary notes.md").
_KEYWORD_FALSE_FRIENDS = ("secretary", "secretaries", "secretariat")
_NAME_SEPARATORS = re.compile(r"[\s_\-.]+")


def _path_findings(path: str) -> list[Finding]:
    """What the path alone says: a folder or a file that holds secrets by nature, or a token
    written into a name."""
    pure = PurePosixPath(path.replace("\\", "/"))
    name = pure.name.lower()
    out: list[Finding] = []
    for part in pure.parts[:-1]:
        if part.lower() in SECRET_DIRS:
            out.append(Finding("secret-folder", "sensitive-path", 0, f"folder {part}"))
            break
    # A note is judged by its name without the note extension: `env.local.md` is `env.local`,
    # while `env.md` (notes about env(1)) is not `env.*`.
    bare = name[: -len(pure.suffix)] if pure.suffix.lower() in _NOTE_SUFFIXES else name
    patterns = SECRET_FILE_PATTERNS
    if pure.suffix.lower() in (".md", ".markdown"):
        # A Markdown note named `credentials-rotation.md` is as likely a design note as a list
        # of logins: its name makes the content scan strict (a name keyword), not a verdict.
        patterns = tuple(p for p in patterns if not p.startswith("credentials"))
    pattern = next((p for p in patterns if fnmatchcase(bare, p)), None)
    if pattern is None:
        pattern = next(
            (f"*{s}.*" for s in pure.suffixes[:-1] if s.lower() in SECRET_SUFFIXES), None
        )
    if pattern is not None:
        out.append(Finding("secret-filename", "sensitive-path", 0, f"name matches {pattern}"))
    out += path_token_findings(path)
    out += _path_password_findings(path)
    return out


# A password written into a file name: `router-password-Kq7x8Lm2z.md`, `密码 Abc12345x.md`.
# In a name, `-`, `_` and blanks separate words, so the value is the word after the label.
_PATH_PASSWORD_RE = re.compile(
    r"(?i)(?:(?<![a-z])(?:"
    + r"password|passwd|passwort|kennwort|passcode|pwd|pw|pass|mot[ _\-]de[ _\-]passe|mdp"
    + r"|contrase[ñn]a|senha|wachtwoord|has[łl]o|salasana|[şs]ifre|пароль"
    + r")s?[ _\-=:：]+|(?:密码|密碼|口令|パスワード|비밀번호|비번|암호)[ _\-=:：]*)"
    + r"(?P<value>[^\s_=:：/\\-]{6,64}+)"
)


def _path_password_findings(path: str) -> list[Finding]:
    stem = PurePosixPath(path.replace("\\", "/")).name
    stem = stem[: -len(PurePosixPath(stem).suffix)] if PurePosixPath(stem).suffix else stem
    for m in _PATH_PASSWORD_RE.finditer(stem[:512]):
        value = m.group("value")
        if _looks_like_password(value):
            return [Finding("password-in-path", "sensitive-path", 0, f"password {mask(value)}")]
    return []


def _name_has_keyword(path: str, name_keywords: tuple[str, ...]) -> bool:
    """`passwords.md`, `db_PASSWORD_2024.md`, `银行卡密码.md`: secrets may be inside."""
    stem = PurePosixPath(PurePosixPath(path.replace("\\", "/")).name.lower()).stem
    for friend in _KEYWORD_FALSE_FRIENDS:
        stem = stem.replace(friend, " ")
    squashed = _NAME_SEPARATORS.sub("", stem)
    return any(
        (key := _NAME_SEPARATORS.sub("", keyword.lower())) and key in squashed
        for keyword in name_keywords
    )


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
    hashed hash hashes encrypted salted plaintext plain cleartext random generated rotated revoked
    expired unset blank secure strong weak invalid wrong correct old new current temporary
    bcrypt scrypt argon2 argon2id argon2i pbkdf2 sha1 sha256 sha512 sha-256 sha-512 md5 ntlm
    crypt yescrypt des aes hmac sha-1 sha-2 sha-3 sha3 blake2 blake3 kdf
    """.split()
)
# Password123 is a real (bad) password elsewhere, but in notes it is overwhelmingly a doc example.
_PLACEHOLDER_RE = re.compile(
    r"""
    ^[*x•·.\-_#?＊]{3,}$          # ****, xxxx, ••••, ....
    | x{4,} | X{4,} | \*{3,} | •{3,} | ＊{3,}   # partly masked
    | ^<.*>$ | ^\[.*\]$ | ^\(.*\)$ | ^（.*）$ | ^【.*】$ | ^「.*」$
    | \$\{ | \{\{ | \}\} | \$\( | ^\$[A-Za-z_] | ^%[A-Za-z_(] | ^@@ | ^__\w+__$
    | example | placeholder | changeme | change[_-]me | redacted | your[_-]?(?:own[_-]?)?
      (?:pass|pwd|secret|token|key|api)
    | ^(?:env|secret|vault|op|ssm|keyring|awssm|gcpsm|azkv|sops):
    | ^\w+\(.*\)$                 # get_random_secret_key(): code
    """,
    re.IGNORECASE | re.VERBOSE,
)
# USER, PASSWORD, HASH, YOUR_KEY: capitals without digits name a value, they are not one.
_UPPER_NAME_RE = re.compile(r"^[A-Z][A-Z_]*[A-Z]\d{0,2}$|^\^\w+\^$")
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
# A code name's pieces: words in camelCase or PascalCase (an acronym run ends where the next
# word starts: `BPETokenizer` is BPE, Tokenizer), numbers, and the separators of snake_case,
# kebab-case and dotted names. Read piece by piece, never as one nested repetition (which
# backtracks exponentially over a long lowercase run).
_NAME_CHARS_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_NAME_PIECE_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_CONSONANT_RUN_RE = re.compile(r"[^aeiouy]{5}")
_TWO_LETTER_WORDS = frozenset(
    "id is of to at by in on up or as do go if no my me we us it an be ui io os ok ex re de".split()
)
# CJK ideographs, kana, hangul and full-width punctuation: where a value written in prose ends.
_WIDE = WIDE_CLASS
_CJK_RE = WIDE_CHAR_RE
# Crypto and protocol names with digits (AES-256, RSA-2048, X25519, TLS1.3): not passwords.
_ALGORITHM_RE = re.compile(
    r"(?i)^(?:rsa|dsa|ecdsa|ed|x|aes|sha|md|hmac|p|secp|curve|chacha|poly|argon|pbkdf|scrypt|bcrypt"
    r"|blake|tls|ssl|wpa|nist|iso|rfc|utf|base|crc|des|3des|rc|gcm|cbc|ctr|fido|u2f|oauth|http"
    r"|ipv|cve|sp|ssh|pgp|gpg|pkcs|x|ec|ecdh|dh|kyber|ml-kem|ml-dsa|ntlm|sm|gost|camellia|twofish)"
    r"[\-_/ ]?\d+(?:[\-_/.]?[A-Za-z0-9]{1,6}){0,3}$"
)


def is_placeholder(value: str) -> bool:
    """True for values that stand in for a secret in docs: `<pw>`, `${VAR}`, `****`, `changeme`."""
    v = value.strip().strip("\"'`").strip()
    if not v or v.lower() in _PLACEHOLDER_WORDS:
        return True
    if _PLACEHOLDER_RE.search(v) or _UPPER_NAME_RE.match(v):
        return True
    if ":" in v.strip(":") and all(is_placeholder(p) for p in v.split(":") if p):
        return True  # USER:PASS, COMBO00:COMBO01
    return bool(_ALGORITHM_RE.match(v))


def _is_wordy(value: str) -> bool:
    """`AbstractSingletonProxyFactoryBean`, `get_random_secret_key`, `getOAuth2TokenProvider`,
    `base64EncodedSecretName`: names made of words, not random tokens.

    Words are pieces a person can say (a vowel, no run of five consonants), most of the letters,
    or at most two acronyms of up to five capitals; at most one lone letter and two short
    numbers; at least two words of three letters or more. A random token breaks into lone
    letters, capitals and digits at once."""
    if not _NAME_CHARS_RE.match(value):
        return False
    pieces = _NAME_PIECE_RE.findall(value)
    words = singles = numbers = acronyms = spoken = vowels = 0
    for piece in pieces:
        if piece.isdigit():
            numbers += 1
            if len(piece) > 4:
                return False
        elif len(piece) == 1:
            singles += 1
        elif piece.isupper() and len(piece) <= 5:
            acronyms += 1
            words += len(piece) >= 3
        else:
            low = piece.lower()
            if len(low) <= 4 and not any(c in "aeiouy" for c in low):
                acronyms += 1  # http, sql, cfg: short names said letter by letter
                words += len(piece) >= 3
                continue
            if not any(c in "aeiouy" for c in low) or _CONSONANT_RUN_RE.search(low):
                return False
            if len(low) == 2 and low not in _TWO_LETTER_WORDS:
                return False
            words += len(piece) >= 3
            spoken += len(piece)
            vowels += sum(c in "aeiouy" for c in low)
    letters = sum(c.isalpha() for c in value)
    return (
        words >= 2
        and singles + acronyms <= 2
        and singles <= 1
        and numbers <= 2
        and spoken >= 0.6 * letters
        and vowels >= 0.25 * spoken  # English names run near 35 %, random letters near 23 %
    )


# A code name reads as words with a verb first (`useClientSecret…`, `getToken`), or a test or
# a class (`TestPasswordReset`, `…Provider`, `…Validator`): a value no person types as a secret.
_CODE_FIRST_WORDS = frozenset(
    "get set is has use load read parse make create build fetch generate resolve find on handle "
    "should can test new init validate check refresh exchange".split()
)
_CODE_LAST_WORDS = frozenset(
    "impl factory provider validator ref handler service manager config exception error type "
    "name id builder filter store loader reader resolver client context policy strategy "
    "adapter helper util utils spec test tests".split()
)


def _is_code_name(value: str) -> bool:
    if not _is_wordy(value):
        return False
    pieces = [p.lower() for p in _NAME_PIECE_RE.findall(value) if not p.isdigit()]
    lower_camel = value[:1].islower() and any(c.isupper() for c in value)
    return bool(pieces) and (
        lower_camel or pieces[0] in _CODE_FIRST_WORDS or pieces[-1] in _CODE_LAST_WORDS
    )


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


def _low_diversity(body: str) -> bool:
    """`XXXXXXXX`, `00000000`, `abcabcabc`: the random part of a documented placeholder."""
    return len(body) >= 8 and (len(set(body)) <= 4 or _entropy(body) < 2.5)


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    rule_id: str
    value: str
    priority: int  # lower wins when two hits overlap
    preview: str | None = None


# --- bounds on the work of a scan ------------------------------------------------------------
# Python's regex engine backtracks, so even a careful pattern can cost the square of the line
# it is given. No rule is ever handed a line longer than SCAN_LINE_CHARS: a longer line is cut
# into windows of that width, each repeating the last SCAN_OVERLAP characters of the one
# before, so any secret up to SCAN_OVERLAP characters long is whole in some window. The work
# of each rule is then at most (note length / window step) x (cost of one window): linear in
# the note whatever the pattern. Two more bounds hold per note: its length, and the number of
# candidate matches each rule family may examine (per megabyte, so a long table is fine and a
# note made of nothing but keywords is not). A note past either is not scanned to the end and
# is quarantined as "too complex to scan", never indexed unscanned.
SCAN_LINE_CHARS = 8192
SCAN_OVERLAP = 2048
SCAN_NOTE_CHARS = 8_000_000
RULE_CANDIDATES = 50_000  # per family, per started megabyte
TOO_COMPLEX = "too-complex-to-scan"


@dataclass
class ScanStats:
    """What a scan handed its regexes: the deterministic measure of its work (tests, bench)."""

    chars: dict[str, int] = field(default_factory=dict)  # rule family -> characters searched
    candidates: dict[str, int] = field(default_factory=dict)  # rule family -> matches examined
    longest_line: int = 0  # the longest line any regex was given
    too_complex: list[tuple[str, str]] = field(default_factory=list)  # (rule family, why)

    def total_chars(self) -> int:
        return sum(self.chars.values())


def _windowed(text: str) -> tuple[str, list[int], list[int], list[int], int]:
    """(view, joints, segment starts in the view, the same in `text`, longest view line).

    The view is `text` with every line over SCAN_LINE_CHARS cut into overlapping windows, one
    per view line; `joints` are the view offsets of the newlines that cut added."""
    lines = text.split("\n")
    longest = max(map(len, lines))
    if longest <= SCAN_LINE_CHARS:
        return text, [], [0], [0], longest
    step = SCAN_LINE_CHARS - SCAN_OVERLAP
    pieces: list[str] = []
    joints: list[int] = []
    seg_view: list[int] = []
    seg_text: list[int] = []
    vpos = tpos = 0
    for line in lines:
        if len(line) <= SCAN_LINE_CHARS:
            if not seg_view or vpos - seg_view[-1] != tpos - seg_text[-1]:
                seg_view.append(vpos)
                seg_text.append(tpos)
            pieces.append(line)
            vpos += len(line) + 1
        else:
            starts = [*range(0, len(line) - SCAN_LINE_CHARS, step), len(line) - SCAN_LINE_CHARS]
            for k, start in enumerate(starts):
                if k:
                    joints.append(vpos - 1)
                seg_view.append(vpos)
                seg_text.append(tpos + start)
                pieces.append(line[start : start + SCAN_LINE_CHARS])
                vpos += SCAN_LINE_CHARS + 1
        tpos += len(line) + 1
    return "\n".join(pieces), joints, seg_view, seg_text, SCAN_LINE_CHARS


class _Note:
    """The text under scan, with cheap gates so a costly regex only runs where it could match.

    A gate is a few lower-case literals at least one of which every match must contain. `full`
    gates skip the regex when no literal occurs in the note; line gates run it only over the
    lines holding a literal (offsets are mapped back), which is what keeps a 1 MB note fast.
    `strict` is set for a note whose name says it holds secrets (`passwords.md`, `密码.md`):
    its `label: value` lines and table cells are held to a lower bar.

    `text` is the bounded view of the note (see SCAN_LINE_CHARS): rules work on it and report
    offsets in it; `source_span` maps them back to the note. `rule` names the rule family that
    is running, whose candidates `find` counts against RULE_CANDIDATES.
    """

    def __init__(self, text: str, strict: bool = False, stats: ScanStats | None = None) -> None:
        self.source = text
        self.text, self._joints, self._seg_view, self._seg_text, longest = _windowed(text)
        self.strict = strict
        self.stats = stats if stats is not None else ScanStats()
        self.stats.longest_line = max(self.stats.longest_line, longest)
        self.rule = "other"
        self.stopped: set[str] = set()
        self.budget = RULE_CANDIDATES * (1 + len(text) // 1_000_000)
        lowered = self.text.lower()
        # Some characters change length when lower-cased; then gating by offsets is unsafe.
        self.lower = lowered if len(lowered) == len(self.text) else None
        self._views: dict[tuple[str, ...], tuple[str, list[int], list[int]]] = {}

    def child(self, text: str) -> _Note:
        """A text derived from this note (a decoded value, two joined lines), scanned under the
        same budget."""
        inner = _Note(text, stats=self.stats)
        inner.rule, inner.budget, inner.stopped = self.rule, self.budget, self.stopped
        return inner

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        if len(self._seg_view) == 1:
            return start, end
        i = bisect_right(self._seg_view, start) - 1
        j = bisect_right(self._seg_view, max(start, end - 1)) - 1
        return (
            self._seg_text[i] + start - self._seg_view[i],
            self._seg_text[j] + end - self._seg_view[j],
        )

    def joint(self, pos: int) -> bool:
        """True if the newline at view offset `pos` was added by cutting a long line."""
        if not self._joints:
            return False
        i = bisect_right(self._joints, pos) - 1
        return i >= 0 and self._joints[i] == pos

    def cut(self, start: int, end: int) -> bool:
        """True if a match at [start, end) runs into a window's edge: it may go on beyond."""
        return bool(self._joints) and (self.joint(start - 1) or self.joint(end))

    def has(self, gate: tuple[str, ...]) -> bool:
        low = self.lower if self.lower is not None else self.text.lower()
        return any(word in low for word in gate)

    def _searched(self, chars: int) -> None:
        self.stats.chars[self.rule] = self.stats.chars.get(self.rule, 0) + chars

    def spend(self, n: int = 1) -> bool:
        """Count `n` candidates for the running rule family; False once it is over budget."""
        if self.rule in self.stopped:
            return False
        used = self.stats.candidates.get(self.rule, 0) + n
        self.stats.candidates[self.rule] = used
        if used > self.budget:
            self.stopped.add(self.rule)
            why = f"more than {self.budget:,} candidate matches for the {self.rule} rules"
            self.stats.too_complex.append((self.rule, why))
            return False
        return True

    def find(
        self, pattern: Pattern[str], gate: tuple[str, ...] = (), lines: bool = False
    ) -> Iterable[tuple[Match[str], int]]:
        """Matches of `pattern`, each with the offset to add to its positions."""
        if self.rule in self.stopped:
            return
        if not gate or self.lower is None:
            sub, shift = self.text, 0
        elif not any(word in self.lower for word in gate):
            return
        elif not lines:
            sub, shift = self.text, 0
        else:
            sub, sub_starts, starts = self._view(gate)
            self._searched(len(sub))
            for m in pattern.finditer(sub):
                if not self.spend():
                    return
                i = bisect_right(sub_starts, m.start()) - 1
                yield m, starts[i] - sub_starts[i]
            return
        self._searched(len(sub))
        for m in pattern.finditer(sub):
            if not self.spend():
                return
            yield m, shift

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
# Kept where they are good (their AWS, GitHub, GitLab, JWT, private-key, Slack, Stripe... patterns
# are exact); Twilio's is not used: it flags `AC…` account SIDs, which are public identifiers.

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
)


_KEYWORDS = ("key", "pwd", "pass", "token")
# Their key is `(cloudant|cl|clou)[_-]?(api)?(key|pwd|pw|password|pass|token)`: these literals
# cover every spelling without running the pattern on every line holding "cl".
_CL_GATE = tuple(
    p + s + k
    for p in ("cl", "clou", "cloudant")
    for s in ("", "_", "-")
    for k in ("key", "pw", "pass", "token", "api")
)
_SL_GATE = tuple(
    p + s + k for p in ("sl", "softlayer") for s in ("", "_", "-") for k in _KEYWORDS + ("api",)
)
# rule id -> one gate per denylist pattern: (literals, line mode). Derived from the patterns.
_Gate = tuple[tuple[str, ...], bool]
_PLUGIN_GATES: dict[str, list[_Gate]] = {
    "aws-access-key": [(("akia", "asia", "abia", "acca", "a3t"), False), (("aws",), True)],
    "artifactory-token": [(("akc",), False), ((), False)],
    "azure-storage-key": [(("accountkey=",), False)],
    "basic-auth-url": [(("://",), True)],
    "cloudant-credentials": [
        (_CL_GATE, True),
        (_CL_GATE, True),
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
    "softlayer-credentials": [(_SL_GATE, True), (("api.softlayer.com",), False)],
    "square-oauth-secret": [(("sq0csp-",), False)],
    "stripe-key": [(("k_live_",), False)],
}


# Upstream patterns that backtrack over the square of a line, and their linear equivalents.
# ` *` / ` +` / ` *` around the operator retry every split of a run of spaces; a JWT, npm or
# OpenAI pattern retried from each `eyJ` / `//` / `sk-` inside one long run re-reads the run.
_SPACED_OPERATOR = "(?: *)(?:=|:|:=|=>| +|::)(?: *)"
_LINEAR_OPERATOR = "(?: *+)(?:(?:=>|:=|::|=|:)(?: *+)|(?<= ))"
_LINEAR_PLUGIN_PATTERNS = {
    r"eyJ[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*?": (
        r"(?<![A-Za-z0-9_=-])eyJ[A-Za-z0-9_=-]++\.[A-Za-z0-9_=-]++\.?[A-Za-z0-9_.+/=-]*?"
    ),
    r"\/\/.+\/:_authToken=\s*((npm_.+)|([A-Fa-f0-9-]{36})).*": (
        r"(?<!/)//[^\s]{1,256}?/:_authToken=[ \t]*+((npm_\S+)|([A-Fa-f0-9-]{36}))"
    ),
    r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}": (
        r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"
    ),
}


def _linear(pattern: str) -> str:
    pattern = _LINEAR_PLUGIN_PATTERNS.get(pattern, pattern)
    return pattern.replace(_SPACED_OPERATOR, _LINEAR_OPERATOR)


def _plugin_patterns() -> tuple[tuple[str, Pattern[str], tuple[str, ...], bool], ...]:
    # Their patterns were written for single lines: MULTILINE keeps ^/$ per line on a whole note.
    out = []
    for rule_id, plugin in _PLUGINS:
        gates = _PLUGIN_GATES.get(rule_id, [])
        # `denylist` is a class attribute (typed as an abstract property upstream).
        patterns = cast("Iterable[Pattern[str]]", plugin.denylist)
        for i, pattern in enumerate(patterns):
            gate, lines = gates[i] if i < len(gates) else ((), False)
            # Tokens never span lines: search only the lines holding the prefix.
            lines = lines or (bool(gate) and rule_id != "private-key")
            compiled = re.compile(_linear(pattern.pattern), pattern.flags | re.MULTILINE)
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


_JWT_DOC_EXAMPLE = ("John Doe", "1234567890")


def _is_doc_jwt(value: str) -> bool:
    """jwt.io's famous sample token (sub 1234567890, name John Doe) is documentation."""
    parts = value.split(".")
    if len(parts) < 2:
        return False
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return False
    return all(word in payload for word in _JWT_DOC_EXAMPLE)


def _token_placeholder(value: str) -> bool:
    """A token-shaped value that is a documented stand-in: `ghp_XXXX…`, `T00000000/B00000000`."""
    low = value.lower()
    if "example" in low or "xxxx" in low or "0000000" in low or "your" in low:
        return True
    body = re.sub(r"^[A-Za-z]{1,8}[_\-.]", "", value)  # drop a vendor prefix (ghp_, sk_live_)
    return _low_diversity(body)


def _plugin_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate, lines in _PLUGIN_PATTERNS:
        for m, shift in note.find(pattern, gate, lines):
            if rule_id == "basic-auth-url":
                start, end, value = m.start(1), m.end(1), m.group(1)
            else:
                start, end, value = _secret_span(m)
            value = value.strip()
            if rule_id == "jwt" and (
                not JwtTokenDetector.is_formally_valid(value) or _is_doc_jwt(value)
            ):
                continue
            if rule_id == "basic-auth-url":
                user = m.string[m.string.rfind("/", 0, start) + 1 : start].rstrip(":")
                if is_placeholder(value) or value == user:
                    continue
            elif rule_id != "private-key" and _token_placeholder(value):
                continue  # AWS's documented AKIAIOSFODNN7EXAMPLE, ghp_XXXX…, and kin
            preview = None
            if rule_id == "private-key":
                preview = f"-----{value}-----"
            yield _Hit(start + shift, end + shift, rule_id, value, 0, preview)


# --- vaultmem's own token formats ------------------------------------------------------------
# Written from the vendors' documented shapes (prefix, alphabet, length); gitleaks' and
# trufflehog's public rule sets were read as references for those shapes. Each entry: rule id,
# pattern (the secret is its longest group of 8+ characters, else the whole match), gate literals.

_B = r"(?<![A-Za-z0-9_\-])"  # a token starts at a boundary: not inside a longer word
_E = r"(?![A-Za-z0-9_\-])"
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
        ("google-oauth-secret", r"\bGOCSPX-[A-Za-z0-9_\-]{24,}", ("gocspx-",)),
        ("google-refresh-token", _B + r"1//0[A-Za-z0-9_\-]{40,}", ("1//0",)),
        ("github-token", r"\bgithub_pat_[A-Za-z0-9_]{40,}", ("github_pat_",)),
        ("github-token", _B + r"gh[pousr]_[A-Za-z0-9]{36,255}" + _E, ("gh",)),
        (
            "gitlab-token",
            _B + r"gl(?:pat|rt|dt|ft|soat|cbt|imt|ptt|agent|oas)-[\w\-]{20,}",
            ("gl",),
        ),
        ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}", ("hf_",)),
        ("slack-token", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-f0-9]{20,}", ("xapp-",)),
        ("slack-token", _B + r"xox[abposre]-[A-Za-z0-9\-]{20,}", ("xox",)),
        (
            "slack-webhook",
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+\-]{20,}",
            ("hooks.slack.com",),
        ),
        ("stripe-key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ("k_live_", "k_test_")),
        ("stripe-webhook-secret", _B + r"whsec_[A-Za-z0-9+/]{24,}", ("whsec_",)),
        ("twilio-key", _B + r"SK[0-9a-fA-F]{32}" + _E, ("sk",)),
        ("sendgrid-key", _B + r"SG\.[\w\-]{16,32}\.[\w\-]{32,64}", ("sg.",)),
        ("mailgun-key", _B + r"key-[0-9a-f]{32}" + _E, ("key-",)),
        ("npm-token", _B + r"npm_[A-Za-z0-9]{36}" + _E, ("npm_",)),
        ("pypi-token", r"pypi-AgEIcHlwaS5vcmc[\w\-]{50,}", ("pypi-",)),
        (
            "azure-ad-client-secret",
            _B + r"[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}" + _E,
            ("q~",),
        ),
        (
            "azure-shared-access-key",
            r"(?i)SharedAccess(?:Key|Signature)\s*=\s*([A-Za-z0-9+/%]{30,}={0,2})",
            ("sharedaccess",),
        ),
        (
            "heroku-key",
            _B + r"HRKU-(?:AA[\w\-]{58}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f-]{22})",
            ("hrku-",),
        ),
        ("digitalocean-token", _B + r"do[opr]_v1_[a-f0-9]{64}" + _E, ("_v1_",)),
        ("vault-token", _B + r"hv[sbr]\.[A-Za-z0-9_\-]{24,}", ("hvs.", "hvb.", "hvr.")),
        ("terraform-token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}", ("atlasv1",)),
        (
            "age-secret-key",
            r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
            ("age-secret",),
        ),
        ("replicate-token", _B + r"r8_[A-Za-z0-9]{37}" + _E, ("r8_",)),
        ("groq-key", _B + r"gsk_[A-Za-z0-9]{48,}", ("gsk_",)),
        ("xai-key", _B + r"xai-[A-Za-z0-9]{70,}", ("xai-",)),
        ("perplexity-key", _B + r"pplx-[A-Za-z0-9]{40,}", ("pplx-",)),
        ("shopify-token", _B + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}" + _E, ("shp",)),
        ("square-token", _B + r"(?:EAAA[\w\-]{60}|sq0atp-[\w\-]{22})" + _E, ("eaaa", "sq0atp-")),
        (
            "discord-webhook",
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/([\w\-]{60,})",
            ("/api/webhooks/",),
        ),
        ("atlassian-token", _B + r"ATATT3[A-Za-z0-9_\-=]{150,}", ("atatt3",)),
        ("bitbucket-app-password", _B + r"ATBB[A-Za-z0-9]{32}" + _E, ("atbb",)),
        ("linear-key", _B + r"lin_(?:api|oauth)_[A-Za-z0-9]{40}" + _E, ("lin_",)),
        (
            "notion-token",
            _B + r"(?:ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43})" + _E,
            ("ntn_", "secret_"),
        ),
        ("postman-key", _B + r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}" + _E, ("pmak-",)),
        ("doppler-token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}", ("dp.",)),
        ("pulumi-token", _B + r"pul-[a-f0-9]{40}" + _E, ("pul-",)),
        (
            "grafana-token",
            _B + r"(?:glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
            ("glsa_", "glc_"),
        ),
        (
            "newrelic-key",
            _B + r"NR(?:AK|JS|II|AA)-[A-Z0-9]{19,32}" + _E,
            ("nrak-", "nrjs-", "nrii-", "nraa-"),
        ),
        ("sentry-token", _B + r"sntr[ysu]_[A-Za-z0-9+/=_\-]{40,}", ("sntr",)),
        ("databricks-token", _B + r"dapi[a-f0-9]{32}(?:-\d)?" + _E, ("dapi",)),
        ("docker-token", _B + r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,}", ("dckr_",)),
        ("supabase-token", _B + r"sb[pa]_[a-f0-9]{40}" + _E, ("sbp_", "sba_")),
        ("alibaba-access-key", _B + r"LTAI[A-Za-z0-9]{12,20}" + _E, ("ltai",)),
        ("tencent-secret-id", _B + r"AKID[A-Za-z0-9]{32,36}" + _E, ("akid",)),
        ("volcengine-access-key", _B + r"AKLT[A-Za-z0-9_\-]{40,}", ("aklt",)),
        ("mapbox-token", _B + r"sk\.eyJ[A-Za-z0-9_\-]{30,}\.[A-Za-z0-9_\-]{20,}", ("sk.eyj",)),
        ("facebook-token", _B + r"EAA[BCDG][A-Za-z0-9]{80,}" + _E, ("eaa",)),
        ("firebase-fcm-key", _B + r"AAAA[A-Za-z0-9_\-]{7}:APA91b[A-Za-z0-9_\-]{100,}", ("apa91b",)),
        ("baidu-qianfan-key", r"\bbce-v3/ALTAK-[A-Za-z0-9]{20,}/[a-f0-9]{40}", ("altak-",)),
        ("django-secret-key", r"django-insecure-[^\s'\"`]{30,}", ("django-insecure-",)),
        ("fly-token", r"\bFlyV1 fm\d_[A-Za-z0-9+/=_\-]{40,}", ("flyv1",)),
        ("netlify-token", _B + r"nfp_[A-Za-z0-9]{36,}", ("nfp_",)),
        ("render-key", _B + r"rnd_[A-Za-z0-9]{28,}", ("rnd_",)),
        ("buildkite-token", _B + r"bkua_[a-f0-9]{40}" + _E, ("bkua_",)),
        ("circleci-token", _B + r"CCIPAT_[A-Za-z0-9_]{30,}", ("ccipat_",)),
        ("jfrog-token", _B + r"cmVmdGtuOjAxOj[A-Za-z0-9]{40,}", ("cmvmdgtu",)),
        (
            "braintree-token",
            r"access_token\$production\$[0-9a-z]{16}\$[0-9a-f]{32}",
            ("$production$",),
        ),
        ("okta-token", r"\bSSWS\s+(00[A-Za-z0-9_\-]{40})", ("ssws",)),
        (
            "gcp-service-account",
            r"\"private_key\"\s*:\s*\"(-----BEGIN [A-Z ]*PRIVATE KEY-----)",
            ('"private_key"',),
        ),
        (
            "wireguard-private-key",
            r"(?im)^\s*PrivateKey\s*=\s*([A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=)",
            ("privatekey",),
        ),
        (
            "totp-seed",
            r"(?i)otpauth://[th]otp/[^\s?]*\?(?:[^\s#]*&)?secret=([A-Z2-7]{16,}=*)",
            ("otpauth://",),
        ),
    )
)


def _token_hits(note: _Note) -> Iterable[_Hit]:
    for rule_id, pattern, gate in _TOKEN_RULES:
        # Line-gated: only the lines holding a rule's prefix are searched (a token never spans
        # lines), which keeps seventy patterns cheap on a 1 MB note.
        for m, shift in note.find(pattern, gate, lines=rule_id != "gcp-service-account"):
            start, end, value = _secret_span(m)
            start, end = start + shift, end + shift
            if rule_id == "gcp-service-account":
                yield _Hit(start, end, rule_id, value, 0, '"private_key": "-----BEGIN…"')
            elif (_char_classes(value) >= 2 or rule_id == "totp-seed") and not _token_placeholder(
                value
            ):
                yield _Hit(start, end, rule_id, value, 0)


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


_WORD_AND_NUMBER_RE = re.compile(r"^\d*[A-Z]?[a-z]+\d*[a-z]*$|^[A-Z]+\d+$")


def _looks_like_password(value: str) -> bool:
    """A value that reads as a password even without a label: no spaces, letters and digits,
    and mixed case or a symbol; not a date, a version, a path, a URL or an algorithm name."""
    if not 6 <= len(value) <= 64 or any(c.isspace() for c in value) or _CJK_RE.search(value):
        return False
    if is_placeholder(value) or _HEX_RE.match(value) or _UUID_RE.match(value):
        return False
    if (
        re.match(r"^[\d\-./:$€£¥,]+$|^v?\d+(?:\.\d+)+", value)
        or "://" in value
        or "@" in value[1:-1]
    ):
        return False
    if value.startswith(("/", "~/", "./", "$", "%", "#")) or _CODE_EXPRESSION_RE.search(value):
        return False
    if _WORD_AND_NUMBER_RE.match(value):
        return False  # 1Password, Windows11, Argon2id: names with a number in them
    has_letter = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return has_letter and has_digit and _char_classes(value) >= 3


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


# --- secrets in running prose: a credential's name, a few words, the value --------------------

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


# --- passwords on command lines ------------------------------------------------------------

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


# --- high-entropy values in a secret assignment ----------------------------------------------

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
_KEY_SPLIT_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# A key names a secret when one of its words does (`TWILIO_AUTH_TOKEN`), or "key" does beside a
# word that makes it a credential (`STORAGE_ACCOUNT_KEY`, `ADMIN_API_KEY`). Matched on whole
# words, so ADMIN is not "min", ACCOUNT not "count" and SHARED not "sha".
_SECRET_WORDS = frozenset(
    "secret secrets token tokens password passwd pwd passphrase credential credentials creds auth "
    "apikey pat sig signature privatekey accesskey secretkey apitoken authtoken".split()
)
_KEY_PARTNERS = frozenset(
    "api app access private secret admin master signing encryption account storage service rest "
    "client server webhook sas shared root license write read deploy session cookie jwt hmac "
    "auth".split()
)
_STRONG_WORDS = _SECRET_WORDS - {"auth"}
_NOT_SECRET_WORDS = frozenset(
    "public pub id ids uuid guid hash hashes sha sha1 sha256 md5 digest checksum commit "
    "fingerprint "
    "version path file filename dir url uri endpoint host hostname name type size length len count "
    "max min limit ttl expiry expires expiration timeout header format algorithm alg issuer "
    "audience scope region author etag nonce field column ref prefix suffix placeholder example "
    "sample kid index mode policy rotation method provider store vault manager env publishable"
    " pk".split()
)


def _key_words(key: str) -> list[str]:
    return [w.lower() for w in _KEY_SPLIT_RE.findall(key)]


def _key_strength(key: str) -> int:
    """0: not a secret's name; 1: a secret's name; 2: the name of a credential for sure, under
    which even a hex string or a UUID is a secret (`TWILIO_AUTH_TOKEN`, `HEROKU_API_KEY`)."""
    words = _key_words(key)
    if not words or any(w in _NOT_SECRET_WORDS for w in words):
        return 0
    if any(w in _STRONG_WORDS for w in words):
        return 2
    if "key" in words and any(w in _KEY_PARTNERS for w in words if w != "key"):
        return 2
    if "auth" in words or words in (["key"],) or words[-1] == "key":
        return 1
    return 0


def _entropy_floor(value: str) -> float:
    # A string of n symbols cannot exceed log2(n) bits, so detect-secrets' flat 4.5 misses short
    # keys. Random tokens (even lowercase+digits) land above 0.75 of that ceiling; words and
    # identifiers joined by separators saturate near 4 bits, under the 4.2 cap.
    return min(4.2, 0.75 * math.log2(len(value)))


_DOTTED_NAME_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


def _is_secret_token(key: str, value: str) -> bool:
    """Is `value`, assigned to `key`, a secret? The key's strength sets how random it must be."""
    strength = _key_strength(key) if key.isascii() else 2
    if strength == 0 or len(value) < 16 or is_placeholder(value) or _token_placeholder(value):
        return False
    if _DOTTED_NAME_RE.match(value) or _is_wordy(value) or "://" in value:
        return False  # settings.SECRET_KEY, a class name, a URL: code or config, not a value
    if _HEX_RE.match(value) or _UUID_RE.match(value):
        # Hashes and ids are hex too: only a credential's full name (`TWILIO_AUTH_TOKEN`,
        # `client_secret`) makes one a key, a bare `token:` does not.
        named = len(_key_words(key)) >= 2 or key.isupper() or not key.isascii()
        return (
            strength == 2 and named and len(value.replace("-", "")) >= 20 and _entropy(value) > 3.0
        )
    if _char_classes(value) < 2:
        return False
    return _entropy(value) >= _entropy_floor(value) - (0.3 if strength == 2 else 0)


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


# --- secrets in a sensitive-named note: any `label: value` that reads as a password ----------

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
_KEBAB_RE = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)+$")
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


# --- secrets in other layouts: base64-wrapped, split over two lines -------------------------

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


# --- wallet seed phrases -------------------------------------------------------------------

_SEED_LABEL = (
    r"seed[ _\-]?phrase|seed words|mnemonic|recovery[ _\-](?:phrase|words|seed)|backup words"
    r"|secret[ _\-]recovery|助记词|助記詞|种子短语|種子短語|恢复短语|恢復短語|复原短语"
    r"|リカバリーフレーズ"
    r"|シードフレーズ|復元フレーズ|ニーモニック|복구\s?구문|시드\s?구문|니모닉|복구\s?문구|시드\s?문구"
)
_SEED_WORD_RUN = (
    r"((?:[a-z]{3,8}(?:[\s,、\"'`]{1,12}+(?:\d{1,2}[.)][ \t]{0,4}+)?)){11,23}[a-z]{3,8})"
)
_SEED_LABEL_RE = re.compile(r"(?i)" + _SEED_LABEL)
_SEED_TAIL_RE = re.compile(r"(?i)[^\n]{0,40}?[:：]?[\s\"'`]{0,12}+" + _SEED_WORD_RUN)
# A line of nothing but 12-24 lowercase words (a class run first: cheap on a 1 MB note).
_BARE_SEED_RE = re.compile(r"(?m)^[ \t`]*+([a-z][a-z ]{38,214}[a-z])[ \t`]*+$")
_NUMBERED_SEED_RE = re.compile(
    r"(?m)^[ \t]*1[.)][ \t]*[a-z]{3,8}[ \t]*\n"
    r"(?:[ \t]*\d{1,2}[.)][ \t]*[a-z]{3,8}[ \t]*(?:\n|$)){11,23}"
)
_STOPWORDS = frozenset(
    "the and for that this with are was you your not but from have has its can will all any "
    "one our out use how who why what when where which there their they them then than into "
    "also only just very".split()
)


_SEED_GATE = (
    "seed", "mnemonic", "recovery", "backup words", "助记词", "助記詞", "短语", "短語", "フレーズ",
    "ニーモニック", "구문", "니모닉", "문구",
)  # fmt: skip


def _seed_hits(note: _Note) -> Iterable[_Hit]:
    for label, shift in note.find(_SEED_LABEL_RE, _SEED_GATE, lines=True):
        m = _SEED_TAIL_RE.match(note.text, label.end() + shift)
        if m is None:
            continue
        words = re.findall(r"[a-zA-Z]+", m.group(1))
        if len(words) >= 12 and not any(w.lower() in _STOPWORDS for w in words):
            yield _Hit(m.start(1), m.end(1), "seed-phrase", m.group(1), 1)
    for m, _ in note.find(_BARE_SEED_RE):
        words = m.group(1).split(" ")
        if len(words) in (12, 15, 18, 21, 24) and not any(w in _STOPWORDS for w in words):
            if len(set(words)) == len(words) and all(3 <= len(w) <= 8 for w in words):
                yield _Hit(m.start(1), m.end(1), "seed-phrase", m.group(1), 1)
    if "12." not in note.text and "12)" not in note.text:
        return
    for m, _ in note.find(_NUMBERED_SEED_RE):
        words = re.findall(r"[a-z]{3,8}", m.group())
        if len(words) in (12, 15, 18, 21, 24) and not any(w in _STOPWORDS for w in words):
            yield _Hit(m.start(), m.end(), "seed-phrase", m.group(), 1)


# A run of words from one BIP-39 wordlist (the `mnemonic` package ships the ten published
# lists): twelve to twenty-four, separated by blanks, commas, hyphens, numbering or table
# pipes. It is a seed phrase when its checksum holds, or when it stands alone on its lines or
# the note speaks of wallets; a checksum alone is 4 bits for 12 words, so a run inside prose
# must be exactly a phrase long.
# Letters and the combining accents of decomposed text (BIP-39 phrases are NFKD: `ma\u0301quina`).
_SEED_TOKEN_RE = re.compile(r"(?:[^\W\d_]|[\u0300-\u036f]){1,16}+")
_SEED_GAP_RE = re.compile(r"[\s,;|/\-.()\[\]\"'`*•·、，:：#0-9]{1,24}")
_SEED_LENGTHS = (24, 21, 18, 15, 12)
_SEED_CONTEXT_GATE = _SEED_GATE + (
    "wallet", "ledger", "trezor", "metamask", "electrum", "phantom", "exodus", "bitcoin", "crypto",
    "钱包", "錢包", "ウォレット", "지갑", "cartera", "portefeuille", "frase", "phrase",
)  # fmt: skip


@functools.cache
def _bip39() -> tuple[dict[str, int], tuple[Any, ...]]:
    """Every BIP-39 word -> a bit per wordlist holding it; and the lists' checkers."""
    from mnemonic import Mnemonic

    langs = sorted(Mnemonic.list_languages())
    words: dict[str, int] = {}
    checkers = []
    for i, lang in enumerate(langs):
        m = Mnemonic(lang)
        checkers.append(m)
        for w in m.wordlist:
            key = unicodedata.normalize("NFKC", w).lower()
            words[key] = words.get(key, 0) | (1 << i)
    return words, tuple(checkers)


def _seed_run_hit(note: _Note, run: list[tuple[int, int, str]], mask: int) -> _Hit | None:
    if not note.spend():
        return None
    _, checkers = _bip39()
    langs = [c for i, c in enumerate(checkers) if mask >> i & 1]
    english = any(c.language == "english" for c in langs)
    words = [w for _, _, w in run]
    text = note.text
    # Alone on its lines: nothing but numbering and separators before and after it on them
    # (read over at most 64 characters each way: more than that is no phrase's margin).
    start, end = run[0][0], run[-1][1]
    first_line = text.rfind("\n", max(0, start - 64), start) + 1
    last_line = text.find("\n", end, end + 64)
    last_line = len(text) if last_line == -1 and len(text) - end <= 64 else last_line
    alone = (
        (first_line > 0 or start <= 64)
        and last_line != -1
        and not any(c.isalpha() for c in text[first_line:start] + text[end:last_line])
    )
    context = note.has(_SEED_CONTEXT_GATE)
    if len(words) > _SEED_LENGTHS[0] + 2:
        return None  # a list or a text of common words: a phrase is at most 24 words and a label
    for size in _SEED_LENGTHS:
        if size > len(words):
            continue
        offsets = (
            range(len(words) - size + 1) if alone or context else (0,) if size == len(words) else ()
        )
        for k in offsets:
            if not (alone or context) and len(set(words[k : k + size])) < size:
                continue  # inside prose, a phrase from 2,048 words repeats almost never
            phrase = " ".join(words[k : k + size])
            if any(c.check(phrase) for c in langs):
                return _Hit(run[k][0], run[k + size - 1][1], "seed-phrase", phrase, 1)
    if len(words) <= 25 and ((english and (alone or context)) or (alone and context)):
        return _Hit(run[0][0], run[-1][1], "seed-phrase", " ".join(words), 1)
    return None


def _bip39_hits(note: _Note) -> Iterable[_Hit]:
    """Seed phrases without a label, or in a layout the label rules do not read: one word a
    line, numbered grids, tables, hyphens, capitals, other languages' wordlists."""
    known, _ = _bip39()
    text = note.text
    run: list[tuple[int, int, str]] = []
    mask = 0
    for m in _SEED_TOKEN_RE.finditer(text):
        word = m.group().lower()
        bits = (
            known.get(word, 0)
            if word.isascii()
            else known.get(unicodedata.normalize("NFKC", word), 0)
        )
        if bits and run and bits & mask and _SEED_GAP_RE.fullmatch(text, run[-1][1], m.start()):
            gap = text[run[-1][1] : m.start()]
            if not gap.isdigit():
                run.append((m.start(), m.end(), word))
                mask &= bits
                continue
        if len(run) >= 12:
            hit = _seed_run_hit(note, run, mask)
            if hit is not None:
                yield hit
        run, mask = ([(m.start(), m.end(), word)], bits) if bits else ([], 0)
    if len(run) >= 12:
        hit = _seed_run_hit(note, run, mask)
        if hit is not None:
            yield hit


# Rules worth running on a decoded base64 value (a wrapped connection string or password).
_DECODED_RULES = (_url_hits, _password_hits, _token_hits)

_CONTENT_RULES = (
    _plugin_hits,
    _token_hits,
    _url_hits,
    _url_param_hits,
    _password_hits,
    _command_hits,
    _table_hits,
    _entropy_hits,
    _header_hits,
    _seed_hits,
    _bip39_hits,
    _label_line_hits,
    _prose_hits,
    _strict_hits,
    _base64_hits,
    _wrapped_hits,
)


# At most this many findings per note: it is quarantined by the first, the rest only help review.
MAX_FINDINGS = 1000


def _family(rule: Any) -> str:
    """`_password_hits` -> "password": the name budgets and the audit use for a rule family."""
    return str(rule.__name__).strip("_").removesuffix("_hits").replace("_", "-")


def _kept_hits(text: str, strict: bool, stats: ScanStats) -> list[tuple[int, int, _Hit]]:
    """Every rule's hits in `text` as (start, end, hit) spans of the text itself, one per
    secret (overlaps resolved by rule priority), in order."""
    note = _Note(text, strict, stats)
    hits: list[tuple[int, int, int, _Hit]] = []  # (priority, start, end) in the note's own text
    for rule in _CONTENT_RULES:
        note.rule = _family(rule)
        # A family stops at MAX_FINDINGS hits: no more can be reported, and a note made of
        # nothing but keywords (a megabyte of "password: key=") would otherwise spend the whole
        # candidate budget of every family.
        for n, hit in enumerate(rule(note), 1):
            start, end = note.source_span(hit.start, hit.end)
            hits.append((hit.priority, start, end, hit))
            if n >= MAX_FINDINGS:
                break
    hits.sort(key=lambda h: (h[0], h[1]))
    # One secret, one finding: a GitHub token is not also a "high-entropy secret", and a secret
    # seen in two overlapping windows of a long line is one secret. Kept spans never overlap,
    # so checking the neighbours of a span's place among them is enough.
    starts: list[int] = []
    kept: list[tuple[int, int, _Hit]] = []
    for _, start, end, hit in hits:
        i = bisect_right(starts, start)
        if i > 0 and kept[i - 1][1] > start:
            continue
        if i < len(kept) and kept[i][0] < end:
            continue
        starts.insert(i, start)
        kept.insert(i, (start, end, hit))
    return kept


def _content_findings(
    text: str, strict: bool = False, stats: ScanStats | None = None
) -> list[Finding]:
    stats = stats if stats is not None else ScanStats()
    if len(text) > SCAN_NOTE_CHARS:
        why = f"{len(text):,} characters; the scan stops at {SCAN_NOTE_CHARS:,}"
        stats.too_complex.append(("note", why))
        return [Finding(TOO_COMPLEX, "unscanned", 0, f"too complex to scan: {why}")]
    kept = _kept_hits(text, strict, stats)
    newlines = [m.start() for m in re.finditer("\n", text)] if kept or stats.too_complex else []
    out = [
        Finding(h.rule_id, "secret", bisect_right(newlines, start) + 1, h.preview or mask(h.value))
        for start, _, h in kept[:MAX_FINDINGS]
    ]
    for _, why in stats.too_complex:
        out.append(Finding(TOO_COMPLEX, "unscanned", 0, f"too complex to scan: {why}"))
    return out


@dataclass(frozen=True)
class Redacted:
    """Text with every secret the content rules find replaced by its mask."""

    text: str
    masked: int  # how many secrets were masked
    complete: bool  # False: part of the text was too complex to scan (it may hold more)


def redact(text: str) -> Redacted:
    """`text` with each secret the content rules find (strict: every rule, as for a file
    named like a secret) replaced by `[masked RULE]`, not one character of it kept: what may
    leave the machine in text sent to another program (`distill`'s excerpt to `claude -p`)."""
    stats = ScanStats()
    if len(text) > SCAN_NOTE_CHARS:
        return Redacted("", 0, False)
    kept = _kept_hits(text, True, stats)
    for start, end, hit in sorted(kept, key=lambda k: -k[0]):
        text = text[:start] + f"[masked {hit.rule_id}]" + text[end:]
    return Redacted(text, len(kept), not stats.too_complex)


# Rules whose hits are credentials beyond doubt (a private key, a vendor token with its own
# prefix): `audit allow` asks before indexing a note that has one.
HIGH_CONFIDENCE_RULES = frozenset(
    {rule_id for rule_id, _ in _PLUGINS if rule_id not in ("basic-auth-url", "jwt")}
    | {rule_id for rule_id, _, _ in _TOKEN_RULES}
    | {"private-key", "age-secret-key", "gcp-service-account", "token-in-path"}
)


def mask_path_tokens(path: str) -> str:
    """`ops/ghp_….md` with the token (or a password written into the name) masked: a path as
    `audit list` may print it."""
    note = _Note(path)
    hits = [h for rule in (_token_hits, _plugin_hits) for h in rule(note)]
    hits = [h for h in hits if h.rule_id in HIGH_CONFIDENCE_RULES]
    name_at = path.rfind("/") + 1
    for m in _PATH_PASSWORD_RE.finditer(path, name_at):
        if _looks_like_password(m.group("value")):
            hits.append(
                _Hit(m.start("value"), m.end("value"), "password-in-path", m.group("value"), 0)
            )
    for hit in sorted(hits, key=lambda h: -h.start):
        path = path[: hit.start] + mask(hit.value) + path[hit.end :]
    return path


def path_token_findings(path: str) -> list[Finding]:
    """A vendor token written into a file or folder name (`ops/ghp_….md`)."""
    note = _Note(path.replace("/", " / "))
    out = []
    for rule in (_token_hits, _plugin_hits):
        for hit in rule(note):
            if hit.rule_id in HIGH_CONFIDENCE_RULES:
                out.append(
                    Finding(
                        "token-in-path", "sensitive-path", 0, f"{hit.rule_id} {mask(hit.value)}"
                    )
                )
                return out
    return out


# ---------------------------------------------------------------------------------------------
# Explicit markers
# ---------------------------------------------------------------------------------------------

_TRUTHY = frozenset({"true", "yes", "y", "on", "1", "是", "是的", "對", "对", "はい", "예", "네"})
_PRIVATE_KEYS = frozenset(
    {"private", "secret", "sensitive", "confidential", "私密", "隐私", "隱私", "机密", "機密",
     "秘密", "非公開", "비공개", "privat", "privé", "privado", "privato"}
)  # fmt: skip
# Keys that name a level, and the levels that mean "keep it out" (Obsidian, Hugo and Jekyll
# users write `visibility`; document labels use `classification` / `sensitivity`).
_LEVEL_KEYS = frozenset(
    {"visibility", "access", "privacy", "classification", "sensitivity", "confidentiality"}
)
_PRIVATE_VISIBILITY = frozenset(
    {"private", "secret", "confidential", "internal-only", "restricted", "personal", "sensitive",
     "highly confidential", "strictly confidential", "top secret", "only me", "私密", "机密",
     "機密", "秘密", "非公開", "비공개"}
)  # fmt: skip


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


def _is_private_tag(tag: str, wanted: set[str]) -> bool:
    return tag in wanted or any(tag.startswith(w + "/") for w in wanted)


def _marker_findings(
    front_matter: Mapping[str, Any], tags: Iterable[str], private_tags: tuple[str, ...]
) -> list[Finding]:
    out: list[Finding] = []
    for key, value in front_matter.items():
        k = str(key).strip().lower()
        values = [v.strip().lower() for v in _as_strings(value)]
        if (k in _PRIVATE_KEYS and any(v in _TRUTHY for v in values)) or (
            k in _LEVEL_KEYS and any(v in _PRIVATE_VISIBILITY for v in values)
        ):
            out.append(Finding("front-matter-private", "private", 0, f"{key}: {value}"))
            break
    wanted = {_norm_tag(t) for t in private_tags if _norm_tag(t)}
    all_tags = [_norm_tag(t) for t in tags]
    for raw in _as_strings(front_matter.get("tags")) + _as_strings(front_matter.get("tag")):
        all_tags += [_norm_tag(t) for t in re.split(r"[,\s]+", raw) if t]
    for tag in all_tags:
        if _is_private_tag(tag, wanted):
            out.append(Finding("private-tag", "private", 0, f"#{tag}"))
            break
    return out


# The block read for markers: the first lines of the note, where front matter is, in whatever
# dialect (YAML `---`, TOML `+++`, JSON `{`), indented, after a blank line or a BOM.
_FM_LINE_LIMIT = 80
_FM_FENCES = {"---": ("---", "..."), "+++": ("+++",), "{": ("}",)}
_RAW_PRIVATE_RE = re.compile(
    r"(?im)^[ \t]*+[\"']?(?P<key>private|secret|sensitive|confidential|visibility|access|privacy"
    r"|classification|sensitivity|confidentiality|私密|隐私|隱私|机密|機密|秘密|非公開|비공개|privat"
    r"|privé|privado|privato)[\"']?[ \t]*+[:=：][ \t]*+[\"']?(?P<value>[^\"'#\n,}]{0,80})"
)
_RAW_TAGS_RE = re.compile(r"(?i)^[\"']?tags?[\"']?[ \t]*+[:=][ \t]*+(?P<items>.{0,400})")
_FALSY = frozenset({"false", "no", "n", "off", "0", "public", "", "否", "いいえ", "아니요"})


def _front_block(text: str) -> list[str] | None:
    """The lines of the note's front matter block (without its fences); None when the note
    opens with none."""
    head = text.split("\n", _FM_LINE_LIMIT + 8)[: _FM_LINE_LIMIT + 8]
    first = 0
    while first < min(len(head), 6) and not head[first].strip("\ufeff \t"):
        first += 1
    if first >= len(head):
        return None
    opening = head[first].strip("\ufeff \t")
    fences = _FM_FENCES.get(opening)
    if fences is None:
        return None
    block: list[str] = []
    for line in head[first + 1 : first + 1 + _FM_LINE_LIMIT]:
        if line.strip() in fences:
            return block
        block.append(line)
    return None


def _raw_marker_findings(text: str, private_tags: tuple[str, ...], parsed: bool) -> list[Finding]:
    """Markers read from the front matter block's lines themselves, so that none is lost to the
    parser: a block it could not read (a tab, an open quote), a dialect it does not read (TOML
    `+++`, JSON), a block indented or after a blank line, a key given twice (the parser keeps
    the last), a flag nested under another key. `parsed`: the parser read this block, so a
    flag must say yes (`private: true`); otherwise any value but a no counts (fail closed)."""
    block = _front_block(text)
    if block is None:
        return []
    raw = "\n".join(block)
    found = None
    for m in _RAW_PRIVATE_RE.finditer(raw):
        key, value = m.group("key").lower(), m.group("value").strip().strip("\"' ").lower()
        if key in _LEVEL_KEYS:
            if value in _PRIVATE_VISIBILITY:
                found = f"{key}: {value}"
        elif value in _TRUTHY or (not parsed and value not in _FALSY):
            found = f"{key}: …"
        if found:
            break
    if found is None:
        wanted = {_norm_tag(t) for t in private_tags if _norm_tag(t)}
        in_tags = False
        for line in block:
            stripped = line.strip()
            tags = _RAW_TAGS_RE.match(stripped)
            head, colon, _ = stripped.partition(":")
            if tags:
                in_tags, items = True, tags.group("items")
            elif colon and not stripped.startswith("-"):
                in_tags = False
                continue
            elif stripped.startswith("-") and in_tags:
                items = stripped[1:]
            else:
                continue
            for item in re.split(r"[\s,\[\]\"']+", items):
                tag = _norm_tag(item)
                if tag and _is_private_tag(tag, wanted):
                    found = f"#{tag}"
                    break
            if found:
                break
    if found is None:
        return []
    rule = "front-matter-private" if parsed else "malformed-front-matter-private"
    what = f"front matter: {found}" if parsed else f"unparsed front matter: {found}"
    return [Finding(rule, "private", 0, what)]


def _front_matter_secret_findings(front_matter: Mapping[str, Any], seen: set[str]) -> list[Finding]:
    """Safety net for callers that scan only the body: check `key: value` pairs themselves."""
    # One scan of every pair, one per line: bounded like a note, however many keys there are.
    pairs = "\n".join(
        f"{key}: {v}" for key, value in front_matter.items() for v in _as_strings(value)
    )
    out: list[Finding] = []
    for f in _content_findings(pairs) if pairs else ():
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
        "パスワード",
        "비밀번호",
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
        stats: ScanStats | None = None,
    ) -> list[Finding]:
        """Every reason `path` must not be indexed; empty means index it.

        Path findings first (line 0), then explicit markers (line 0), then content findings in
        text order. `text` is the whole note (front matter included, so line numbers match the
        file); front matter values are checked again on their own in case the caller passes only
        the body. A name with a sensitive keyword makes the content scan strict. `stats`, when
        given, receives what the content scan handed its regexes (see `ScanStats`).

        The work is bounded (SCAN_LINE_CHARS, SCAN_NOTE_CHARS, RULE_CANDIDATES): a note the
        scan cannot finish within its bounds gets a `too-complex-to-scan` finding, so it is
        quarantined rather than indexed unscanned.
        """
        front_matter = front_matter or {}
        findings = _path_findings(path)
        findings += _marker_findings(front_matter, tags, self.private_tags)
        if not any(f.category == "private" for f in findings):
            findings += _raw_marker_findings(text, self.private_tags, parsed=bool(front_matter))
        content = _content_findings(
            text, strict=_name_has_keyword(path, self.name_keywords), stats=stats
        )
        findings += content
        findings += _front_matter_secret_findings(front_matter, {f.masked for f in content})
        return findings
