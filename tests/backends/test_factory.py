"""Choosing the provider and the key (``choose_provider``) and building the backends."""

from __future__ import annotations

import pytest

from image_project.backends.base import ImageRequest, Message, TextRequest
from image_project.backends.factory import (
    PLACEHOLDER_KEY,
    ProviderChoice,
    choose_provider,
    make_backends,
)
from image_project.backends.offline.image import OfflineImageBackend
from image_project.backends.offline.text import OfflineTextBackend
from image_project.backends.openai_backend import OpenAIImageBackend, OpenAITextBackend
from image_project.config.models import AppConfig, BackendConfig
from image_project.errors import AuthenticationError
from tests.support.openai_server import OpenAIServer

LOCAL = "http://127.0.0.1:11434/v1"


def cfg(**backend: object) -> AppConfig:
    return AppConfig.model_validate({"backend": backend})


def backend(**fields: object) -> BackendConfig:
    return cfg(**fields).backend


# --------------------------------------------------------------------------- choose_provider


@pytest.mark.parametrize(
    ("provider", "env", "expected"),
    [
        ("auto", {}, "offline"),
        ("auto", {"OPENAI_API_KEY": ""}, "offline"),
        ("auto", {"OPENAI_API_KEY": "   "}, "offline"),
        ("auto", {"OPENAI_API_KEY": "k"}, "openai"),
        ("offline", {"OPENAI_API_KEY": "k"}, "offline"),
        ("offline", {}, "offline"),
        ("openai", {"OPENAI_API_KEY": "k"}, "openai"),
    ],
)
def test_provider_is_chosen_per_env(provider: str, env: dict[str, str], expected: str) -> None:
    assert choose_provider(backend(provider=provider), env).provider == expected


def test_auto_provider_uses_a_configured_local_server_without_a_key() -> None:
    choice = choose_provider(backend(base_url=LOCAL), {})
    assert choice == ProviderChoice("openai", PLACEHOLDER_KEY, f"backend.base_url is {LOCAL}")
    assert choice.key_set is False


def test_auto_provider_follows_the_configured_env_var_name() -> None:
    b = backend(api_key_env="MY_KEY")
    assert choose_provider(b, {"OPENAI_API_KEY": "k"}).provider == "offline"
    assert choose_provider(b, {"MY_KEY": "k"}).provider == "openai"


def test_auto_without_key_or_base_url_is_offline_and_says_why() -> None:
    choice = choose_provider(backend(), {"OTHER": "x"})
    assert (choice.provider, choice.api_key, choice.key_set) == ("offline", None, False)
    assert "$OPENAI_API_KEY" in choice.why and "backend.base_url" in choice.why


def test_auto_with_a_key_is_openai_with_that_key() -> None:
    choice = choose_provider(backend(), {"OPENAI_API_KEY": "  sk-test  "})
    assert (choice.provider, choice.api_key, choice.key_set) == ("openai", "sk-test", True)
    assert "$OPENAI_API_KEY is set" in choice.why
    assert "sk-test" not in choice.why


def test_a_key_wins_over_the_placeholder_with_a_local_server() -> None:
    choice = choose_provider(backend(base_url=LOCAL), {"OPENAI_API_KEY": "sk-local"})
    assert (choice.provider, choice.api_key, choice.key_set) == ("openai", "sk-local", True)


def test_explicit_offline_without_a_key() -> None:
    choice = choose_provider(backend(provider="offline"), {})
    assert choice == ProviderChoice("offline", None, "backend.provider is offline", False)


def test_explicit_offline_with_a_key_says_it_is_not_used() -> None:
    choice = choose_provider(backend(provider="offline"), {"OPENAI_API_KEY": "sk-secret-1"})
    assert (choice.provider, choice.api_key, choice.key_set) == ("offline", None, True)
    assert "$OPENAI_API_KEY is set but not used" in choice.why
    assert "sk-secret-1" not in choice.why


@pytest.mark.parametrize("env", [{"OTHER": "x"}, {"IMG_OPENAI_KEY": "  "}, {"OPENAI_API_KEY": "k"}])
def test_explicit_openai_without_key_or_base_url_names_the_env_var(env: dict[str, str]) -> None:
    with pytest.raises(AuthenticationError) as info:
        choose_provider(backend(provider="openai", api_key_env="IMG_OPENAI_KEY"), env)
    assert "IMG_OPENAI_KEY" in str(info.value)
    assert info.value.attempts == 0


def test_explicit_openai_with_a_local_server_needs_no_key() -> None:
    choice = choose_provider(backend(provider="openai", base_url=LOCAL), {})
    assert (choice.provider, choice.api_key) == ("openai", PLACEHOLDER_KEY)


