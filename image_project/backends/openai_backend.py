"""The OpenAI adapter: the one module of image_project that sends requests through ``openai``
(the model probe, :mod:`.probe`, lists models with an SDK client of its own;
``tests/backends/test_openai_backend.py`` keeps the rule), through the SDK's public API only
(``tests/test_architecture.py`` keeps that).

Why one module of over 600 lines: it is the one seam to the SDK, and keeping every use of
``openai`` (client, requests, responses, the error mapping) in one file is the rule that makes
the rest of the package SDK-free; its retry and pacing policies live in :mod:`.retry` and
:mod:`.pacing`.

::

    OpenAITransport        one openai.AsyncOpenAI client (SDK retries off), one CapacityLimiter
    │                      paced by one Pacer, one RetryPolicy, the network-policy check and
    │                      the one place that maps SDK errors to ours
    ├── OpenAITextBackend  TextRequest  -> chat.completions.create -> TextReply
    └── OpenAIImageBackend ImageRequest -> images.generate          -> ImageReply

Both backends usually share one transport (:func:`openai_backends`), so
one limiter bounds every call in flight. The limiter is acquired per *attempt*: a call
waiting out a retry backoff does not hold a slot. The transport's
:class:`~image_project.backends.pacing.Pacer` reads every answer's ``x-ratelimit-*`` headers
and 429s: it holds new attempts until the server's rate window allows them and shrinks the
limiter after a 429 (growing it back on success, never above ``max_concurrency``). How long a
call was held is reported with its answer (``TextReply.pacing_wait_ms``).

Network policy. :func:`set_network_policy` switches the whole adapter between ``any`` (the
default), ``loopback`` (only servers on 127.0.0.1 / localhost / ::1) and ``deny``. The test
suite sets ``deny`` for every test (``tests/conftest.py``), so the real adapter can never
reach a real service from pytest unless a test opts in against a server it started itself.

Error mapping (:meth:`OpenAITransport.map_error`), each chained to the SDK exception:

==========================  =============================================================
SDK exception               ours
==========================  =============================================================
HTTP 401 / 403              AuthenticationError (names the env var holding the key)
HTTP 429, quota used up     QuotaExceededError (error code or type in
                            :data:`QUOTA_ERROR_CODES`: waiting does not help)
HTTP 429                    RateLimitedError
HTTP 5xx / 408 / 409        ServerError
other HTTP 4xx              RequestRejectedError (quotes the server's message)
APITimeoutError             BackendTimeoutError
APIConnectionError          BackendConnectionError
APIResponseValidationError  MalformedResponseError (content type and a body preview)
anything else from openai   BackendError
==========================  =============================================================

Malformed success answers. Requests go through the SDK's ``with_raw_response`` (the body is
still read inside the SDK, so its timeout and connection errors apply; the answer's headers
feed the pacer) and the answer is parsed here. Without strict validation, which would reject
the slightly different shapes OpenAI-compatible servers send, the SDK returns a 200 whose
content type is not JSON as a plain ``str`` (an HTML error page from a proxy), raises a bare
``json.JSONDecodeError`` for a truncated JSON body, and builds a typed object without checking
it from JSON of another shape (``choices`` missing or not a list). Each of these is turned
into the SDK's own ``APIResponseValidationError`` (what its strict mode raises) and mapped
like any SDK error, so it becomes a :class:`MalformedResponseError`, retried like a 5xx. A
well-formed answer with no choices or no image data stays a plain, non-retried
:class:`BackendError`.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, cast, get_args

import anyio
import openai
from openai.types import CompletionUsage, Image, ImagesResponse
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    ResponseFormat,
)

from image_project.backends.base import (
    ImageReply,
    ImageRequest,
    TextReply,
    TextRequest,
    TokenLogprob,
    Usage,
)
from image_project.backends.pacing import CallPacing, Pacer, Slot
from image_project.backends.retry import (
    Retrier,
    RetryPolicy,
    SleepFn,
    attach_retry_after,
    parse_retry_after,
    retry_after_of,
)
from image_project.backends.wire import WireOptions, shrunk_limit, wire_messages, wire_schema
from image_project.config.capabilities import reasoning_effort_for
from image_project.errors import (
    AuthenticationError,
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    MalformedResponseError,
    NetworkDisabledError,
    QuotaExceededError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    preview,
)

NetworkPolicy = Literal["any", "loopback", "deny"]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
OPENAI_BASE_URL = "https://api.openai.com/v1"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
LABEL = "openai"
_BILLING_URL = "https://platform.openai.com/settings/organization/billing"

QUOTA_ERROR_CODES = frozenset(
    {
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "organization_usage_limit_exceeded",
        "billing_hard_limit_reached",
        "billing_not_active",
    }
)
"""Error codes (or types) of a 429 that no wait cures: OpenAI answers 429 both for "slow down"
(``rate_limit_exceeded``) and for "no credit / budget left". The second family has the type
``insufficient_quota`` and a code naming the cause (no prepaid credit, an organization or
project spend limit, the organization's usage limit; older accounts: the hard billing limit,
billing not active). OpenAI says retrying these does not restore access."""

_ImageQuality = Literal["low", "medium", "high", "xhigh", "max", "auto", "standard", "hd"]

_network_policy: NetworkPolicy = "any"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class RawAnswer(Protocol[T_co]):
    """What the SDK's ``with_raw_response`` methods return, as the transport reads it: the
    HTTP answer, its headers and text, and ``parse()`` (the typed answer, unvalidated)."""

    @property
    def http_response(self) -> Any: ...  # the SDK's HTTP library's response

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def text(self) -> str: ...

    def parse(self) -> T_co: ...


Send = Callable[[openai.AsyncOpenAI], Awaitable[RawAnswer[T]]]
"""One request through the SDK's ``with_raw_response``: the raw answer, parsed by the
transport."""
Check = Callable[[object], str | None]
"""What is wrong with a parsed answer for the caller's use, or None when it is usable."""


