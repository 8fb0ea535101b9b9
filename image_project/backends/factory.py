"""Choose and build the text and image backends from the configuration.

``backend.provider``:

* ``offline`` — the built-in offline backend: no network, deterministic answers.
* ``openai`` — the OpenAI adapter (api.openai.com, or ``backend.base_url`` for an
  OpenAI-compatible server such as Ollama, vLLM or LM Studio). The key is read from the
  environment variable named by ``backend.api_key_env``; a local server that needs no key
  gets a placeholder.
* ``auto`` — ``openai`` when that environment variable is set or ``base_url`` points at a
  server, else ``offline``.

:attr:`Backends.description` is the one line the CLI prints so that a user always knows
which backend produced a run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from image_project.backends.base import ImageBackend, TextBackend
from image_project.backends.offline import OfflineImageBackend, OfflineTextBackend
from image_project.backends.openai_backend import openai_backends
from image_project.backends.retry import RetryPolicy
from image_project.config import AppConfig
from image_project.errors import AuthenticationError

__all__ = ["PLACEHOLDER_KEY", "Backends", "make_backends"]

PLACEHOLDER_KEY = "unused-by-local-server"


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Backends:
    text: TextBackend
    image: ImageBackend
    provider: Literal["openai", "offline"]
    description: str
    aclose: Callable[[], Awaitable[None]] = _nothing


def make_backends(cfg: AppConfig, env: Mapping[str, str]) -> Backends:
    """Build the backends (no network is touched here). A missing key for an explicit
    ``openai`` provider raises :class:`~image_project.errors.AuthenticationError` naming the
    environment variable."""
    b = cfg.backend
    provider = b.effective_provider(env)
    if provider == "offline":
        why = (
            "backend.provider is offline"
            if b.provider == "offline"
            else f"no API key in ${b.api_key_env} and no backend.base_url"
        )
        return Backends(
            text=OfflineTextBackend(),
            image=OfflineImageBackend(),
            provider="offline",
            description=(
                f"Using the built-in OFFLINE backend ({why}): deterministic placeholder text "
                f"and a drawn preview image, no network. Set ${b.api_key_env} for real models."
            ),
        )
    retry = RetryPolicy(
        max_attempts=b.max_attempts,
        initial_wait_s=b.backoff_initial_s,
        max_wait_s=b.backoff_max_s,
    )
    key = env.get(b.api_key_env, "").strip()
    if not key and not b.base_url:
        raise AuthenticationError(
            f"backend.provider is openai but the environment variable {b.api_key_env} is not "
            f"set. Set {b.api_key_env} to your API key, point backend.base_url at an "
            "OpenAI-compatible server, or use backend.provider: offline."
        )
    pair = openai_backends(
        api_key=key or PLACEHOLDER_KEY,
        api_key_env=b.api_key_env,
        text_model=b.text_model,
        image_model=cfg.image.model,
        base_url=b.base_url,
        timeout_s=b.timeout_s,
        retry=retry,
        max_concurrency=b.max_concurrency,
        structured_outputs=b.structured_outputs,
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
