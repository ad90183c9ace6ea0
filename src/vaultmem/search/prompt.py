"""Prompt analysis: what a prompt asks for, before anything is searched.

Whether a prompt asks for anything at all (`is_content_free`: "ok continue", "好的繼續" search
nothing), its full-text terms (`search_terms`: CJK-aware tokens from `index.lexical`, stop
words left out), the script it is written in (`script_of`, for cross-language fusion and the
gate's per-language noise ceilings) and the tsquery text that quotes terms safely.

Design decisions: the content-free check is the first decision every search path takes, and
the hook takes it before it opens the database or loads a model; `Prompt` carries that decision
with the text, so the search it then runs does not repeat it. Only a prompt's first
MAX_PROMPT_CHARS (one embedding window) are analysed, embedded and searched: the work per
prompt is bounded whatever was pasted (a 5 MB prompt kept the regular expressions busy for
seconds, past the hook's time limit, and a question is asked in far fewer characters).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import store
from ..index.lexical import STEMMER, query_tokens
from ..text import CJK_RE as _CJK_RE
from ..text import CJK_RUN_RE as _CJK_RUN_RE
from ..text import WIDE_CHAR_RE, WIDE_CHAR_WEIGHT, text_size

if TYPE_CHECKING:
    from ..store.db import Conn

# Words that carry no topic. Queries keep them for the embedder but not for full-text search
# (the simple configuration has no stop list, and an OR over "the" matches every note).
STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers him his how i if in into is it its itself just me more
    most my myself no nor not now of off on once only or other our ours out over own same she
    should so some such than that the their theirs them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with
    would you your yours s t don
    的 了 是 在 我 你 他 她 它 们 吗 嗎 呢 吧 啊 呀 哦 喔 嗯 和 与 與 就 都 也 还 還 么 麼
    怎么 怎麼 什么 什麼 如何 为什 為什 我的 你的 一下 一个 一個 可以
    请问 請問 这个 這個 那个 那個""".split()
)

# Whole prompts (after normalisation) that ask for nothing: acknowledgements and "go on".
# Filler phrases, "|"-separated; what is left of a prompt after removing them is what counts.
_FILLER_PHRASES = sorted(
    set(
        """ok|okay|k|kk|yes|yep|yeah|yup|y|no|nope|n|sure|thanks|thank you|thx|ty|cool|nice|
        great|good|fine|right|got it|go on|go ahead|continue|proceed|next|keep going|carry on|
        do it|done|please|pls|lgtm|sounds good|perfect|agreed|alright|all right|hi|hello|hey|
        hmm|ah|oh|and|then|again|retry|try again|more|and then|what next|stop|wait|resume|
        correct|好|好的|好吧|好啊|可以|行|嗯|嗯嗯|对|對|是|是的|继续|繼續|谢谢|謝謝|感谢|感謝|
        多谢|多謝|没问题|沒問題|收到|明白|了解|知道了|继续吧|繼續吧|然后|然後|下一步|开始|開始|
        请|請|再来|再來|重试|重試|加油|好了|はい|ありがとう|続けて|네|감사합니다|계속""".replace(
            "\n", ""
        )
        .replace(" " * 8, "")
        .split("|")
    ),
    key=len,
    reverse=True,
)
_FILLER_RE = re.compile(
    "|".join(
        (r"\b" + re.escape(p) + r"\b") if p.isascii() else re.escape(p) for p in _FILLER_PHRASES
    )
)
_LATIN_WORD_RE = re.compile(r"[^\W\d_]+")
# Letters of the Latin script, accented ones included (French, German, Vietnamese...).
_LATIN_LETTERS_RE = re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]+")
_ALNUM_RE = re.compile(r"[^\W_]+")


# The prefix of a prompt that is analysed and searched, in text.text_size's units (a CJK
# character counts three): one chunk's worth, so one embedding window in any script. A longer
# prompt is a paste around a question; embedding more windows of it would cost the hook (and
# every prompt the warm service answers meanwhile) for no better notes.
MAX_PROMPT_CHARS = 1500