@dataclass(frozen=True)
class Sent(Generic[T]):
    """A parsed answer, the transport attempts it took and how long its attempts were held by
    the pacer before being sent (milliseconds; never counted as attempts)."""

    value: T
    attempts: int
    pacing_wait_ms: float = 0.0


_BODY_PREVIEW_CHARS = 120


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
    ``sleep`` and ``rng`` are the retry layer's injectable sleep and jitter source;
    ``pacing_sleep`` and ``clock`` the pacer's (defaults :func:`anyio.sleep` and
    :func:`time.monotonic`).
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
        pacing_sleep: SleepFn | None = None,
        clock: Callable[[], float] | None = None,
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
        self._pacer = Pacer(
            max_concurrency,
            max_hold_s=self._retry.max_retry_wait_s,
            sleep=pacing_sleep,
            clock=clock,
        )
        self._retrier = Retrier(self._retry, sleep=sleep, rng=rng)
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

    @property
    def pacer(self) -> Pacer:
        return self._pacer

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

    async def call(self, operation: str, send: Send[T], check: Check) -> Sent[T]:
        """Run ``send(client)`` under the network policy, the pacer (rate window and
        concurrency limit) and the retry policy, and parse its answer; ``check`` says what is
        wrong with a parsed answer (None: usable).

        Returns the parsed answer, the number of attempts it took and how long it was held by
        the pacer; raises our :class:`BackendError` subclasses (never an SDK exception), with
        ``pacing_wait_ms`` set.
        """
        self.check_network()
        pacing = CallPacing()

        async def attempt(number: int) -> T:
            async with self._pacer.slot(pacing) as slot:
                raw = await self._send(send, slot, operation=operation, attempt=number)
                try:
                    value = self.parse(raw, check, operation=operation, attempt=number)
                except BackendError:
                    slot.answered(raw.headers, "failed")
                    raise
                slot.answered(raw.headers, "ok")
                return value

        try:
            done = await self._retrier.call(attempt, what=f"openai {operation}")
        except BackendError as exc:
            exc.pacing_wait_ms = _ms(pacing.waited_s)
            raise
        return Sent(done.value, done.attempts, _ms(pacing.waited_s))

    async def _send(
        self, send: Send[T], slot: Slot, *, operation: str, attempt: int
    ) -> RawAnswer[T]:
        """One request; an SDK error is mapped, and an HTTP error answer reported to the pacer
        (a 429 that may pass with the wait it asked for)."""
        try:
            return await send(self._client)
        except openai.APIStatusError as exc:
            err = self.map_error(exc, operation=operation, attempt=attempt)
            limited = isinstance(err, RateLimitedError)
            slot.answered(
                exc.response.headers,
                "rate_limited" if limited else "failed",
                retry_after=retry_after_of(err),
            )
            raise err from exc
        except openai.OpenAIError as exc:
            raise self.map_error(exc, operation=operation, attempt=attempt) from exc

    def parse(self, raw: RawAnswer[T], check: Check, *, operation: str, attempt: int = 1) -> T:
        """The parsed answer of a success status, or a :class:`MalformedResponseError`.

        A body that does not parse, or parses into something ``check`` rejects, becomes the
        SDK's ``APIResponseValidationError`` (what its strict mode raises), mapped by
        :meth:`map_error` like every SDK error.
        """
        cause: Exception | None = None
        try:
            value = raw.parse()
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError, pydantic's
            cause = exc
            problem = f"the body is not valid JSON ({type(exc).__name__}: {preview(str(exc), 80)})"
        else:
            checked = check(value)
            if checked is None:
                return value
            problem = checked
        invalid = openai.APIResponseValidationError(
            response=raw.http_response, body=raw.text, message=problem
        )
        invalid.__cause__ = cause
        raise self.map_error(invalid, operation=operation, attempt=attempt) from invalid

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
        if isinstance(exc, openai.APIResponseValidationError):
            return _malformed(exc, where=where, of=of, attempt=attempt)
        return BackendError(
            f"{where} failed: {type(exc).__name__}: {preview(str(exc))} ({of})", attempts=attempt
        )

    def _quota_error(
        self, exc: openai.APIStatusError, *, where: str, said: str, attempt: int
    ) -> QuotaExceededError:
        code = _quota_code(exc)
        where_to = (
            f"of that account on the server at base_url {self.base_url!r}"
            if self._custom_base_url
            else f"({_BILLING_URL})"
        )
        return QuotaExceededError(
            f"{where} refused the call: the quota of the account behind {self._api_key_env} "
            f"is used up ({code}; {said}). Not retried, waiting does not help: add credit or "
            f"raise the spend or usage limit {where_to}, then run again.",
            status=exc.status_code,
            attempts=attempt,
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
        if status == 429 and _quota_code(exc) is not None:
            return self._quota_error(exc, where=where, said=said, attempt=attempt)
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


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _quota_code(exc: openai.APIStatusError) -> str | None:
    """The code (else the type) of a 429 that says the quota is used up, or None."""
    for value in (exc.code, exc.type):
        if isinstance(value, str) and value in QUOTA_ERROR_CODES:
            return value
    return None


def _malformed(
    exc: openai.APIResponseValidationError, *, where: str, of: str, attempt: int
) -> MalformedResponseError:
    response = exc.response
    content_type = response.headers.get("content-type") or "(none)"
    body = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=repr)
    shown = preview(body, _BODY_PREVIEW_CHARS) if body.strip() else "(empty)"
    return MalformedResponseError(
        f"{where} answered HTTP {response.status_code} with a body that is not a usable "
        f"answer: {exc.message}; content type {content_type!r}, body preview {shown!r} ({of})",
        status=response.status_code,
        attempts=attempt,
    )


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


