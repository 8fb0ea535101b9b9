"""The OpenAI adapter, through the real ``openai.AsyncOpenAI`` client against a local server."""

from __future__ import annotations

import json
import logging
import random
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import pytest

from image_project.backends import openai_backend
from image_project.backends.base import (
    ImageBackend,
    ImageRequest,
    JsonSchema,
    Message,
    TextBackend,
    TextReply,
    TextRequest,
    Usage,
)
from image_project.backends.openai_backend import (
    OpenAIBackends,
    OpenAITransport,
    openai_backends,
    set_network_policy,
)
from image_project.backends.retry import RetryPolicy
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
    RetryAfterTooLongError,
    ServerError,
)
from tests.support import FakeClock, RecordingSleep
from tests.support.openai_server import (
    HTML_PAGE,
    OpenAIServer,
    Reply,
    chat_completion,
    error_body,
    image_response,
    truncated,
)

pytestmark = pytest.mark.anyio

TEXT_MODEL = "text-model-under-test"
IMAGE_MODEL = "gpt-image-under-test"

SCHEMA = JsonSchema(
    name="idea_card",
    schema={
        "type": "object",
        "properties": {"hook": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["hook", "score"],
        "additionalProperties": False,
    },
)


def text_request(**overrides: Any) -> TextRequest:
    fields: dict[str, Any] = {
        "messages": (Message("system", "You are terse."), Message("user", "Say hi.")),
        "temperature": 0.0,
    }
    fields.update(overrides)
    return TextRequest(**fields)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


@asynccontextmanager
async def open_backends(
    server: OpenAIServer | None,
    *,
    base_url: str | None = None,
    sleep: RecordingSleep | None = None,
    retry: RetryPolicy | None = None,
    **kwargs: Any,
) -> AsyncIterator[OpenAIBackends]:
    kwargs.setdefault("pacing_sleep", RecordingSleep())  # a pause is recorded, never slept
    backends = openai_backends(
        api_key="test-key",
        text_model=TEXT_MODEL,
        image_model=IMAGE_MODEL,
        base_url=base_url if base_url is not None else (server.base_url if server else None),
        retry=retry if retry is not None else RetryPolicy(max_attempts=4),
        sleep=sleep if sleep is not None else RecordingSleep(),
        **kwargs,
    )
    try:
        yield backends
    finally:
        await backends.aclose()


# --- text: mapping ----------------------------------------------------------------------------


async def test_plain_completion_maps_the_reply(allow_loopback: None, server: OpenAIServer) -> None:
    server.script(
        Reply(
            body=chat_completion(
                "hello there",
                model="served-model-2",
                finish_reason="length",
                prompt_tokens=3,
                completion_tokens=4,
                system_fingerprint="fp_abc123",
            )
        )
    )
    async with open_backends(server) as b:
        assert isinstance(b.text, TextBackend)
        assert b.text.label == "openai"
        assert b.text.default_model == TEXT_MODEL
        reply = await b.text.complete(text_request(temperature=0.3, seed=7, max_output_tokens=50))

    assert reply == TextReply(
        text="hello there",
        model="served-model-2",
        refusal=None,
        usage=Usage(3, 4, 7),
        system_fingerprint="fp_abc123",
        finish_reason="length",
        attempts=1,
    )
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer test-key"
    body = request.body
    assert body["model"] == TEXT_MODEL
    assert body["temperature"] == 0.3
    assert body["seed"] == 7
    assert body["max_completion_tokens"] == 50
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi."},
    ]
    assert "response_format" not in body


async def test_unset_optional_params_are_not_sent(
    allow_loopback: None, server: OpenAIServer
) -> None:
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request(model="explicit-model"))
    assert reply.text == "ok"
    (body,) = server.request_bodies
    assert body["model"] == "explicit-model"
    assert not {"seed", "max_completion_tokens", "max_tokens", "response_format"} & set(body)


