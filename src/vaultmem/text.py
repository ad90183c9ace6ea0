"""Which characters are Chinese, Japanese or Korean: one definition for the whole package.

The tokeniser (bigrams for CJK runs), prompt analysis (a prompt's script), the sensitive-content
rules (where a value written in prose ends) and the hash embedder all ask the same question.
"""

from __future__ import annotations

import re

__all__ = ["CJK_CLASS", "WIDE_CLASS", "CJK_RE", "CJK_RUN_RE", "WIDE_CHAR_RE", "is_cjk"]

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
