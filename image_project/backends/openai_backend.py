"""The OpenAI adapter: the only module in image_project that imports ``openai``.

::

    OpenAITransport        one openai.AsyncOpenAI client (SDK retries off), one CapacityLimiter,
    │                      one RetryPolicy, the network-policy check and the one place that
    │                      maps SDK errors to ours
    ├── OpenAITextBackend  TextRequest  -> chat.completions.create -> TextReply
    └── OpenAIImageBackend ImageRequest -> images.generate          -> ImageReply

Both backends usually share one transport (:func:`openai_backends`), so
one limiter bounds every call in flight. The limiter is acquired per *attempt*: a call
waiting out a retry backoff does not hold a slot.

Network policy. :func:`set_network_policy` switches the whole adapter between ``any`` (the
default), ``loopback`` (only servers on 127.0.0.1 / localhost / ::1) and ``deny``. The test
suite sets ``deny`` for every test (``tests/conftest.py``), so the real adapter can never
reach a real service from pytest unless a test opts in against a server it started itself.

Error mapping (:meth:`OpenAITransport.map_error`), each chained to the SDK exception:

==========================  =============================================================
SDK exception               ours
==========================  =============================================================
HTTP 401 / 403              AuthenticationError (names the env var holding the key)
HTTP 429                    RateLimitedError
HTTP 5xx / 408 / 409        ServerError
other HTTP 4xx              RequestRejectedError (quotes the server's message)
APITimeoutError             BackendTimeoutError
APIConnectionError          BackendConnectionError
anything else from openai   BackendError
==========================  =============================================================
"""

from __future__ import annotations

import base64
import binascii
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast, get_args

import anyio
import openai
from openai.types import ImagesResponse
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam
from openai.types.chat.completion_create_params import ResponseFormat

from image_project.backends.base import (
    ImageReply,
    ImageRequest,
    Message,
    TextReply,
    TextRequest,
    Usage,
)
from image_project.backends.retry import (
    RetryPolicy,
    SleepFn,
    attach_retry_after,
    call_with_retry,
    parse_retry_after,
)
from image_project.config.capabilities import reasoning_effort_for
from image_project.errors import (
    AuthenticationError,
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    NetworkDisabledError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    preview,
)

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "LABEL",
    "LOOPBACK_HOSTS",
    "OPENAI_BASE_URL",
    "NetworkPolicy",
    "OpenAIBackends",
    "OpenAIImageBackend",
    "OpenAITextBackend",
    "OpenAITransport",
    "get_network_policy",
    "openai_backends",
    "set_network_policy",
]

NetworkPolicy = Literal["any", "loopback", "deny"]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
OPENAI_BASE_URL = "https://api.openai.com/v1"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
LABEL = "openai"

_ImageQuality = Literal["low", "medium", "high", "xhigh", "max", "auto", "standard", "hd"]

_network_policy: NetworkPolicy = "any"

T = TypeVar("T")


def set_network_policy(policy: NetworkPolicy) -> NetworkPolicy:
    """Set the adapter-wide network policy; returns the previous one (to restore it)."""
    global _network_policy
    if policy not in get_args(NetworkPolicy):
        raise ValueError(
            f"network policy: got {policy!r}, must be one of 'any', 'loopback', 'deny'"
        )
    previous = _network_policy
    _network_policy = policy
    return previous


def get_network_policy() -> NetworkPolicy:
    return _network_policy