@pytest.mark.parametrize(
    ("model", "effort"),
    [
        ("gpt-6-luna", "none"),  # honours temperature only with reasoning off
        ("gpt-6-luna-2026-09-22", "none"),  # a dated snapshot of it
        ("gpt-4.1-mini", None),  # no reasoning: nothing to turn off
        ("llama3.1", None),  # unknown to the capability table: nothing extra is sent
    ],
)
async def test_reasoning_effort_none_is_sent_only_to_models_that_need_it_for_temperature(
    model: str, effort: str | None, allow_loopback: None, server: OpenAIServer
) -> None:
    async with open_backends(server) as b:
        await b.text.complete(text_request(model=model, temperature=0.0))
    (body,) = server.request_bodies
    assert body["temperature"] == 0.0
    assert body.get("reasoning_effort") == effort
    assert ("reasoning_effort" in body) is (effort is not None)


async def test_structured_output_sends_json_schema(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(body=chat_completion(json.dumps({"hook": "a heron", "score": 7}))))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request(json_schema=SCHEMA))
    (body,) = server.request_bodies
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "idea_card", "schema": dict(SCHEMA.schema), "strict": True},
    }
    assert reply.text is not None
    assert json.loads(reply.text) == {"hook": "a heron", "score": 7}


async def test_without_structured_outputs_the_schema_ends_the_last_user_message(
    allow_loopback: None, server: OpenAIServer
) -> None:
    """Not a trailing system message: strict chat templates drop or misplace one."""
    async with open_backends(server, structured_outputs=False) as b:
        reply = await b.text.complete(text_request(json_schema=SCHEMA))
    (body,) = server.request_bodies
    assert "response_format" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    last = body["messages"][-1]["content"]
    assert last.startswith("Say hi.\n\n")
    assert "idea_card" in last
    assert last.endswith(json.dumps(SCHEMA.schema, sort_keys=True))
    assert reply.notes == ("schema instruction appended to the last user message",)


async def test_refusal_is_reported(allow_loopback: None, server: OpenAIServer) -> None:
    server.script(Reply(body=chat_completion(None, refusal="I can't help with that.")))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request(json_schema=SCHEMA))
    assert reply.text is None
    assert reply.refusal == "I can't help with that."


# --- text: transport retries ------------------------------------------------------------------


async def test_429_with_retry_after_waits_at_least_that_long(
    allow_loopback: None, server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        Reply(status=429, headers={"Retry-After": "2"}, body=error_body("slow down")),
        Reply(body=chat_completion("after the wait")),
    )
    sleep = RecordingSleep()
    policy = RetryPolicy(max_attempts=4, initial_wait_s=0.1, max_wait_s=1.0)
    with caplog.at_level(logging.WARNING, logger="image_project.backends.retry"):
        async with open_backends(server, sleep=sleep, retry=policy) as b:
            reply = await b.text.complete(text_request())
    assert reply.text == "after the wait"
    assert reply.attempts == 2
    assert len(server.requests) == 2
    assert len(sleep.waits) == 1
    assert sleep.waits[0] >= 2.0
    (record,) = [r for r in caplog.records if "transport retry" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "429" in record.getMessage()


async def test_retry_after_300_fails_the_call_at_once_without_waiting(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(*[Reply(status=429, headers={"Retry-After": "300"})] * 4)
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep) as b:  # max_retry_wait_s: the default 60
        with pytest.raises(RetryAfterTooLongError) as info:
            await b.text.complete(text_request())
    assert len(server.requests) == 1
    assert sleep.waits == []  # neither waited for nor retried early
    assert (info.value.status, info.value.attempts) == (429, 1)
    assert "asked to wait 300 s" in str(info.value)
    assert "backend.max_retry_wait_s (60 s)" in str(info.value)


async def test_retry_after_5_waits_at_least_5_s_before_the_next_attempt(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "5"}), Reply())
    sleep = RecordingSleep()
    policy = RetryPolicy(initial_wait_s=0.01, max_wait_s=0.02, max_retry_wait_s=60.0)
    async with open_backends(server, sleep=sleep, retry=policy) as b:
        reply = await b.text.complete(text_request())
    assert reply.attempts == 2
    (waited,) = sleep.waits
    assert waited >= 5.0


