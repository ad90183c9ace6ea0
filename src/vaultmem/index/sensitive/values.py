"""Judgements of one candidate value, shared by the rule families: is it a placeholder, a code
name, a documented stand-in, random enough to be a key, shaped like a password?

Design decision: the generic rules (passwords, high entropy, tables, prose) would quarantine
half of a programmer's notes without these guards, and a quarantined note is a note the user
cannot search; so every family asks the same questions here, and a change to one guard is read
next to every family that imports it (grep its name).
"""

from __future__ import annotations

import base64
import math
import re

from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

from ...text import WIDE_CHAR_RE, WIDE_CLASS

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


# `my-app.service`, `release-2024_q3`: a lowercase name in pieces, not a password.
_KEBAB_RE = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)+$")
