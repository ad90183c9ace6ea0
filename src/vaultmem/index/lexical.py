"""Text -> search tokens for PostgreSQL full-text search with the 'simple' configuration.

Design decision: tokenisation happens here, in Python, for notes and queries alike, and the
database only ever sees space-separated tokens made of letters and digits. PostgreSQL's parser
cannot segment Chinese or Japanese (it would index a whole sentence as one "word"), so runs of
Han, Hiragana, Katakana and Hangul become overlapping character bigrams ("東京都" -> "東京",
"京都"), the standard approach for CJK search without a dictionary; a lone CJK character stays
a unigram. Everything else is split into runs of letters/digits after NFKC normalisation and
case folding ("Ｆｕｌｌ-width" -> "full", "width"; "snake_case" -> "snake", "case", as
PostgreSQL itself splits on '_'). Plain ASCII words are then reduced to their English Snowball
stem ("mutations" -> "mutat", "regulated" -> "regul"), so a question's word forms meet the note's;
on SciFact (5,183 abstracts) this lifted lexical nDCG@10 from 0.655 to 0.692 and hybrid from
0.693 to 0.726 (the ungated ranking, measured with the quality bench that bench/relevance.py
replaced). Words with digits or non-ASCII letters are left as they are: the English rules would
only mangle them.

Known limitations: combining marks are not word characters, so scripts that rely on them
(Devanagari, Thai, ...) split inside words; and ASCII words of other languages get English
stems ("strasse" -> "strass"). Notes and queries are tokenised the same way, so matching still
works, only less precisely.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import unicodedata

import Stemmer  # PyStemmer: the Snowball project's C stemmers

from .. import text
from ..text import CJK_CLASS

# Longer "words" (base64, minified blobs) are noise, and PostgreSQL refuses lexemes over 2 KB.
MAX_TOKEN_CHARS = 128

# re.split needs the run as a capturing group (text.CJK_RUN_RE has none).
_CJK_RUN_RE = re.compile(f"([{CJK_CLASS}]+)")
# One Chinese, Japanese or Korean character or full-width punctuation mark ("，", "。"):
# what markdown.text_size weighs more.
WIDE_CHAR_RE = text.WIDE_CHAR_RE
_WORD_RE = re.compile(r"[^\W_]+")
_ASCII_LETTERS_RE = re.compile(r"[a-z]+")
# PyStemmer rather than the pure-Python snowballstemmer: same rules, ~1 ms to import instead of
# ~13 ms (the per-prompt hook is a cold process) and ~20x faster per word.
_ENGLISH = Stemmer.Stemmer("english")
# Part of markdown.chunker_signature: a stemmer release that stems differently must re-index,
# or notes and queries would stop meeting on the same tokens.
STEMMER = "snowball-english"
TOKENISER_ID = f"{STEMMER}-{importlib.metadata.version('pystemmer')}"


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    # Cached: a vault reuses a few thousand words over and over.
    return _ENGLISH.stemWord(word) if _ASCII_LETTERS_RE.fullmatch(word) else word


def _normalise(text: str) -> str:
    if text.isascii():
        return text.lower()
    # NFKC before case folding too: it can produce capitals ("ℌ" -> "H").
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def words(text: str) -> list[str]:
    """The normalised words of `text` (CJK as bigrams), in order, before stemming."""
    out: list[str] = []
    # re.split with a capturing group alternates: non-CJK text, CJK run, non-CJK text, ...
    for i, part in enumerate(_CJK_RUN_RE.split(_normalise(text))):
        if not part:
            continue
        if i % 2:
            # The CJK blocks also hold punctuation ("・") and unassigned code points.
            for run in _WORD_RE.findall(part):
                out.extend(_cjk_grams(run))
        else:
            out.extend(w for w in _WORD_RE.findall(part) if len(w) <= MAX_TOKEN_CHARS)
    return out


def matched_words(text: str, terms: frozenset[str] | set[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The words of `text` that hold search `terms`, as `text` spells them (ASCII text; other
    text as normalised), each with the terms it holds, in order, once each: a Latin word whose
    token is a term, and in a CJK run each longest stretch whose bigrams are all terms
    ("支付故障" when "支付", "付故" and "故障" are; "支付" and "故障" apart when "付故" is
    not). What a reader shows as "the words it shares": never more than really matched."""
    out: dict[str, tuple[str, ...]] = {}
    # ASCII text normalises to its lower case, character for character: its words are shown
    # as the text spells them.
    spelled = text if text.isascii() else None
    at = 0
    for i, part in enumerate(_CJK_RUN_RE.split(_normalise(text))):
        offset, at = at, at + len(part)
        if not part:
            continue
        if i % 2 == 0:
            for m in _WORD_RE.finditer(part):
                w = m.group()
                if len(w) <= MAX_TOKEN_CHARS and _stem(w) in terms:
                    shown = spelled[offset + m.start() : offset + m.end()] if spelled else w
                    out.setdefault(shown, (_stem(w),))
            continue
        for run in _WORD_RE.findall(part):
            grams = _cjk_grams(run)
            start = None
            for j, gram in enumerate([*grams, None]):
                if gram is not None and gram in terms:
                    start = j if start is None else start
                    continue
                if start is not None:
                    # grams start..j-1 matched: the run's characters start..j (a lone
                    # character is its own gram)
                    shown = run[start : j + 1] if len(run) > 1 else run
                    out.setdefault(shown, tuple(grams[start:j]))
                    start = None
    return list(out.items())


def tokens(text: str) -> list[str]:
    """Search tokens of `text`, in order, duplicates kept (they weight the tsvector)."""
    return [_stem(w) for w in words(text)]


def lexeme_text(text: str) -> str:
    """Space-separated tokens of `text`, to store via to_tsvector('simple', ...)."""
    return " ".join(tokens(text))


def query_tokens(text: str, drop: frozenset[str] = frozenset(), *, stem: bool = True) -> list[str]:
    """Tokens of a search query: the same tokenisation as for notes, deduplicated, in order,
    leaving out the words in `drop` (compared before stemming: "does" stems to "doe").
    `stem=False` gives the unstemmed words, for an index written before stemming."""
    kept = (w for w in words(text) if w not in drop)
    return list(dict.fromkeys(_stem(w) for w in kept) if stem else dict.fromkeys(kept))