class OpenAITransport:
    """One ``openai.AsyncOpenAI`` client plus the limiter, retry policy and error mapping.

    ``base_url`` None means OpenAI itself (the SDK's ``OPENAI_BASE_URL`` environment fallback
    is deliberately not used: settings arrive explicitly). ``max_concurrency`` is either a
    shared :class:`anyio.CapacityLimiter` or the number of tokens for a new one.
    ``api_key_env`` is only used in messages: it names the variable the user should set.
    ``sleep`` and ``rng`` are the retry layer's injectable sleep and jitter source.
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        max_concurrency: anyio.CapacityLimiter | int = 8,
        sleep: SleepFn | None = None,
        rng: random.Random | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
    ) -> None:
        self._api_key_env = api_key_env
        self._custom_base_url = base_url is not None
        if not api_key.strip():
            raise AuthenticationError(_missing_key_message(api_key_env, base_url), attempts=0)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: got {timeout_s!r}, must be > 0")
        if isinstance(max_concurrency, int):
            if max_concurrency < 1:
                raise ValueError(f"max_concurrency: got {max_concurrency!r}, must be an int >= 1")
            max_concurrency = anyio.CapacityLimiter(max_concurrency)
        self._limiter = max_concurrency
        self._retry = retry if retry is not None else RetryPolicy()
        self._sleep = sleep
        self._rng = rng
        self._timeout_s = timeout_s
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url if base_url is not None else OPENAI_BASE_URL,
            timeout=timeout_s,
            max_retries=0,
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        return self._limiter

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._retry

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._client.close()

    def check_network(self) -> None:
        """Raise :class:`NetworkDisabledError` if the network policy forbids this server."""
        policy = _network_policy
        if policy == "any":
            return
        if policy == "deny":
            raise NetworkDisabledError(
                "the real OpenAI adapter is disabled under the test suite; use "
                "image_project.testing fakes or the allow_loopback fixture with a local server",
                attempts=0,
            )
        host = self._client.base_url.host
        if host not in LOOPBACK_HOSTS:
            raise NetworkDisabledError(
                f"network policy 'loopback' refuses base_url {self.base_url!r} (host {host!r}); "
                f"only {', '.join(sorted(LOOPBACK_HOSTS))} are allowed",
                attempts=0,
            )

    async def call(
        self, operation: str, send: Callable[[openai.AsyncOpenAI], Awaitable[T]]
    ) -> tuple[T, int]:
        """Run ``send(client)`` under the network policy, the limiter and the retry policy.

        Returns the SDK result and the number of attempts it took; raises our
        :class:`BackendError` subclasses (never an SDK exception).
        """
        self.check_network()

        async def attempt(number: int) -> T:
            try:
                async with self._limiter:
                    return await send(self._client)
            except openai.OpenAIError as exc:
                raise self.map_error(exc, operation=operation, attempt=number) from exc

        done = await call_with_retry(
            attempt,
            policy=self._retry,
            sleep=self._sleep,
            rng=self._rng,
            what=f"openai {operation}",
        )
        return done.value, done.attempts

    def map_error(
        self, exc: openai.OpenAIError, *, operation: str, attempt: int = 1
    ) -> BackendError:
        """The one translation of an SDK exception into our error tree (not raised here)."""
        where = f"{operation} at {self.base_url}"
        of = f"attempt {attempt} of {self._retry.max_attempts}"
        if isinstance(exc, openai.APITimeoutError):
            return BackendTimeoutError(
                f"{where} timed out after {self._timeout_s:g} s ({of})", attempts=attempt
            )
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            detail = f"{type(cause).__name__}: {preview(str(cause), 120)}" if cause else exc.message
            return BackendConnectionError(
                f"connection to {where} failed ({detail}) ({of})", attempts=attempt
            )
        if isinstance(exc, openai.APIStatusError):
            return self._map_status_error(exc, where=where, of=of, attempt=attempt)
        return BackendError(
            f"{where} failed: {type(exc).__name__}: {preview(str(exc))} ({of})", attempts=attempt
        )

    def _map_status_error(
        self, exc: openai.APIStatusError, *, where: str, of: str, attempt: int
    ) -> BackendError:
        status = exc.status_code
        server_message = preview(_server_message(exc))
        said = f"HTTP {status}: {server_message!r}"
        err: BackendError
        if status in (401, 403):
            what = "rejected the API key" if status == 401 else "refused access for the API key"
            hint = f"Set the {self._api_key_env} environment variable to a valid API key"
            if self._custom_base_url:
                hint += f" for the server at base_url {self.base_url!r} (or check that base_url)"
            return AuthenticationError(
                f"{where} {what} ({said}). {hint}.", status=status, attempts=attempt
            )
        if status == 429:
            err = RateLimitedError(f"{where} was rate limited ({said}) ({of})", status=status)
        elif status >= 500 or status in (408, 409):
            err = ServerError(f"{where} failed on the server ({said}) ({of})", status=status)
        else:
            return RequestRejectedError(
                f"{where} rejected the request ({said}); fix the request, it is not retried",
                status=status,
                attempts=attempt,
            )
        err.attempts = attempt
        attach_retry_after(err, parse_retry_after(exc.response.headers))
        return err


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body
    return exc.message


def _missing_key_message(api_key_env: str, base_url: str | None) -> str:
    where = f" for the server at base_url {base_url!r}" if base_url else ""
    return (
        f"no OpenAI API key{where}: set the {api_key_env} environment variable, "
        "or run offline (--offline) without one"
    )


def _message_param(message: Message) -> ChatCompletionMessageParam:
    if message.role == "system":
        return {"role": "system", "content": message.content}
    if message.role == "user":
        return {"role": "user", "content": message.content}
    return {"role": "assistant", "content": message.content}


class _OpenAIBackend:
    """What the text and image backends share: the transport and the default model."""

    def __init__(self, transport: OpenAITransport, *, default_model: str) -> None:
        self._transport = transport
        self._default_model = default_model

    @property
    def label(self) -> str:
        return LABEL

    @property
    def default_model(self) -> str:
        return self._default_model

    @property
    def transport(self) -> OpenAITransport:
        return self._transport


class OpenAITextBackend(_OpenAIBackend):
    """A :class:`~image_project.backends.base.TextBackend` over ``chat.completions.create``.

    With ``structured_outputs`` a request's ``json_schema`` is sent as the API's
    ``response_format: json_schema``; without it (servers that lack the feature) the schema
    is spelled out in a final system message instead and nothing else is sent.
    """

    def __init__(
        self, transport: OpenAITransport, *, default_model: str, structured_outputs: bool = True
    ) -> None:
        super().__init__(transport, default_model=default_model)
        self._structured_outputs = structured_outputs

    async def complete(self, request: TextRequest) -> TextReply:
        model = request.model or self._default_model
        messages = [_message_param(m) for m in request.messages]
        response_format: ResponseFormat | openai.Omit = openai.omit
        schema = request.json_schema
        if schema is not None and self._structured_outputs:
            response_format = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.name,
                    "schema": dict(schema.schema),
                    "strict": schema.strict,
                },
            }
        elif schema is not None:
            schema_text = json.dumps(schema.schema, sort_keys=True)
            messages.append(
                {
                    "role": "system",
                    "content": (
                        "Answer with one JSON object only, no prose and no code fences, "
                        f"matching this JSON schema ({schema.name}): {schema_text}"
                    ),
                }
            )
        seed = request.seed if request.seed is not None else openai.omit
        max_tokens = (
            request.max_output_tokens if request.max_output_tokens is not None else openai.omit
        )
        # A model that honours temperature only with reasoning off (the capability table,
        # docs/models.md) gets reasoning_effort "none"; every other model gets nothing.
        effort = reasoning_effort_for(model) or openai.omit

        async def send(client: openai.AsyncOpenAI) -> ChatCompletion:
            return await client.chat.completions.create(
                model=model,
                messages=messages,
                temperature=request.temperature,
                seed=seed,
                max_completion_tokens=max_tokens,
                response_format=response_format,
                reasoning_effort=effort,
            )

        completion, attempts = await self._transport.call("chat.completions", send)
        if not completion.choices:
            raise BackendError(
                f"chat.completions for model {model!r} returned no choices", attempts=attempts
            )
        choice = completion.choices[0]
        usage = completion.usage
        return TextReply(
            text=choice.message.content,
            model=completion.model or model,
            refusal=choice.message.refusal,
            usage=(
                Usage(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
                if usage is not None
                else None
            ),
            system_fingerprint=completion.system_fingerprint,
            finish_reason=choice.finish_reason,
            attempts=attempts,
        )


class OpenAIImageBackend(_OpenAIBackend):
    """An :class:`~image_project.backends.base.ImageBackend` over ``images.generate``.

    GPT image models always answer base64 and reject ``response_format``; only the legacy
    ``dall-e-*`` models are asked for ``b64_json`` explicitly. The API has no seed: a
    request's ``seed`` is not sent (the caller records it).
    """

    async def generate(self, request: ImageRequest) -> ImageReply:
        model = request.model or self._default_model
        response_format: Literal["b64_json"] | openai.Omit = (
            "b64_json" if model.startswith("dall-e") else openai.omit
        )
        quality = cast(_ImageQuality, request.quality)

        async def send(client: openai.AsyncOpenAI) -> ImagesResponse:
            return await client.images.generate(
                model=model,
                prompt=request.prompt,
                size=request.size,
                quality=quality,
                n=1,
                response_format=response_format,
            )

        response, attempts = await self._transport.call("images.generate", send)
        first = response.data[0] if response.data else None
        if first is None or not first.b64_json:
            got = "a URL" if first is not None and first.url else "no image"
            raise BackendError(
                f"images.generate for model {model!r} returned {got} instead of base64 image "
                "data (data[0].b64_json is empty)",
                attempts=attempts,
            )
        try:
            data = base64.b64decode(first.b64_json, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BackendError(
                f"images.generate for model {model!r} returned invalid base64 image data",
                attempts=attempts,
            ) from exc
        metadata: dict[str, Any] = {
            "size": response.size or request.size,
            "quality": response.quality or request.quality,
        }
        return ImageReply(
            data=data,
            model=model,
            format=response.output_format or "png",
            revised_prompt=first.revised_prompt,
            attempts=attempts,
            metadata=metadata,
        )


@dataclass(frozen=True)
class OpenAIBackends:
    """A text and an image backend sharing one transport (client, limiter, retry policy)."""

    text: OpenAITextBackend
    image: OpenAIImageBackend
    transport: OpenAITransport

    async def aclose(self) -> None:
        await self.transport.aclose()


def openai_backends(
    *,
    api_key: str,
    text_model: str,
    image_model: str,
    base_url: str | None = None,
    timeout_s: float = 120.0,
    retry: RetryPolicy | None = None,
    max_concurrency: anyio.CapacityLimiter | int = 8,
    structured_outputs: bool = True,
    sleep: SleepFn | None = None,
    rng: random.Random | None = None,
    api_key_env: str = DEFAULT_API_KEY_ENV,
) -> OpenAIBackends:
    """Both backends over one shared :class:`OpenAITransport`, from explicit settings."""
    transport = OpenAITransport(
        api_key=api_key,
        base_url=base_url,
        timeout_s=timeout_s,
        retry=retry,
        max_concurrency=max_concurrency,
        sleep=sleep,
        rng=rng,
        api_key_env=api_key_env,
    )
    return OpenAIBackends(
        text=OpenAITextBackend(
            transport, default_model=text_model, structured_outputs=structured_outputs
        ),
        image=OpenAIImageBackend(transport, default_model=image_model),
        transport=transport,
    )
