"""What a file's path says: a folder or a file that holds secrets by nature, a token or a
password written into a name, a keyword that makes the content scan strict.

Design decision: a file or folder secret by nature (`.env*`, `.netrc`, `credentials*`,
`secrets/`, `私密/`) is quarantined whatever it holds; a keyword in a name (`passwords.md`,
`密码.md`) only makes the content scan stricter, so notes *about* passwords or cryptography stay
searchable.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from ..findings import Finding, mask
from .note import _Hit, _Note
from .tokens import HIGH_CONFIDENCE_RULES, _plugin_hits, _token_hits
from .values import _looks_like_password

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
