"""The one transport retry policy: what is retried, how long it waits, how it gives up."""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
from typing import TypedDict

import pytest

from image_project.backends.retry import (
    RETRY_AFTER_SPREAD,
    Retrier,
    RetryPolicy,
    attach_retry_after,
    call_with_retry,
    is_retryable_status,
    parse_retry_after,
    retry_after_of,
    should_retry,
    wait_seconds,
)
from image_project.errors import (
    AuthenticationError,
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    NetworkDisabledError,
    QuotaExceededError,
    RateLimitedError,
    RequestRejectedError,
    RetryAfterTooLongError,
    ServerError,
)
from image_project.seeding import rng_for
from tests.support import RecordingSleep

# --- should_retry ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        RateLimitedError("x", status=429),
        ServerError("x", status=500),
        ServerError("x", status=503),
        ServerError("x", status=408),
        ServerError("x", status=409),
        BackendError("x", status=502),
        BackendError("x", status=408),
        BackendError("x", status=409),
        BackendError("x", status=429),
        BackendTimeoutError("x"),
        BackendConnectionError("x"),
        TimeoutError(),
        ConnectionResetError(),
    ],
    ids=repr,
)
def test_should_retry_transient_failures(exc: BaseException) -> None:
    assert should_retry(exc)


@pytest.mark.parametrize(
    "exc",
    [
        AuthenticationError("x", status=401),
        AuthenticationError("x", status=403),
        RequestRejectedError("x", status=400),
        RequestRejectedError("x", status=404),
        RequestRejectedError("x", status=422),
        BackendError("x", status=400),
        BackendError("x", status=401),
        BackendError("x", status=422),
        BackendError("x", status=None),
        NetworkDisabledError("x"),
        RetryAfterTooLongError("x", status=429),
        RetryAfterTooLongError("x", status=503),
        QuotaExceededError("x", status=429),
        ValueError("a bug"),
        asyncio.CancelledError(),
    ],
    ids=repr,
)
def test_should_not_retry_permanent_failures(exc: BaseException) -> None:
    assert not should_retry(exc)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, False),
        (200, False),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, True),
        (422, False),
        (429, True),
        (500, True),
        (503, True),
        (599, True),
    ],
)
def test_is_retryable_status(status: int | None, expected: bool) -> None:
    assert is_retryable_status(status) is expected


# --- parse_retry_after ----------------------------------------------------------------------


def test_retry_after_seconds() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": " 1.5 "}) == 1.5


def test_retry_after_ms_wins_over_seconds() -> None:
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After-Ms": "1500"}) == 1.5


def test_retry_after_http_date_is_relative_to_now() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": header}, now=now) == pytest.approx(30.0)


def test_retry_after_http_date_in_the_past_means_now() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now - 300, usegmt=True)
    assert parse_retry_after({"Retry-After": header}, now=now) == 0.0


@pytest.mark.parametrize(
    "headers",
    [{}, {"Retry-After": "soon"}, {"Retry-After": "-3"}, {"Retry-After": "nan"}, {"x": "1"}],
    ids=repr,
)
def test_retry_after_absent_or_nonsense_is_none(headers: dict[str, str]) -> None:
    assert parse_retry_after(headers) is None


def test_bad_retry_after_ms_falls_back_to_retry_after() -> None:
    assert parse_retry_after({"retry-after-ms": "abc", "retry-after": "3"}) == 3.0


def test_attach_and_read_retry_after() -> None:
    exc = RateLimitedError("x", status=429)
    assert retry_after_of(exc) is None
    attach_retry_after(exc, None)
    assert retry_after_of(exc) is None
    attach_retry_after(exc, 4)
    assert retry_after_of(exc) == 4.0
    assert retry_after_of(None) is None


# --- waits ----------------------------------------------------------------------------------