def _kind(value: object) -> str:
    """What a parsed body is, for messages ("text" is a body the SDK could not read as JSON)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "text, not a JSON object"
    if isinstance(value, list):
        return "a JSON array"
    if isinstance(value, bool | int | float):
        return "a JSON number" if not isinstance(value, bool) else "a JSON boolean"
    return f"an object of another shape ({type(value).__name__})"


def _wrong_strings(obj: object, names: tuple[str, ...], prefix: str = "") -> str | None:
    """The first of ``obj``'s optional string fields that holds something else, described."""
    for name in names:
        value = getattr(obj, name, None)
        if value is not None and not isinstance(value, str):
            return f"'{prefix}{name}' is {_kind(value)}, not a string"
    return None


def _completion_problem(value: object) -> str | None:
    """What makes ``value`` unusable as a chat completion (None: usable). The SDK builds the
    object without validating it, so every field read later is checked here."""
    if not isinstance(value, ChatCompletion):
        return f"expected a chat completion object, got {_kind(value)}"
    if not isinstance(value.choices, list):
        return f"'choices' is {_kind(value.choices)}, not a list"
    wrong = _wrong_strings(value, ("model", "system_fingerprint"))
    if wrong is not None or not value.choices:  # no choices: reported by the caller
        return wrong
    choice = value.choices[0]
    if not isinstance(choice, Choice) or not isinstance(choice.message, ChatCompletionMessage):
        return "'choices[0]' has no message object"
    return _wrong_strings(choice, ("finish_reason",), "choices[0].") or _wrong_strings(
        choice.message, ("content", "refusal"), "choices[0].message."
    )