async def test_429_with_retry_after_ms(allow_loopback: None, server: OpenAIServer) -> None:
    server.script(Reply(status=429, headers={"retry-after-ms": "1500"}), Reply())
    sleep = RecordingSleep()
    policy = RetryPolicy(initial_wait_s=0.01, max_wait_s=0.02)
    async with open_backends(server, sleep=sleep, retry=policy) as b:
        reply = await b.text.complete(text_request())
    assert reply.attempts == 2
    assert sleep.waits[0] >= 1.5


async def test_429_without_retry_after_backs_off_exponentially_with_jitter(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(*[Reply(status=429)] * 3, Reply())
    sleep = RecordingSleep()
    policy = RetryPolicy(max_attempts=4, initial_wait_s=1.0, max_wait_s=30.0, jitter=True)
    async with open_backends(server, sleep=sleep, retry=policy, rng=random.Random(1234)) as b:
        reply = await b.text.complete(text_request())
    assert reply.attempts == 4
    w1, w2, w3 = sleep.waits
    assert 0.5 <= w1 <= 1.0
    assert 1.0 <= w2 <= 2.0
    assert 2.0 <= w3 <= 4.0
    assert len({w1, w2, w3}) == 3
    assert w1 < w2 < w3


@pytest.mark.parametrize("status", [500, 503, 408, 409])
async def test_server_errors_are_retried(
    allow_loopback: None, server: OpenAIServer, status: int
) -> None:
    server.script(Reply(status=status), Reply(body=chat_completion("recovered")))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request())
    assert reply.text == "recovered"
    assert reply.attempts == 2
    assert len(server.requests) == 2


async def test_permanent_503_gives_up_after_max_attempts(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(*[Reply(status=503, body=error_body("overloaded", type="server_error"))] * 5)
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep, retry=RetryPolicy(max_attempts=3)) as b:
        with pytest.raises(ServerError) as info:
            await b.text.complete(text_request())
    err = info.value
    assert err.status == 503
    assert err.attempts == 3
    assert "overloaded" in str(err)
    assert "attempt 3 of 3" in str(err)
    assert err.__cause__ is not None
    assert type(err.__cause__).__module__.startswith("openai")
    assert len(server.requests) == 3
    assert len(sleep.waits) == 2


async def test_rate_limit_to_the_end_is_a_rate_limited_error(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(*[Reply(status=429)] * 2)
    async with open_backends(server, retry=RetryPolicy(max_attempts=2)) as b:
        with pytest.raises(RateLimitedError) as info:
            await b.text.complete(text_request())
    assert (info.value.status, info.value.attempts) == (429, 2)


QUOTA_MESSAGE = "You exceeded your current quota, please check your plan and billing details."


@pytest.mark.parametrize(
    ("type_", "code"),
    [
        ("insufficient_quota", "insufficient_quota"),
        ("insufficient_quota", None),
        ("insufficient_quota", "credit_balance_exhausted"),
        ("insufficient_quota", "organization_spend_limit_exceeded"),
        ("insufficient_quota", "project_spend_limit_exceeded"),
        ("insufficient_quota", "organization_usage_limit_exceeded"),
        ("invalid_request_error", "billing_not_active"),
        ("invalid_request_error", "billing_hard_limit_reached"),
    ],
)
async def test_a_429_saying_the_quota_is_used_up_is_not_retried(
    allow_loopback: None, server: OpenAIServer, type_: str, code: str | None
) -> None:
    server.script(*[Reply(status=429, body=error_body(QUOTA_MESSAGE, type=type_, code=code))] * 4)
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep, api_key_env="MY_KEY") as b:
        with pytest.raises(QuotaExceededError) as info:
            await b.text.complete(text_request())
    assert len(server.requests) == 1
    assert sleep.waits == []
    err = info.value
    assert (err.status, err.attempts) == (429, 1)
    message = str(err)
    assert "quota of the account behind MY_KEY is used up" in message
    assert (code or type_) in message and QUOTA_MESSAGE in message
    assert "Not retried" in message and server.base_url in message
    assert "add credit" in message  # where to go about it
    assert not isinstance(err, RateLimitedError)


