"""The one transport retry policy (STYLE habit 7).

A call to a model service is retried when the *transport* failed in a way that may pass:
HTTP 429, 408, 409, any 5xx, a timeout, a connection error, or a success status whose body
was not a usable answer (an HTML page from a proxy, truncated JSON: a
:class:`~image_project.errors.MalformedResponseError`). Every other 4xx (400, 401,
403, 404, 422, ...) is the caller's fault and is never retried. "The model answered, but
badly" is a different layer (the stages' bounded re-asks); this module never sees it, and it
logs under its own logger with a ``transport retry`` prefix so the two are easy to tell apart.

Waits are exponential with *equal jitter*: after failed attempt ``n`` the base wait is
``min(max_wait_s, initial_wait_s * 2 ** (n - 1))`` and the actual wait is drawn uniformly
from ``[base / 2, base]`` (exactly ``base`` when ``jitter`` is off). Equal jitter keeps the
waits growing from one attempt to the next while still spreading concurrent clients apart.

When the server says how long to wait (``retry-after-ms``, else ``Retry-After`` as seconds
or an HTTP date) the next attempt is never earlier than that, even beyond ``max_wait_s``.
With jitter on, up to :data:`RETRY_AFTER_SPREAD` (10%) of the requested wait is added at
random, so twenty calls told "retry after 2 s" at once do not all come back in the same
millisecond (a retry storm in lockstep). A requested wait longer than the policy's
``max_retry_wait_s`` (``backend.max_retry_wait_s``, default 60 s) is not waited for at all:
the call fails at once with a :class:`~image_project.errors.RetryAfterTooLongError` naming
the wait asked for and the setting. Retrying earlier than asked would only be refused again,
and waiting minutes unasked would look like a hang.
Adapters attach the parsed server delay to the error they raise with
:func:`attach_retry_after`; the policy reads it back with :func:`retry_after_of`.

The jitter source is a ``random.Random`` instance (never the global ``random`` functions),
one per :class:`Retrier` (:func:`image_project.seeding.rng_for`), so that the calls of one
transport draw successive, different waits. By default it is seeded from a fresh seed
(:func:`image_project.seeding.fresh_seed`) when the Retrier is built: a fixed default would
make every process, on every machine, draw the same waits, so that clients hit by one 429
would retry in lockstep, which jitter exists to prevent. Tests inject their own generator. Jitter only spreads load and never
influences what a run produces. The sleep function is injectable too (default
:func:`anyio.sleep`) so tests can record the requested waits without sleeping.

A :class:`Retrier` is built once per transport: the first attempt of every call runs directly
(no tenacity machinery, nothing drawn, nothing logged); only a call whose first attempt failed
in a retryable way goes through a tenacity loop, which replays that failure as its attempt 1
(the same waits, logs and attempt counts as a loop from the start).
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio

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
    preview,
)
from image_project.seeding import fresh_seed, rng_for

if TYPE_CHECKING:  # tenacity is imported on the first retry only (offline runs never retry)
    from tenacity import RetryCallState

log = logging.getLogger(__name__)

RETRY_AFTER_SPREAD = 0.1
"""With jitter, a server-requested wait gets up to this fraction of itself added at random."""

_RETRYABLE_4XX = frozenset({408, 409, 429})
_RETRY_AFTER_ATTR = "_image_project_retry_after_s"

SleepFn = Callable[[float], Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How many transport attempts to make and how long to wait between them.

    ``max_attempts`` counts every attempt, the first included (1 = never retry).
    ``max_retry_wait_s`` is the longest server-requested wait (``Retry-After``) honoured; a
    call asked to wait longer fails at once.
    """

    max_attempts: int = 4
    initial_wait_s: float = 1.0
    max_wait_s: float = 30.0
    jitter: bool = True
    max_retry_wait_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: got {self.max_attempts!r}, must be an int >= 1")
        if not self.initial_wait_s >= 0:
            raise ValueError(f"initial_wait_s: got {self.initial_wait_s!r}, must be >= 0")
        if not self.max_wait_s >= self.initial_wait_s:
            raise ValueError(
                f"max_wait_s: got {self.max_wait_s!r}, must be >= initial_wait_s "
                f"({self.initial_wait_s!r})"
            )
        if not self.max_retry_wait_s >= 0:
            raise ValueError(f"max_retry_wait_s: got {self.max_retry_wait_s!r}, must be >= 0")

    def backoff_s(self, attempt: int, rng: random.Random) -> float:
        """The jittered exponential wait after failed attempt number ``attempt`` (1-based)."""
        exponent = min(max(attempt - 1, 0), 60)
        base = min(self.max_wait_s, self.initial_wait_s * 2.0**exponent)
        if not self.jitter:
            return base
        return rng.uniform(base / 2, base)