def _images_problem(value: object) -> str | None:
    """What makes ``value`` unusable as an images response (None: usable)."""
    if not isinstance(value, ImagesResponse):
        return f"expected an images response object, got {_kind(value)}"
    data = value.data
    if data is not None and not isinstance(data, list):
        return f"'data' is {_kind(data)}, not a list"
    wrong = _wrong_strings(value, ("output_format", "size", "quality"))
    if wrong is not None or not data:  # no data: reported by the caller
        return wrong
    if not isinstance(data[0], Image):
        return "'data[0]' is not an image object"
    return _wrong_strings(data[0], ("b64_json", "url", "revised_prompt"), "data[0].")


def _usage(usage: CompletionUsage | None) -> Usage | None:
    """Token counts when the server sent them as numbers (the SDK builds ``usage`` without
    validating it); anything else is not recorded."""
    counts = [getattr(usage, n, None) for n in ("prompt_tokens", "completion_tokens")]
    if usage is None or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    prompt, completion = cast(list[int], counts)
    total = getattr(usage, "total_tokens", None)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    return Usage(
        prompt,
        completion,
        total if isinstance(total, int) else prompt + completion,
        cached if isinstance(cached, int) and not isinstance(cached, bool) else None,
    )


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

    How a request is shaped is :mod:`image_project.backends.wire`'s (``wire``: the
    ``backend`` settings ``structured_outputs``, ``role_style``, ``schema_dialect`` and
    ``token_limit_param``). With ``structured_outputs`` a request's ``json_schema`` is sent as
    the API's ``response_format: json_schema`` (in the ``schema_dialect``); without it the
    schema is spelled out at the end of the last user message instead. A retry after a
    timed-out attempt sends a smaller token limit (:func:`~image_project.backends.wire.
    shrunk_limit`), named in the reply's ``notes``.
    """

    def __init__(
        self,
        transport: OpenAITransport,
        *,
        default_model: str,
        structured_outputs: bool = True,
        wire: WireOptions | None = None,
    ) -> None:
        super().__init__(transport, default_model=default_model)
        self._wire = wire or WireOptions(structured_outputs=structured_outputs)

    @property
    def wire(self) -> WireOptions:
        return self._wire

    def body(
        self,
        request: TextRequest,
        model: str,
        *,
        max_output_tokens: int | None = None,
        messages: list[dict[str, str]] | None = None,
    ) -> CompletionCreateParamsNonStreaming:
        """The arguments of ``chat.completions.create`` for the request, unset ones left out
        (the SDK sends them as the JSON body). ``max_output_tokens`` replaces the request's
        limit (a retry after a timeout); ``messages``, when given, are the request's messages
        as :func:`~image_project.backends.wire.wire_messages` already made them (the body
        holds that list itself, not a copy)."""
        if messages is None:
            messages, _ = wire_messages(request, self._wire)
        schema = request.json_schema
        structured = self._wire.structured_outputs
        body: CompletionCreateParamsNonStreaming = {
            "model": model,
            "messages": cast(list[ChatCompletionMessageParam], messages),
        }
        limit = max_output_tokens or request.max_output_tokens
        if limit is not None:
            body[self._wire.token_limit_param] = limit
        # A model that honours temperature only with reasoning off (the capability table,
        # docs/models.md) gets reasoning_effort "none"; every other model gets nothing.
        effort = reasoning_effort_for(model)
        if effort:
            body["reasoning_effort"] = effort
        if schema is not None and structured:
            response_format: ResponseFormat = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema.name,
                    "schema": dict(wire_schema(schema, self._wire)),
                    "strict": schema.strict,
                },
            }
            body["response_format"] = response_format
        if request.seed is not None:
            body["seed"] = request.seed
        body["temperature"] = request.temperature
        if request.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = request.top_logprobs
        return body

    async def complete(self, request: TextRequest) -> TextReply:
        model = request.model or self._default_model
        messages, notes = wire_messages(request, self._wire)
        budget = _Budget(request.max_output_tokens)

        async def send(client: openai.AsyncOpenAI) -> RawAnswer[ChatCompletion]:
            budget.attempt += 1
            body = self.body(request, model, max_output_tokens=budget.limit, messages=messages)
            try:
                return await client.chat.completions.with_raw_response.create(**body)
            except openai.APITimeoutError:
                budget.timed_out(self._wire.token_limit_param)
                raise

        sent = await self._transport.call("chat.completions", send, _completion_problem)
        completion = sent.value
        if not completion.choices:
            raise BackendError(
                f"chat.completions for model {model!r} returned no choices",
                attempts=sent.attempts,
            )
        choice = completion.choices[0]
        message = choice.message
        return TextReply(
            text=message.content,
            model=completion.model or model,
            refusal=message.refusal,
            usage=_usage(completion.usage),
            system_fingerprint=completion.system_fingerprint,
            finish_reason=choice.finish_reason,
            attempts=sent.attempts,
            pacing_wait_ms=sent.pacing_wait_ms,
            max_output_tokens=budget.limit if budget.notes else None,
            logprobs=_logprobs(choice) if request.top_logprobs is not None else None,
            notes=(*notes, *budget.notes),
        )


def _logprobs(choice: Choice) -> tuple[TokenLogprob, ...] | None:
    """The answer's token log-probabilities (``choices[0].logprobs.content``), or None when
    the server returned none."""
    content = getattr(choice.logprobs, "content", None)
    if not content:
        return None
    return tuple(
        TokenLogprob(
            t.token,
            float(t.logprob),
            tuple((a.token, float(a.logprob)) for a in t.top_logprobs or ()),
        )
        for t in content
    )


class _Budget:
    """A call's token limit over its attempts: after a timed-out attempt the next one sends
    :func:`~image_project.backends.wire.shrunk_limit` of it (when there is one), noted."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.attempt = 0
        self.notes: list[str] = []

    def timed_out(self, param: str) -> None:
        if self.limit is None:
            return
        smaller = shrunk_limit(self.limit)
        if smaller < self.limit:
            self.notes.append(
                f"attempt {self.attempt + 1}: {param} {self.limit} -> {smaller} after "
                f"attempt {self.attempt} timed out"
            )
            self.limit = smaller


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

        async def send(client: openai.AsyncOpenAI) -> RawAnswer[ImagesResponse]:
            return await client.images.with_raw_response.generate(
                model=model,
                prompt=request.prompt,
                size=request.size,
                quality=quality,
                n=1,
                response_format=response_format,
            )

        sent = await self._transport.call("images.generate", send, _images_problem)
        response, attempts = sent.value, sent.attempts
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
            pacing_wait_ms=sent.pacing_wait_ms,
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
    wire: WireOptions | None = None,
    sleep: SleepFn | None = None,
    rng: random.Random | None = None,
    api_key_env: str = DEFAULT_API_KEY_ENV,
    pacing_sleep: SleepFn | None = None,
    clock: Callable[[], float] | None = None,
) -> OpenAIBackends:
    """Both backends over one shared :class:`OpenAITransport`, from explicit settings
    (``wire``, when given, wins over ``structured_outputs``)."""
    transport = OpenAITransport(
        api_key=api_key,
        base_url=base_url,
        timeout_s=timeout_s,
        retry=retry,
        max_concurrency=max_concurrency,
        sleep=sleep,
        rng=rng,
        api_key_env=api_key_env,
        pacing_sleep=pacing_sleep,
        clock=clock,
    )
    return OpenAIBackends(
        text=OpenAITextBackend(
            transport,
            default_model=text_model,
            structured_outputs=structured_outputs,
            wire=wire,
        ),
        image=OpenAIImageBackend(transport, default_model=image_model),
        transport=transport,
    )
