"""Wallet seed phrases: twelve to twenty-four words after a label (`seed phrase:`, `助记词`),
alone on a line, in a numbered grid, or as a run of words from one BIP-39 wordlist.

Design decision: a run of wordlist words is a phrase when its checksum holds, or when it stands
alone on its lines or the note speaks of wallets; a checksum alone is 4 bits for 12 words, so a
run inside prose must be exactly a phrase long. The ten wordlists are loaded once, on first use.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

from .note import _Hit, _Note

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