async def test_a_429_rate_limit_code_is_still_retried(
    allow_loopback: None, server: OpenAIServer
) -> None:
    body = error_body(
        "Rate limit reached for requests", type="requests", code="rate_limit_exceeded"
    )
    server.script(Reply(status=429, body=body), Reply())
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request())
    assert reply.attempts == 2


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_client_errors_are_not_retried(
    allow_loopback: None, server: OpenAIServer, status: int
) -> None:
    server.script(Reply(status=status, body=error_body("Unknown parameter: 'bogus'.")))
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep) as b:
        with pytest.raises(RequestRejectedError) as info:
            await b.text.complete(text_request())
    assert len(server.requests) == 1
    assert sleep.waits == []
    assert info.value.status == status
    assert info.value.attempts == 1
    assert "Unknown parameter: 'bogus'." in str(info.value)
    assert type(info.value.__cause__).__module__.startswith("openai")


async def test_long_server_messages_are_shortened(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(status=400, body=error_body("x" * 5000)))
    async with open_backends(server) as b:
        with pytest.raises(RequestRejectedError) as info:
            await b.text.complete(text_request())
    assert "x" * 200 not in str(info.value)
    assert "x" * 150 in str(info.value)


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_are_not_retried_and_name_the_env_var(
    allow_loopback: None, server: OpenAIServer, status: int
) -> None:
    server.script(Reply(status=status, body=error_body("Incorrect API key provided.")))
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep, api_key_env="MY_PROJECT_OPENAI_KEY") as b:
        with pytest.raises(AuthenticationError) as info:
            await b.text.complete(text_request())
    assert len(server.requests) == 1
    assert sleep.waits == []
    message = str(info.value)
    assert "MY_PROJECT_OPENAI_KEY" in message
    assert server.base_url in message
    assert info.value.status == status
    assert info.value.attempts == 1


async def test_read_timeout_is_retried_then_reported(allow_loopback: None) -> None:
    with OpenAIServer() as server:
        server.script(Reply(delay_s=10.0), Reply(delay_s=10.0))
        async with open_backends(server, timeout_s=0.2, retry=RetryPolicy(max_attempts=2)) as b:
            with pytest.raises(BackendTimeoutError) as info:
                await b.text.complete(text_request())
        assert info.value.attempts == 2
        assert info.value.status is None
        assert len(server.requests) == 2


async def test_dropped_connection_is_retried(allow_loopback: None, server: OpenAIServer) -> None:
    server.script(Reply(disconnect=True), Reply(body=chat_completion("second try")))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request())
    assert reply.text == "second try"
    assert reply.attempts == 2