# --------------------------------------------------------------------------- make_backends


def test_auto_without_key_is_offline_and_says_so() -> None:
    backends = make_backends(cfg(), {})
    assert backends.provider == "offline"
    assert isinstance(backends.text, OfflineTextBackend)
    assert isinstance(backends.image, OfflineImageBackend)
    assert "OFFLINE" in backends.description and "$OPENAI_API_KEY" in backends.description
    assert "Set $OPENAI_API_KEY for real models" in backends.description


def test_auto_with_key_is_openai() -> None:
    backends = make_backends(cfg(text_model="m1"), {"OPENAI_API_KEY": "sk-test"})
    assert backends.provider == "openai"
    assert isinstance(backends.text, OpenAITextBackend)
    assert isinstance(backends.image, OpenAIImageBackend)
    assert backends.text.default_model == "m1"
    assert "api.openai.com" in backends.description
    assert "sk-test" not in backends.description


def test_local_server_needs_no_key() -> None:
    backends = make_backends(cfg(base_url=LOCAL), {})
    assert backends.provider == "openai"
    assert "127.0.0.1:11434" in backends.description


def test_explicit_openai_without_key_names_the_env_var() -> None:
    with pytest.raises(AuthenticationError, match="MY_KEY"):
        make_backends(cfg(provider="openai", api_key_env="MY_KEY"), {"OPENAI_API_KEY": "x"})


def test_explicit_offline_ignores_a_key() -> None:
    backends = make_backends(cfg(provider="offline"), {"OPENAI_API_KEY": "sk"})
    assert backends.provider == "offline"
    assert "backend.provider is offline" in backends.description
    # The key is set, so the description must not tell the user to set it.
    assert "is set but not used" in backends.description
    assert "Set $OPENAI_API_KEY" not in backends.description


def test_offline_backends_ask_for_their_own_models() -> None:
    config = AppConfig.model_validate(
        {"backend": {"text_model": "t"}, "image": {"model": "gpt-image-x"}}
    )
    backends = make_backends(config, {})
    assert backends.text.default_model == "offline-text-1"
    assert backends.image.default_model == "offline-image-1"


@pytest.mark.anyio
async def test_openai_backends_ask_for_the_configured_models_and_share_one_transport() -> None:
    config = AppConfig.model_validate({"backend": {"text_model": "t"}, "image": {"model": "i"}})
    backends = make_backends(config, {"OPENAI_API_KEY": "sk-test"})
    try:
        assert isinstance(backends.text, OpenAITextBackend)
        assert isinstance(backends.image, OpenAIImageBackend)
        assert backends.text.transport is backends.image.transport
        assert (backends.text.default_model, backends.image.default_model) == ("t", "i")
        assert backends.image.default_model == config.image.model
    finally:
        await backends.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("env", "bearer"),
    [({}, PLACEHOLDER_KEY), ({"OPENAI_API_KEY": "sk-local"}, "sk-local")],
    ids=["placeholder", "key"],
)
async def test_a_local_server_gets_the_chosen_key_and_the_configured_models(
    allow_loopback: None, env: dict[str, str], bearer: str
) -> None:
    with OpenAIServer() as server:
        config = AppConfig.model_validate(
            {
                "backend": {"base_url": server.base_url, "text_model": "t"},
                "image": {"model": "i"},
            }
        )
        backends = make_backends(config, env)
        try:
            await backends.text.complete(TextRequest((Message("user", "hi"),), temperature=0.0))
            await backends.image.generate(ImageRequest("a heron"))
        finally:
            await backends.aclose()
    chat, image = server.requests
    assert chat.headers["authorization"] == image.headers["authorization"] == f"Bearer {bearer}"
    assert (chat.body["model"], image.body["model"]) == ("t", "i")


@pytest.mark.parametrize(
    ("mode", "image_backend", "says"),
    [
        ("prompt_only", "offline", "image model none (prompt only)"),
        ("prompt_only", None, "image model none (prompt only)"),
        ("full", "offline", "image model see below"),
        ("full", None, "image model gpt-image-2.6-sunburst"),
    ],
)
def test_the_first_line_names_the_image_model_only_when_the_run_makes_an_image(
    mode: str, image_backend: str | None, says: str
) -> None:
    """With image.backend offline and --prompt-only the line used to say "image model see
    below", and nothing below named one."""
    config = AppConfig.model_validate(
        {
            "backend": {"base_url": LOCAL},
            "image": {"backend": image_backend},
            "run": {"mode": mode},
        }
    )
    description = make_backends(config, {}).description
    assert says in description
    if mode == "full" and image_backend == "offline":
        assert "image: offline preview image" in description