def test_backoff_without_jitter_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(initial_wait_s=1.0, max_wait_s=10.0, jitter=False)
    rng = random.Random(0)
    waits = [wait_seconds(policy, n, None, rng) for n in range(1, 7)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_jittered_backoff_stays_within_equal_jitter_bounds() -> None:
    policy = RetryPolicy(initial_wait_s=0.5, max_wait_s=6.0, jitter=True)
    rng = random.Random(42)
    for attempt in range(1, 8):
        base = min(6.0, 0.5 * 2 ** (attempt - 1))
        samples = [wait_seconds(policy, attempt, None, rng) for _ in range(200)]
        assert all(base / 2 <= w <= base for w in samples)
        assert len(set(samples)) > 100  # actually jittered, not a fixed interval


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    policy = RetryPolicy()
    first = [wait_seconds(policy, n, None, random.Random(7)) for n in range(1, 5)]
    second = [wait_seconds(policy, n, None, random.Random(7)) for n in range(1, 5)]
    assert first == second


def test_server_requested_wait_is_a_floor_even_above_max_wait() -> None:
    policy = RetryPolicy(initial_wait_s=0.1, max_wait_s=1.0, jitter=False)
    exc = RateLimitedError("x", status=429)
    attach_retry_after(exc, 5.0)
    assert wait_seconds(policy, 1, exc, random.Random(0)) == 5.0


def test_server_requested_wait_is_spread_upwards_by_jitter() -> None:
    policy = RetryPolicy(initial_wait_s=0.1, max_wait_s=1.0)
    exc = RateLimitedError("x", status=429)
    attach_retry_after(exc, 2.0)
    rng = random.Random(3)
    waits = [wait_seconds(policy, 1, exc, rng) for _ in range(50)]
    assert all(2.0 <= w <= 2.0 * (1 + RETRY_AFTER_SPREAD) for w in waits)
    assert len(set(waits)) == 50  # twenty callers told "2 s" do not come back together


def test_server_requested_wait_below_backoff_keeps_backoff() -> None:
    policy = RetryPolicy(initial_wait_s=8.0, max_wait_s=30.0, jitter=False)
    exc = ServerError("x", status=503)
    attach_retry_after(exc, 1.0)
    assert wait_seconds(policy, 1, exc, random.Random(0)) == 8.0


def test_server_requested_wait_is_never_cut() -> None:
    # A Retry-After cut short would only be retried early and refused again. A wait that
    # long is refused before this point (call_with_retry); what is waited for is never
    # shortened.
    exc = RateLimitedError("x", status=429)
    attach_retry_after(exc, 3600.0)
    assert wait_seconds(RetryPolicy(jitter=False), 1, exc, random.Random(0)) == 3600.0
    jittered = wait_seconds(RetryPolicy(), 1, exc, random.Random(0))
    assert 3600.0 <= jittered <= 3600.0 * (1 + RETRY_AFTER_SPREAD)


class RetryPolicyOptions(TypedDict, total=False):
    """The fields of :class:`RetryPolicy`."""

    max_attempts: int
    initial_wait_s: float
    max_wait_s: float
    jitter: bool
    max_retry_wait_s: float


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_wait_s": -1.0},
        {"initial_wait_s": 5.0, "max_wait_s": 1.0},
        {"max_retry_wait_s": -1.0},
        {"max_retry_wait_s": float("nan")},
    ],
    ids=repr,
)
def test_policy_rejects_nonsense(kwargs: RetryPolicyOptions) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


# --- call_with_retry ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_call_with_retry_succeeds_after_transient_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleep = RecordingSleep()
    seen: list[int] = []

    async def attempt(number: int) -> str:
        seen.append(number)
        if number < 3:
            raise ServerError("boom", status=503)
        return "done"

    with caplog.at_level(logging.WARNING, logger="image_project.backends.retry"):
        result = await call_with_retry(
            attempt, policy=RetryPolicy(), sleep=sleep, rng=random.Random(0), what="test call"
        )
    assert (result.value, result.attempts) == ("done", 3)
    assert seen == [1, 2, 3]
    assert len(sleep.waits) == 2
    retry_logs = [r for r in caplog.records if "transport retry" in r.getMessage()]
    assert len(retry_logs) == 2
    assert all(r.levelno == logging.WARNING for r in retry_logs)
    assert "test call" in retry_logs[0].getMessage()
    assert "503" in retry_logs[0].getMessage()


@pytest.mark.anyio
async def test_call_with_retry_does_not_retry_permanent_errors() -> None:
    sleep = RecordingSleep()
    calls = 0

    async def attempt(number: int) -> str:
        nonlocal calls
        calls += 1
        raise RequestRejectedError("bad request", status=400)

    with pytest.raises(RequestRejectedError) as info:
        await call_with_retry(attempt, policy=RetryPolicy(), sleep=sleep)
    assert calls == 1
    assert info.value.attempts == 1
    assert sleep.waits == []


@pytest.mark.anyio
async def test_call_with_retry_gives_up_after_max_attempts() -> None:
    sleep = RecordingSleep()

    async def attempt(number: int) -> str:
        raise RateLimitedError(f"limited #{number}", status=429)

    with pytest.raises(RateLimitedError) as info:
        await call_with_retry(
            attempt, policy=RetryPolicy(max_attempts=3), sleep=sleep, rng=random.Random(1)
        )
    assert info.value.attempts == 3
    assert str(info.value) == "limited #3"
    assert len(sleep.waits) == 2


@pytest.mark.anyio
async def test_call_with_retry_single_attempt_policy_never_sleeps() -> None:
    sleep = RecordingSleep()

    async def attempt(number: int) -> str:
        raise BackendTimeoutError("slow")

    with pytest.raises(BackendTimeoutError) as info:
        await call_with_retry(attempt, policy=RetryPolicy(max_attempts=1), sleep=sleep)
    assert info.value.attempts == 1
    assert sleep.waits == []


