"""Which characters are Chinese, Japanese or Korean: one definition for the whole package.

The tokeniser (bigrams for CJK runs), prompt analysis (a prompt's script), the sensitive-content
rules (where a value written in prose ends) and the hash embedder all ask the same question.
"""

from __future__ import annotations

import re

__all__ = [
    "CJK_CLASS",
    "WIDE_CLASS",
    "CJK_RE",
    "CJK_RUN_RE",
    "WIDE_CHAR_RE",
    "WIDE_CHAR_WEIGHT",
    "is_cjk",
    "text_size",
]

# A regex character class body (no brackets): the scripts written without spaces between words.
CJK_CLASS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005\u3007"  # 々 iteration mark, 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (incl. ー)
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\u31f0-\u31ff"  # Katakana Phonetic Extensions
    "\u3400-\u4dbf"  # CJK Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\ua960-\ua97f"  # Hangul Jamo Extended-A
    "\uac00-\ud7af"  # Hangul Syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo Extended-B
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff66-\uff9f"  # Halfwidth Katakana (NFKC maps most to full width)
    "\U00020000-\U0003ffff"  # CJK Extensions B-H, Compatibility Supplement
)
# CJK plus full-width punctuation ("，", "。", "　"): text that takes two columns.
WIDE_CLASS = CJK_CLASS + "\u3000-\u303f\uff00-\uffef"

CJK_RE = re.compile(f"[{CJK_CLASS}]")
# Runs, not characters: far fewer matches when only the runs matter.
CJK_RUN_RE = re.compile(f"[{CJK_CLASS}]+")
WIDE_CHAR_RE = re.compile(f"[{WIDE_CLASS}]")


def is_cjk(ch: str) -> bool:
    """True for one CJK character (see CJK_CLASS)."""
    return CJK_RE.match(ch) is not None


# Text is sized for the embedder, whose window is counted in tokens: with multilingual-e5's
# tokenizer English runs about four characters per token and Chinese about 1.3 (punctuation
# included), so a CJK character counts three times. Measured on SciFact and CMRC text, tokens
# per unit stay below 0.33, so 1,500 units (the default chunk budget, and what a prompt is
# searched on) fit e5's 512-token window in either script. Not so for code and symbol-dense
# text (JSON, number tables, hashes: 0.3-0.6 tokens per unit, bench/chunk_window.py).
WIDE_CHAR_WEIGHT = 3


def text_size(text: str) -> int:
    """`text`'s size in the units of VAULTMEM_MAX_CHUNK_CHARS (a CJK character counts 3)."""
    if text.isascii():
        return len(text)
    return len(text) + (WIDE_CHAR_WEIGHT - 1) * len(WIDE_CHAR_RE.findall(text))
