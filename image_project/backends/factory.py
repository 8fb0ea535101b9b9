"""Choose and build the text and image backends from the configuration.

``backend.provider``:

* ``offline`` — the built-in offline backend: no network, deterministic answers.
* ``openai`` — the OpenAI adapter (api.openai.com, or ``backend.base_url`` for an
  OpenAI-compatible server such as Ollama, vLLM or LM Studio). The key is read from the
  environment variable named by ``backend.api_key_env``; a local server that needs no key
  gets a placeholder.
* ``auto`` — ``openai`` when that environment variable is set or ``base_url`` points at a
  server, else ``offline``.

For the OpenAI-compatible provider the configured models are checked against the model
capability tables (:func:`image_project.config.capabilities.check_models`) before anything is
built: a shut-down model, a temperature a model cannot honour, an image size or quality the
image model would reject is a :class:`~image_project.errors.ConfigError` (exit 2) naming the
key and the allowed values. The offline backend serves every request itself and needs no
such check.

:attr:`Backends.description` is the one line the CLI prints so that a user always knows
which backend produced a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from image_project.backends.base import ImageBackend, TextBackend
from image_project.backends.offline import OfflineImageBackend, OfflineTextBackend
from image_project.backends.retry import RetryPolicy
from image_project.config import AppConfig, BackendConfig
from image_project.config.capabilities import check_models
from image_project.errors import AuthenticationError

__all__ = ["PLACEHOLDER_KEY", "Backends", "ProviderChoice", "choose_provider", "make_backends"]

PLACEHOLDER_KEY = "unused-by-local-server"


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Backends:
    """The backends a run uses. Their ``default_model`` is the model a run asks for:
    ``text.default_model`` for every text step (and judges without a model of their own),
    ``image.default_model`` for the image (the offline backend's own names when offline)."""

    text: TextBackend
    image: ImageBackend
    provider: Literal["openai", "offline"]
    description: str
    aclose: Callable[[], Awaitable[None]] = _nothing


@dataclass(frozen=True)
class ProviderChoice:
    """Which provider a run uses and why; ``api_key`` is the key to send (the placeholder for
    a local server that needs none; None offline)."""

    provider: Literal["openai", "offline"]
    api_key: str | None
    why: str
    key_set: bool = False


def choose_provider(b: BackendConfig, env: Mapping[str, str]) -> ProviderChoice:
    """The one place that decides the provider and checks the API key.

    ``auto`` means openai when ``env[api_key_env]`` is set and non-empty or ``base_url``
    points at a server (local OpenAI-compatible servers need no key), else offline. An
    explicit ``openai`` without either raises
    :class:`~image_project.errors.AuthenticationError` naming the environment variable.
    """
    key = env.get(b.api_key_env, "").strip()
    if b.provider == "offline":
        unused = f"; ${b.api_key_env} is set but not used" if key else ""
        return ProviderChoice("offline", None, f"backend.provider is offline{unused}", bool(key))
    if not key and not b.base_url:
        if b.provider == "auto":
            why = f"no API key in ${b.api_key_env} and no backend.base_url"
            return ProviderChoice("offline", None, why)
        raise AuthenticationError(
            f"backend.provider is openai but the environment variable {b.api_key_env} is not "
            f"set. Set {b.api_key_env} to your API key, point backend.base_url at an "
            "OpenAI-compatible server, or use backend.provider: offline.",
            attempts=0,
        )
    why = f"${b.api_key_env} is set" if key else f"backend.base_url is {b.base_url}"
    return ProviderChoice("openai", key or PLACEHOLDER_KEY, why, bool(key))


def make_backends(cfg: AppConfig, env: Mapping[str, str]) -> Backends:
    """Build the backends (no network is touched here); see :func:`choose_provider`.

    Raises :class:`~image_project.errors.ConfigError` when the OpenAI-compatible provider
    is chosen and a configured model would reject its settings (see the module docstring).
    """
    b = cfg.backend
    choice = choose_provider(b, env)
    if choice.api_key is None:
        hint = "" if choice.key_set else f" Set ${b.api_key_env} for real models."
        return Backends(
            text=OfflineTextBackend(),
            image=OfflineImageBackend(),
            provider="offline",
            description=(
                f"Using the built-in OFFLINE backend ({choice.why}): deterministic placeholder "
                f"text and a drawn preview image, no network.{hint}"
            ),
        )
    check_models(cfg)
    # Imported here, not at the top: ``openai`` takes most of the CLI's start-up, and an
    # offline run or ``--help`` never uses it (tests/test_startup.py).
    from image_project.backends.openai_backend import openai_backends
    from image_project.backends.wire import WireOptions

    retry = RetryPolicy(
        max_attempts=b.max_attempts,
        initial_wait_s=b.backoff_initial_s,
        max_wait_s=b.backoff_max_s,
        max_retry_wait_s=b.max_retry_wait_s,
    )
    pair = openai_backends(
        api_key=choice.api_key,
        api_key_env=b.api_key_env,
        text_model=b.text_model,
        image_model=cfg.image.model,
        base_url=b.base_url,
        timeout_s=b.timeout_s,
        retry=retry,
        max_concurrency=b.max_concurrency,
        structured_outputs=b.structured_outputs,
        wire=WireOptions(
            structured_outputs=b.structured_outputs,
            role_style=b.role_style,
            schema_dialect=b.schema_dialect,
            token_limit_param=b.token_limit_param,
        ),
    )
    where = b.base_url or "api.openai.com"
    return Backends(
        text=pair.text,
        image=pair.image,
        provider="openai",
        description=(
            f"Using OpenAI-compatible backend at {where} (text model {b.text_model}, "
            f"image model {cfg.image.model}, up to {b.max_concurrency} calls in flight)."
        ),
        aclose=pair.aclose,
    )