# --- server-requested waits above max_retry_wait_s ---------------------------------------------


def limited(retry_after: float, cls: type[BackendError] = RateLimitedError) -> BackendError:
    exc = cls("chat.completions was rate limited (attempt 1 of 4)", status=429)
    if cls is ServerError:
        exc.status = 503
    attach_retry_after(exc, retry_after)
    return exc


@pytest.mark.anyio
@pytest.mark.parametrize("cls", [RateLimitedError, ServerError])
async def test_a_wait_above_max_retry_wait_fails_at_once_naming_the_wait_and_the_setting(
    cls: type[BackendError],
) -> None:
    sleep = RecordingSleep()
    calls = 0

    async def attempt(number: int) -> str:
        nonlocal calls
        calls += 1
        raise limited(300.0, cls)

    with pytest.raises(RetryAfterTooLongError) as info:
        await call_with_retry(attempt, policy=RetryPolicy(max_retry_wait_s=60.0), sleep=sleep)
    assert calls == 1
    assert sleep.waits == []
    err = info.value
    assert (err.status, err.attempts) == (429 if cls is RateLimitedError else 503, 1)
    assert isinstance(err.__cause__, cls)
    message = str(err)
    assert "asked to wait 300 s" in message
    assert "backend.max_retry_wait_s (60 s)" in message
    assert "rate limited (attempt 1 of 4)" in message  # the server's own error is kept


@pytest.mark.anyio
@pytest.mark.parametrize("requested", [5.0, 60.0])
async def test_a_wait_up_to_max_retry_wait_is_honoured_never_earlier(requested: float) -> None:
    sleep = RecordingSleep()

    async def attempt(number: int) -> str:
        if number == 1:
            raise limited(requested)
        return "done"

    policy = RetryPolicy(initial_wait_s=0.1, max_wait_s=1.0, max_retry_wait_s=60.0)
    result = await call_with_retry(attempt, policy=policy, sleep=sleep, rng=random.Random(5))
    assert (result.value, result.attempts) == ("done", 2)
    (waited,) = sleep.waits
    assert requested <= waited <= requested * (1 + RETRY_AFTER_SPREAD)


@pytest.mark.anyio
async def test_a_long_wait_on_an_error_that_is_not_retried_keeps_that_error() -> None:
    async def attempt(number: int) -> str:
        exc = RequestRejectedError("bad request", status=400)
        attach_retry_after(exc, 300.0)
        raise exc

    with pytest.raises(RequestRejectedError):
        await call_with_retry(attempt, policy=RetryPolicy(), sleep=RecordingSleep())


@pytest.mark.anyio
async def test_a_long_wait_on_a_later_attempt_fails_there_with_its_attempt_count() -> None:
    sleep = RecordingSleep()

    async def attempt(number: int) -> str:
        raise limited(2.0 if number == 1 else 120.0)

    with pytest.raises(RetryAfterTooLongError) as info:
        await call_with_retry(attempt, policy=RetryPolicy(jitter=False), sleep=sleep)
    assert info.value.attempts == 2
    assert sleep.waits == [2.0]


# --- Retrier (built once per transport) -----------------------------------------------------


class CountingRandom(random.Random):
    """A seeded generator that counts its draws."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.draws = 0

    def uniform(self, a: float, b: float) -> float:
        self.draws += 1
        return super().uniform(a, b)


@pytest.mark.anyio
async def test_a_retrier_first_attempt_success_draws_nothing_and_sleeps_never() -> None:
    sleep, rng = RecordingSleep(), CountingRandom(3)
    retrier = Retrier(RetryPolicy(), sleep=sleep, rng=rng)

    async def attempt(number: int) -> int:
        return number

    for _ in range(5):
        assert (await retrier.call(attempt)).attempts == 1
    assert rng.draws == 0 and sleep.waits == []


@pytest.mark.anyio
async def test_a_retrier_draws_successive_waits_from_one_seeded_generator() -> None:
    """One generator for the Retrier's life: two calls that both retry wait differently; two
    Retriers given generators of the same seed wait exactly alike (the waits are seeded), and
    two default Retriers (two processes, say) do not retry in lockstep."""

    async def waits_of_two_calls(rng: random.Random | None) -> list[float]:
        sleep = RecordingSleep()
        retrier = Retrier(RetryPolicy(), sleep=sleep, rng=rng)

        async def attempt(number: int) -> str:
            if number == 1:
                raise ServerError("boom", status=503)
            return "ok"

        for _ in range(2):
            assert (await retrier.call(attempt)).attempts == 2
        return list(sleep.waits)

    first = await waits_of_two_calls(rng_for(7, "retry jitter"))
    second = await waits_of_two_calls(rng_for(7, "retry jitter"))
    assert len(first) == 2 and first[0] != first[1]
    assert first == second
    assert await waits_of_two_calls(None) != await waits_of_two_calls(None)