def is_retryable_status(status: int | None) -> bool:
    """429, 408, 409 and every 5xx may pass on a later attempt; nothing else does."""
    if status is None:
        return False
    return status in _RETRYABLE_4XX or 500 <= status <= 599


def should_retry(exc: BaseException) -> bool:
    """Whether a failed attempt is worth another try.

    Judged on our error tree (adapters map vendor errors first): timeouts, connection errors,
    rate limits, server errors and malformed success answers are retried; authentication
    failures, rejected requests, a used-up quota (a 429 that waiting does not cure), a
    disabled network and a server asking for a longer wait than the policy allows never are. A :class:`BackendError` of no more specific kind is
    judged by its HTTP status. Python's own ``TimeoutError`` / ``ConnectionError`` count as
    transport failures too; anything else (a bug, a cancellation) is never retried.
    """
    if isinstance(
        exc,
        AuthenticationError
        | RequestRejectedError
        | NetworkDisabledError
        | QuotaExceededError
        | RetryAfterTooLongError,
    ):
        return False
    if isinstance(
        exc,
        BackendTimeoutError
        | BackendConnectionError
        | RateLimitedError
        | ServerError
        | MalformedResponseError,
    ):
        return True
    if isinstance(exc, BackendError):
        return is_retryable_status(exc.status)
    return isinstance(exc, TimeoutError | ConnectionError)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait in seconds a response asks for, or None when it does not say (or says nonsense).

    ``retry-after-ms`` (milliseconds, an OpenAI extension) wins over ``Retry-After``, which
    may be seconds (fractions allowed) or an HTTP date (relative to ``now``, a Unix time,
    default the current time). A date in the past means "now": 0.0. Header names are
    matched case-insensitively.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    millis = parse_non_negative(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = parse_non_negative(raw)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    reference = time.time() if now is None else now
    return max(0.0, when.timestamp() - reference)


def parse_non_negative(raw: str | None) -> float | None:
    """A header's finite, non-negative number, or None when absent or unreadable."""
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def attach_retry_after(exc: BaseException, seconds: float | None) -> None:
    """Record on ``exc`` the wait the server asked for (None = it did not ask)."""
    if seconds is not None:
        setattr(exc, _RETRY_AFTER_ATTR, float(seconds))


def retry_after_of(exc: BaseException | None) -> float | None:
    """The server-requested wait attached by :func:`attach_retry_after`, if any."""
    if exc is None:
        return None
    value: float | None = getattr(exc, _RETRY_AFTER_ATTR, None)
    return value


def wait_seconds(
    policy: RetryPolicy, attempt: int, exc: BaseException | None, rng: random.Random
) -> float:
    """How long to wait after failed attempt ``attempt`` that raised ``exc``.

    The jittered backoff, raised to the server's requested wait when it sent one (never
    less: plus up to :data:`RETRY_AFTER_SPREAD` of it at random when jitter is on). Requests
    above ``policy.max_retry_wait_s`` never get here: :func:`call_with_retry` fails them.
    """
    backoff = policy.backoff_s(attempt, rng)
    requested = retry_after_of(exc)
    if requested is None:
        return backoff
    floor = requested
    if policy.jitter:
        floor += rng.uniform(0.0, RETRY_AFTER_SPREAD * floor)
    return max(backoff, floor)


def refuse_long_wait(exc: BackendError, policy: RetryPolicy) -> RetryAfterTooLongError | None:
    """The error to fail with at once when ``exc`` would be retried but its server asked to wait
    longer than ``policy.max_retry_wait_s``; None when the wait (if any) is honoured."""
    requested = retry_after_of(exc)
    if requested is None or requested <= policy.max_retry_wait_s or not should_retry(exc):
        return None
    return RetryAfterTooLongError(
        f"{exc}; the server asked to wait {requested:g} s before a retry, more than "
        f"backend.max_retry_wait_s ({policy.max_retry_wait_s:g} s), so the call fails now "
        "instead of waiting or retrying early",
        status=exc.status,
        attempts=exc.attempts,
    )


@dataclass(frozen=True)
class Attempted(Generic[T]):
    """A successful result and the number of transport attempts it took (1 = first try)."""

    value: T
    attempts: int


class Retrier:
    """The retry policy applied to calls, built once (per transport) and shared by every call.

    :meth:`call` runs ``attempt_fn(1)`` directly; if it fails in a way worth retrying (and the
    policy allows more attempts), the call continues in a tenacity loop that replays that
    failure as attempt 1. ``rng`` None means a generator from a fresh seed (different in
    every process), kept for the Retrier's life so that successive calls draw different
    jitter.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        sleep: SleepFn | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy
        self._sleep: SleepFn = sleep if sleep is not None else anyio.sleep
        self._rng = rng if rng is not None else rng_for(fresh_seed(), "retry jitter")

    async def call(
        self, attempt_fn: Callable[[int], Awaitable[T]], *, what: str = "model call"
    ) -> Attempted[T]:
        """Run ``attempt_fn(attempt_number)`` until it succeeds or the policy gives up; see
        :func:`call_with_retry`."""
        try:
            return Attempted(await self._attempt(attempt_fn, 1), 1)
        except Exception as exc:
            if self.policy.max_attempts == 1 or not should_retry(exc):
                raise
            first = exc
        return await self._retry_after(first, attempt_fn, what)

    async def _attempt(self, attempt_fn: Callable[[int], Awaitable[T]], number: int) -> T:
        try:
            return await attempt_fn(number)
        except BackendError as exc:
            exc.attempts = number
            too_long = refuse_long_wait(exc, self.policy)
            if too_long is not None:
                raise too_long from exc
            raise

    async def _retry_after(
        self, first: Exception, attempt_fn: Callable[[int], Awaitable[T]], what: str
    ) -> Attempted[T]:
        """The slow path: a tenacity loop whose attempt 1 is the failure already seen."""
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        policy, rng = self.policy, self._rng

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            return wait_seconds(policy, state.attempt_number, exc, rng)

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            log.warning(
                "transport retry: %s attempt %d of %d failed (%s); retrying in %.2f s",
                what,
                state.attempt_number,
                policy.max_attempts,
                _describe(exc),
                state.upcoming_sleep,
            )

        async def replayed(number: int) -> T:
            if number == 1:
                raise first
            return await self._attempt(attempt_fn, number)

        retrying = AsyncRetrying(
            sleep=self._sleep,
            stop=stop_after_attempt(policy.max_attempts),
            wait=wait,
            retry=retry_if_exception(should_retry),
            before_sleep=log_retry,
            reraise=True,
        )
        result: Attempted[T] | None = None
        async for attempt in retrying:
            with attempt:
                number = attempt.retry_state.attempt_number
                result = Attempted(await replayed(number), number)
        if result is None:  # pragma: no cover - tenacity re-raises the last error instead
            raise RuntimeError(f"{what}: retry loop ended without a result")
        return result


async def call_with_retry(
    attempt_fn: Callable[[int], Awaitable[T]],
    *,
    policy: RetryPolicy,
    sleep: SleepFn | None = None,
    rng: random.Random | None = None,
    what: str = "model call",
) -> Attempted[T]:
    """Run ``attempt_fn(attempt_number)`` until it succeeds or the policy gives up.

    ``attempt_fn`` receives the 1-based attempt number (so errors can say "attempt 3 of 4").
    On giving up, the last attempt's exception is re-raised unchanged, except that a
    :class:`BackendError` gets ``attempts`` set to the number of attempts made, and a retryable
    one whose server asked to wait more than ``policy.max_retry_wait_s`` is raised at once as
    a :class:`RetryAfterTooLongError` (chained to it). ``what`` names the call in the WARNING
    logged before each retry. A one-off :class:`Retrier`; a transport keeps one instead.
    """
    return await Retrier(policy, sleep=sleep, rng=rng).call(attempt_fn, what=what)


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no exception"
    status = exc.status if isinstance(exc, BackendError) else None
    prefix = f"HTTP {status} " if status is not None else ""
    return f"{prefix}{type(exc).__name__}: {preview(str(exc), 160)}"