async def test_dropped_connection_every_time_is_a_connection_error(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(*[Reply(disconnect=True)] * 2)
    async with open_backends(server, retry=RetryPolicy(max_attempts=2)) as b:
        with pytest.raises(BackendConnectionError) as info:
            await b.text.complete(text_request())
    assert info.value.attempts == 2


# --- malformed success answers ---------------------------------------------------------------

ENVOY_TEXT = b"upstream connect error or disconnect/reset before headers. reset reason: overflow"

# A 200 whose body is not a usable completion, as proxies, gateways and broken servers send
# it: (raw body, content type, what the error message must show: of the body, or the field
# that is wrong).
MALFORMED = {
    "html_page": (HTML_PAGE, "text/html; charset=utf-8", "502 Bad Gateway"),
    "truncated_json": (truncated(chat_completion("cut off")), "application/json", '"id"'),
    "wrong_content_type": (ENVOY_TEXT, "text/plain", "upstream connect error"),
    "no_content_type": (HTML_PAGE, None, "502 Bad Gateway"),
    "empty_body": (b"", "application/json", "(empty)"),
    "json_of_another_shape": (b'{"status": "ok"}', "application/json", '"status"'),
    "choices_not_a_list": (b'{"choices": "none today"}', "application/json", "none today"),
    "json_array": (b"[1, 2, 3]", "application/json", "[1, 2, 3]"),
    "content_not_text": (
        json.dumps(chat_completion(None) | {"choices": [{"message": {"content": 5}}]}).encode(),
        "application/json",
        "'choices[0].message.content' is a JSON number",
    ),
}


def malformed(case: str) -> Reply:
    raw, content_type, _ = MALFORMED[case]
    return Reply(raw=raw, content_type=content_type)


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_success_answer_is_retried_like_a_5xx(
    allow_loopback: None, server: OpenAIServer, case: str
) -> None:
    server.script(malformed(case), Reply(body=chat_completion("recovered")))
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep) as b:
        reply = await b.text.complete(text_request())
    assert (reply.text, reply.attempts) == ("recovered", 2)
    assert len(server.requests) == 2
    assert len(sleep.waits) == 1


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_a_malformed_answer_every_time_is_our_error_with_type_and_preview(
    allow_loopback: None, server: OpenAIServer, case: str
) -> None:
    _, content_type, shown = MALFORMED[case]
    server.script(*[malformed(case)] * 3)
    async with open_backends(server, retry=RetryPolicy(max_attempts=3)) as b:
        with pytest.raises(MalformedResponseError) as info:
            await b.text.complete(text_request())
    err = info.value
    assert (err.status, err.attempts) == (200, 3)
    assert len(server.requests) == 3
    message = str(err)
    assert f"content type {content_type or '(none)'!r}" in message
    assert shown in message
    assert "attempt 3 of 3" in message
    assert type(err.__cause__).__name__ == "APIResponseValidationError"
    assert len(message) < 600  # a preview, not the body


async def test_a_json_completion_under_a_wrong_content_type_is_accepted(
    allow_loopback: None, server: OpenAIServer
) -> None:
    # The SDK reads a JSON body whatever the content type says; so do we.
    body = json.dumps(chat_completion("plain but fine")).encode()
    server.script(Reply(raw=body, content_type="text/plain"))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request())
    assert (reply.text, reply.attempts) == ("plain but fine", 1)


async def test_usage_that_is_not_token_counts_is_not_recorded(
    allow_loopback: None, server: OpenAIServer
) -> None:
    body = chat_completion("fine") | {"usage": {"tokens": "many"}}
    server.script(Reply(body=body))
    async with open_backends(server) as b:
        reply = await b.text.complete(text_request())
    assert (reply.text, reply.usage) == ("fine", None)


@pytest.mark.parametrize("case", ["html_page", "truncated_json", "json_array"])
async def test_a_malformed_image_answer_is_retried(
    allow_loopback: None, server: OpenAIServer, case: str
) -> None:
    raw, content_type, _ = MALFORMED[case]
    if case == "truncated_json":
        raw = truncated(image_response())
    server.script(Reply(raw=raw, content_type=content_type), Reply())
    async with open_backends(server) as b:
        reply = await b.image.generate(ImageRequest(prompt="a heron"))
    assert (reply.data, reply.attempts) == (server.default_image, 2)


# --- concurrency ------------------------------------------------------------------------------


