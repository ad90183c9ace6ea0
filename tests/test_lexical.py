"""lexical: tokens for PostgreSQL 'simple' full-text search, with CJK bigrams."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vaultmem.index.lexical import MAX_TOKEN_CHARS, lexeme_text, query_tokens, tokens, words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Hello, World!", ["hello", "world"], id="ascii"),
        pytest.param("Café naïve Ångström", ["café", "naïve", "ångström"], id="latin-accents"),
        pytest.param("cafe\u0301", ["café"], id="decomposed-accent-composed"),
        pytest.param("Straße STRASSE", ["strasse", "strasse"], id="casefold"),
        pytest.param("ＦＵＬＬ ｗｉｄｔｈ １２３", ["full", "width", "123"], id="fullwidth"),
        pytest.param(
            "snake_case kebab-case a.b/c",
            ["snake", "case", "kebab", "case", "a", "b", "c"],
            id="separators",
        ),  # noqa: E501
        pytest.param(
            "v1.2.3 2024-10-24 42", ["v1", "2", "3", "2024", "10", "24", "42"], id="numbers"
        ),  # noqa: E501
        pytest.param("Привет мир Ελληνικά", ["привет", "мир", "ελληνικά"], id="cyrillic-greek"),
        pytest.param("東京都", ["東京", "京都"], id="han-bigrams"),
        pytest.param("日", ["日"], id="lone-han-unigram"),
        pytest.param("ひらがな", ["ひら", "らが", "がな"], id="hiragana"),
        pytest.param("カタカナー", ["カタ", "タカ", "カナ", "ナー"], id="katakana"),
        pytest.param("ｶﾀｶﾅ", ["カタ", "タカ", "カナ"], id="halfwidth-katakana"),
        pytest.param("한국어 사전", ["한국", "국어", "사전"], id="hangul"),
        pytest.param("我爱Python编程", ["我爱", "python", "编程"], id="mixed-script"),
        pytest.param("2024年3月", ["2024", "年", "3", "月"], id="digits-split-cjk"),
        pytest.param("中文，标点。", ["中文", "标点"], id="cjk-punctuation-breaks-runs"),
        pytest.param("𠀋𠀌", ["𠀋𠀌"], id="cjk-extension-b"),
        pytest.param("emoji 🚀 ok", ["emoji", "ok"], id="emoji-dropped"),
        pytest.param("", [], id="empty"),
        pytest.param("!!! ... ___", [], id="punctuation-only"),
        pytest.param("a a a", ["a", "a", "a"], id="duplicates-kept"),
    ],
)
def test_words(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "Mutations mutated mutation", ["mutat", "mutat", "mutat"], id="word-forms-meet"
        ),
        pytest.param("Studies studying STUDIED", ["studi", "studi", "studi"], id="case-first"),
        pytest.param("k8s v1 2024 café", ["k8s", "v1", "2024", "café"], id="digits-non-ascii-kept"),
        pytest.param("部署 deployments", ["部署", "deploy"], id="cjk-untouched"),
    ],
)
def test_tokens_stem_plain_ascii_words(text: str, expected: list[str]) -> None:
    assert tokens(text) == expected


def test_lexeme_text_joins_tokens_with_spaces() -> None:
    assert lexeme_text("Hello 東京都 runs!") == "hello 東京 京都 run"


def test_query_tokens_use_the_same_tokenisation_deduplicated() -> None:
    assert query_tokens("Deploy deploys 東京 東京 staging") == ["deploy", "東京", "stage"]
    text = "Notes about 東京都 and DEPLOY scripts"
    assert set(query_tokens(text)) == set(tokens(text))


def test_query_tokens_drop_words_before_stemming() -> None:
    # "does" stems to "doe": a stop list of surface words must be applied first.
    assert query_tokens("does it regulate", drop=frozenset({"does", "it"})) == ["regul"]


def test_overlong_tokens_are_dropped() -> None:
    blob = "A" * (MAX_TOKEN_CHARS + 1)
    assert words(f"keep {blob} this {'b' * MAX_TOKEN_CHARS}") == ["keep", "this", "b" * 128]


@given(st.text())
def test_tokens_are_word_characters_only(text: str) -> None:
    for token in tokens(text):
        assert re.fullmatch(r"[^\W_]+", token), token
        assert token == token.casefold() or not token.isascii()
        assert len(token) <= MAX_TOKEN_CHARS
    assert " " not in "".join(tokens(text))


@given(st.text())
def test_lexeme_text_round_trips_through_split(text: str) -> None:
    assert lexeme_text(text).split(" ") == tokens(text) or tokens(text) == []


def test_punctuation_inside_cjk_blocks_breaks_runs() -> None:
    assert tokens("カタ・カナ") == ["カタ", "カナ"]