def bounded(text: str) -> str:
    """The part of a prompt that is analysed and searched: its longest prefix of at most
    MAX_PROMPT_CHARS units (characters; a CJK one counts three)."""
    cut = text[:MAX_PROMPT_CHARS]
    if cut.isascii() or text_size(cut) <= MAX_PROMPT_CHARS:
        return cut
    size = 0
    for i, ch in enumerate(cut):
        size += WIDE_CHAR_WEIGHT if WIDE_CHAR_RE.match(ch) else 1
        if size > MAX_PROMPT_CHARS:
            return cut[:i]
    return cut


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def is_content_free(prompt: str) -> bool:
    """True for prompts with nothing to search for: acknowledgements, "go on", emoji, "?".

    Filler phrases ("ok", "continue", "好的", "繼續"...) and stop words are removed; what is left
    must hold a word of 2+ letters or digits ("k8s", "42") or 2+ CJK characters. Decided on
    the prompt's first MAX_PROMPT_CHARS characters (`bounded`).
    """
    text = _FILLER_RE.sub(" ", _norm(bounded(prompt)))
    for word in _ALNUM_RE.findall(text):
        if not _CJK_RE.search(word) and len(word) >= 2 and word not in STOPWORDS:
            return False
    cjk = [c for c in _CJK_RE.findall(text) if c not in STOPWORDS]
    return len(cjk) < 2


def search_terms(query: str, *, stem: bool = True) -> list[str]:
    """The query's full-text terms: its search tokens, stop words left out."""
    return query_tokens(query, drop=STOPWORDS, stem=stem)


def index_is_stemmed(conn: Conn, vault_id: int) -> bool:
    """False for an index written before search tokens were stemmed (its chunker signature does
    not name the stemmer) and not yet re-chunked: until its next run does that, it holds surface
    words, and a stemmed query ("mutat") would miss every one of them ("mutations")."""
    st = store.state(conn, vault_id)
    return st.watermark is None or STEMMER in (st.chunker or "")


def script_of(text: str) -> str | None:
    """'cjk', 'latin' or 'alpha' (another alphabet: Cyrillic, Greek, Arabic, Hebrew,
    Devanagari...) by which has the most word units (a CJK character ~ a word); None if the
    text has no letters."""
    return _script_of_sample(text[:600])


# It runs on every candidate of every query; a long-lived process (the warm service, MCP) sees
# the same chunks again and again, and 600 characters hash far faster than they are scanned.
@functools.lru_cache(maxsize=4096)
def _script_of_sample(sample: str) -> str | None:
    cjk = sum(map(len, _CJK_RUN_RE.findall(sample)))
    latin = alpha = 0
    for w in _LATIN_WORD_RE.findall(sample):
        if w.isascii() or _LATIN_LETTERS_RE.fullmatch(w):  # isascii first: cheap, and common
            latin += 1
        elif not _CJK_RE.search(w) and not _LATIN_LETTERS_RE.search(w):
            alpha += 1
    if cjk == 0 and latin == 0 and alpha == 0:
        return None
    if alpha >= latin and alpha > cjk / 1.5:  # ties: the prose, not its commands and names
        return "alpha"
    return "cjk" if cjk / 1.5 >= latin else "latin"


def tsquery_text(terms: Sequence[str]) -> str:
    """An OR tsquery of `terms`, each quoted so no character can act as a tsquery operator."""
    quoted = []
    for t in terms:
        quoted.append("'" + t.replace("\\", "\\\\").replace("'", "''") + "'")
    return " | ".join(quoted)


@dataclass(frozen=True)
class Prompt:
    """A prompt's text (its first MAX_PROMPT_CHARS: what is embedded and searched) with the
    content-free decision taken on it (`Prompt.of`), once."""

    text: str
    content_free: bool

    @classmethod
    def of(cls, text: str) -> Prompt:
        text = bounded(text)
        return cls(text, is_content_free(text))

    @classmethod
    def coerce(cls, prompt: str | Prompt) -> Prompt:
        """`prompt` as a Prompt: a Prompt as it is (its decision already taken), a string
        analysed now."""
        return prompt if isinstance(prompt, Prompt) else cls.of(prompt)