async def test_calls_in_flight_never_exceed_the_shared_limiter(
    allow_loopback: None, server: OpenAIServer
) -> None:
    limit = 3
    gate = threading.Event()
    server.gate = gate
    results: list[object] = []
    async with open_backends(server, max_concurrency=limit) as b:

        async def one_text(i: int) -> None:
            results.append(await b.text.complete(text_request(seed=i)))

        async def one_image(i: int) -> None:
            results.append(await b.image.generate(ImageRequest(prompt=f"p{i}")))

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one_text, i)
                tg.start_soon(one_image, i)
            # All requests are held server-side until the gate opens: wait until the
            # limiter's worth has arrived, check nobody else got through, then release.
            arrived = await anyio.to_thread.run_sync(server.wait_for_in_flight, limit)
            assert arrived
            assert server.in_flight == limit
            assert b.transport.limiter.borrowed_tokens == limit
            gate.set()
    assert len(results) == 20
    assert len(server.requests) == 20
    assert server.max_in_flight == limit


async def test_cancellation_is_not_retried_and_frees_the_slot(
    allow_loopback: None, server: OpenAIServer
) -> None:
    gate = threading.Event()
    server.gate = gate
    sleep = RecordingSleep()
    async with open_backends(server, sleep=sleep, max_concurrency=1) as b:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(b.text.complete, text_request())
                assert await anyio.to_thread.run_sync(server.wait_for_requests, 1)
                scope.cancel()
        assert scope.cancelled_caught
        assert b.transport.limiter.borrowed_tokens == 0
        gate.set()
        server.gate = None
        reply = await b.text.complete(text_request())
    assert reply.attempts == 1
    assert sleep.waits == []
    assert len(server.requests) == 2


async def test_a_limiter_object_can_be_shared(allow_loopback: None, server: OpenAIServer) -> None:
    limiter = anyio.CapacityLimiter(2)
    async with open_backends(server, max_concurrency=limiter) as b:
        assert b.transport.limiter is limiter
        await b.text.complete(text_request())
    assert limiter.borrowed_tokens == 0


# --- pacing -----------------------------------------------------------------------------------


def spent_window(reset: str) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": "6",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": reset,
    }


async def test_a_spent_rate_window_holds_the_next_call_and_the_hold_is_not_an_attempt(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(headers=spent_window("1.5s")), Reply())
    clock, retry_sleep = FakeClock(), RecordingSleep()
    async with open_backends(server, sleep=retry_sleep, pacing_sleep=clock.sleep, clock=clock) as b:
        first = await b.text.complete(text_request())
        second = await b.text.complete(text_request())
    assert (first.attempts, first.pacing_wait_ms) == (1, 0.0)
    assert clock.sleeps == [1.5]  # held until the window reset, on the fake clock
    assert (second.attempts, second.pacing_wait_ms) == (1, 1500.0)
    assert retry_sleep.waits == [] and len(server.requests) == 2


