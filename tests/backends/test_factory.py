from __future__ import annotations

import pytest

from image_project.backends.factory import make_backends
from image_project.backends.offline import OfflineImageBackend, OfflineTextBackend
from image_project.backends.openai_backend import OpenAIImageBackend, OpenAITextBackend
from image_project.config import AppConfig
from image_project.errors import AuthenticationError


def cfg(**backend: object) -> AppConfig:
    return AppConfig.model_validate({"backend": backend})


def test_auto_without_key_is_offline_and_says_so() -> None:
    backends = make_backends(cfg(), {})
    assert backends.provider == "offline"
    assert isinstance(backends.text, OfflineTextBackend)
    assert isinstance(backends.image, OfflineImageBackend)
    assert "OFFLINE" in backends.description and "$OPENAI_API_KEY" in backends.description


def test_auto_with_key_is_openai() -> None:
    backends = make_backends(cfg(text_model="m1"), {"OPENAI_API_KEY": "sk-test"})
    assert backends.provider == "openai"
    assert isinstance(backends.text, OpenAITextBackend)
    assert isinstance(backends.image, OpenAIImageBackend)
    assert backends.text.default_model == "m1"
    assert "api.openai.com" in backends.description
    assert "sk-test" not in backends.description


def test_local_server_needs_no_key() -> None:
    backends = make_backends(cfg(base_url="http://127.0.0.1:11434/v1"), {})
    assert backends.provider == "openai"
    assert "127.0.0.1:11434" in backends.description


def test_explicit_openai_without_key_names_the_env_var() -> None:
    with pytest.raises(AuthenticationError, match="MY_KEY"):
        make_backends(cfg(provider="openai", api_key_env="MY_KEY"), {"OPENAI_API_KEY": "x"})


def test_explicit_offline_ignores_a_key() -> None:
    backends = make_backends(cfg(provider="offline"), {"OPENAI_API_KEY": "sk"})
    assert backends.provider == "offline"
    assert "backend.provider is offline" in backends.description