class HeldSleep(RecordingSleep):
    """A retry sleep that records the wait and returns only when the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(float(seconds))
        self.entered.set()
        await self.release.wait()


async def test_a_429_pause_holds_the_other_calls_not_the_refused_calls_retry(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "3"}))  # call A, attempt 1
    clock, retry_sleep = FakeClock(), HeldSleep()
    replies: dict[str, TextReply] = {}
    async with open_backends(server, sleep=retry_sleep, pacing_sleep=clock.sleep, clock=clock) as b:

        async def call(name: str, seed: int) -> None:
            replies[name] = await b.text.complete(text_request(seed=seed))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "A", 1)
            await retry_sleep.entered.wait()  # A was refused and is waiting out its 3 s
            await call("B", 2)  # B starts during A's wait
            retry_sleep.release.set()
    assert retry_sleep.waits[0] >= 3.0
    assert clock.sleeps == [3.0]  # B was held for the server's pause ...
    assert (replies["B"].attempts, replies["B"].pacing_wait_ms) == (1, 3000.0)  # not an attempt
    assert (replies["A"].attempts, replies["A"].pacing_wait_ms) == (2, 0.0)  # not held twice
    assert [r.seed for r in server.requests] == [1, 2, 1]
    assert b.transport.limiter.total_tokens == 4  # the 429 halved the shared limit (8)


async def test_an_image_call_held_by_a_spent_window_reports_its_wait(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(headers=spent_window("2s")), Reply(body=image_response(b"png-bytes")))
    clock = FakeClock()
    async with open_backends(server, pacing_sleep=clock.sleep, clock=clock) as b:
        await b.text.complete(text_request())
        reply = await b.image.generate(ImageRequest(prompt="a heron", seed=5))
    assert clock.sleeps == [2.0]
    assert (reply.attempts, reply.pacing_wait_ms) == (1, 2000.0)


# --- images -----------------------------------------------------------------------------------


async def test_image_generation_decodes_base64_to_the_exact_bytes(
    allow_loopback: None, server: OpenAIServer
) -> None:
    payload = bytes(range(256)) * 4
    server.script(
        Reply(body=image_response(payload, revised_prompt="a calmer heron", output_format="webp"))
    )
    async with open_backends(server) as b:
        assert isinstance(b.image, ImageBackend)
        assert b.image.label == "openai"
        reply = await b.image.generate(
            ImageRequest(prompt="a heron", size="1024x1024", quality="medium", seed=5)
        )
    assert reply.data == payload
    assert reply.model == IMAGE_MODEL
    assert reply.format == "webp"
    assert reply.revised_prompt == "a calmer heron"
    assert reply.attempts == 1
    (request,) = server.requests
    assert request.path == "/v1/images/generations"
    assert request.body == {
        "model": IMAGE_MODEL,
        "prompt": "a heron",
        "size": "1024x1024",
        "quality": "medium",
        "n": 1,
    }


async def test_dall_e_models_are_asked_for_base64(
    allow_loopback: None, server: OpenAIServer
) -> None:
    async with open_backends(server) as b:
        reply = await b.image.generate(ImageRequest(prompt="a heron", model="dall-e-3"))
    assert reply.data == server.default_image
    (body,) = server.request_bodies
    assert body["response_format"] == "b64_json"


async def test_image_reply_without_base64_is_an_error(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(body=image_response(None, url="https://example.invalid/img.png")))
    async with open_backends(server) as b:
        with pytest.raises(BackendError) as info:
            await b.image.generate(ImageRequest(prompt="a heron"))
    assert "b64_json" in str(info.value)
    assert "URL" in str(info.value)
    assert len(server.requests) == 1


async def test_image_errors_are_retried_like_text(
    allow_loopback: None, server: OpenAIServer
) -> None:
    server.script(Reply(status=502), Reply())
    async with open_backends(server) as b:
        reply = await b.image.generate(ImageRequest(prompt="a heron"))
    assert reply.attempts == 2


# --- network policy and construction ----------------------------------------------------------


async def test_network_is_denied_by_default_under_tests(server: OpenAIServer) -> None:
    async with open_backends(server) as b:
        with pytest.raises(NetworkDisabledError) as info:
            await b.text.complete(text_request())
        with pytest.raises(NetworkDisabledError):
            await b.image.generate(ImageRequest(prompt="a heron"))
    assert "allow_loopback" in str(info.value)
    assert server.requests == []


@pytest.mark.parametrize("base_url", ["https://api.openai.com/v1", "http://10.1.2.3:8080/v1"])
async def test_loopback_policy_refuses_other_hosts(allow_loopback: None, base_url: str) -> None:
    async with open_backends(None, base_url=base_url) as b:
        with pytest.raises(NetworkDisabledError) as info:
            await b.text.complete(text_request())
    assert "loopback" in str(info.value)


async def test_loopback_policy_refuses_the_default_openai_url(allow_loopback: None) -> None:
    async with open_backends(None) as b:
        assert b.transport.base_url.startswith("https://api.openai.com/")
        with pytest.raises(NetworkDisabledError):
            await b.text.complete(text_request())


def test_set_network_policy_returns_the_previous_policy() -> None:
    assert openai_backend.get_network_policy() == "deny"
    previous = set_network_policy("loopback")
    try:
        assert previous == "deny"
        assert set_network_policy("any") == "loopback"
    finally:
        set_network_policy(previous)
    with pytest.raises(ValueError):
        set_network_policy("sometimes")  # type: ignore[arg-type]


def test_transport_rejects_a_blank_key() -> None:
    with pytest.raises(AuthenticationError) as info:
        OpenAITransport(api_key="")
    assert "OPENAI_API_KEY" in str(info.value)


# --- text: the request body -----------------------------------------------------------------


def test_usage_keeps_cached_tokens_when_the_server_reports_them() -> None:
    from openai.types import CompletionUsage

    from image_project.backends.openai_backend import _usage

    details = {"cached_tokens": 1024}
    reported = _usage(
        CompletionUsage.model_validate(
            {
                "prompt_tokens": 2000,
                "completion_tokens": 10,
                "total_tokens": 2010,
                "prompt_tokens_details": details,
            }
        )
    )
    assert reported == Usage(2000, 10, 2010, 1024)
    silent = _usage(
        CompletionUsage.model_validate(
            {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        )
    )
    assert silent is not None and silent.cached_tokens is None
    assert (reported + silent).cached_tokens == 1024
    assert (silent + silent).cached_tokens is None


async def test_top_logprobs_are_asked_for_only_when_the_request_sets_them(
    server: OpenAIServer, allow_loopback: None
) -> None:
    async with open_backends(server) as backends:
        assert isinstance(backends.text, openai_backend.OpenAITextBackend)
        plain = backends.text.body(text_request(), TEXT_MODEL)
        asked = backends.text.body(text_request(top_logprobs=5), TEXT_MODEL)
        reply = await backends.text.complete(text_request(top_logprobs=5))
    assert "logprobs" not in plain and "top_logprobs" not in plain
    assert asked["logprobs"] is True and asked["top_logprobs"] == 5
    assert reply.logprobs is None  # this server returns none: the judge falls back loudly


def test_the_answer_token_logprobs_are_read_from_the_choice() -> None:
    from openai.types.chat.chat_completion import Choice

    # The answer, as the SDK's own type holds it.
    choice = Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "85"},
            "logprobs": {
                "content": [
                    {
                        "token": "8",
                        "logprob": -0.1,
                        "bytes": None,
                        "top_logprobs": [
                            {"token": "8", "logprob": -0.1, "bytes": None},
                            {"token": "9", "logprob": -2.5, "bytes": None},
                        ],
                    },
                    {"token": "5", "logprob": 0.0, "bytes": None, "top_logprobs": []},
                ]
            },
        }
    )
    got = openai_backend._logprobs(choice)
    assert got is not None and [t.token for t in got] == ["8", "5"]
    assert got[0].top == (("8", -0.1), ("9", -2.5)) and got[1].top == ()
    empty = Choice.model_validate(
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "x"}}
    )
    assert openai_backend._logprobs(empty) is None


def test_only_the_adapter_and_the_probe_import_the_sdk_and_none_its_http() -> None:
    """The adapter is the seam to the SDK (the model probe lists models with its own SDK
    client); the SDK's HTTP library is the SDK's business, imported by no module."""
    import ast
    from pathlib import Path

    import image_project

    root = Path(image_project.__file__).parent
    importers: dict[str, set[str]] = {"openai": set(), "httpx2": set()}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top in importers:
                    importers[top].add(path.relative_to(root).as_posix())
    assert importers == {
        "openai": {"backends/openai_backend.py", "backends/probe.py"},
        "httpx2": set(),
    }
