"""Adaptive pacing of model calls: when they may go out, not whether they are retried.

Two mechanisms, shared by every call of one transport (:class:`Pacer`):

* **The rate window.** OpenAI-compatible servers say on every answer how much of their quota
  is left: ``x-ratelimit-remaining-requests`` / ``-tokens`` and when it is whole again,
  ``x-ratelimit-reset-requests`` / ``-tokens`` (durations such as ``20ms``, ``1.5s``,
  ``6m0s``: :func:`parse_duration`), plus ``x-ratelimit-limit-requests``. The pacer keeps a
  *budget* of requests it may still start; each start spends one. When it is spent, new calls
  are held until the window has reset (then the budget is the learned limit, or unknown)
  or until an answer shows that a new window has begun (then the budget is what it says is
  left, less the other calls let go since that window began, which the server may not have
  counted yet; a later answer can otherwise only lower it);
  when no remaining tokens are left, until the tokens reset. A 429 with ``Retry-After`` holds
  *every* new call that long, not only the refused one, so the calls around it do not walk
  into the same refusal. Nothing is held longer than ``max_hold_s`` (the retry policy's
  ``max_retry_wait_s``): a longer window (a daily quota) is left to the server to refuse.
  Without headers there is no hold at all.
* **The concurrency limit** (:class:`AdaptiveLimit`): the shared ``CapacityLimiter`` of
  ``backend.max_concurrency`` slots is an AIMD window. A 429 halves it (multiplicative
  decrease, at most once per round: calls that started before the last decrease cannot shrink
  it again); every ``n`` successes at limit ``n`` raise it by one (additive increase). It
  never goes above the configured ``max_concurrency`` nor below 1.

**A shared budget** (:class:`SharedBudget`, optional): when several processes or machines use
one API key (a campaign's workers, :mod:`image_project.campaign`), each attempt also spends
one request of a budget they all share, after the rate window let it go; every answer's
``x-ratelimit-limit-requests`` and the window's length (the longest reset seen) tell that
budget its rate, as they tell this pacer. The time it held a call counts in ``waited_s``.

Waiting for a pacing slot is not an attempt: the retry layer counts attempts, the pacer only
decides when an attempt may be sent, and reports how long each call was held
(:attr:`CallPacing.waited_s`: the hold of the rate window plus the wait for a concurrency
slot), which the transcript records per step. Pacing changes when calls go out, never what
they ask or what a run produces.

Waits use an injectable ``sleep`` and ``clock`` (defaults :func:`anyio.sleep` and
:func:`time.monotonic`). A finished sleep counts as the wait it was asked for, whatever the
clock says, so a test's instant fake sleep never spins; the same holds for the retry layer's
sleep: a call that was refused with ``Retry-After`` and has waited it out in the retry layer
is not held again for the pause its own refusal set.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio

from image_project.backends.retry import SleepFn, parse_non_negative

Outcome = Literal["ok", "rate_limited", "failed"]

_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(raw: str | None) -> float | None:
    """Seconds in OpenAI's duration format (``20ms``, ``1s``, ``1.5s``, ``6m0s``, ``1h2m3s``;
    Go's units ``h m s ms us µs ns``) or a plain number of seconds; None when absent or not a
    non-negative finite duration."""
    if raw is None:
        return None
    text = raw.strip()
    try:
        seconds = float(text)
    except ValueError:
        if not _DURATION.fullmatch(text):
            return None
        seconds = sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _count(raw: str | None) -> int | None:
    value = parse_non_negative(raw)
    return None if value is None else int(value)


@dataclass(frozen=True)
class RateLimitHeaders:
    """The ``x-ratelimit-*`` headers of one answer (None: absent or unreadable)."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None


def parse_rate_limit_headers(headers: Mapping[str, str]) -> RateLimitHeaders:
    """Read OpenAI's ``x-ratelimit-*`` headers (names matched case-insensitively)."""
    h = {name.lower(): value for name, value in headers.items()}
    return RateLimitHeaders(
        limit_requests=_count(h.get("x-ratelimit-limit-requests")),
        remaining_requests=_count(h.get("x-ratelimit-remaining-requests")),
        reset_requests_s=parse_duration(h.get("x-ratelimit-reset-requests")),
        remaining_tokens=_count(h.get("x-ratelimit-remaining-tokens")),
        reset_tokens_s=parse_duration(h.get("x-ratelimit-reset-tokens")),
    )


class AdaptiveLimit:
    """An AIMD concurrency limit over ``limiter``: its ``total_tokens`` at construction is the
    ceiling (``backend.max_concurrency``), never exceeded; the floor is 1.

    :meth:`decrease` halves the limit (rounded down) unless the call reporting the 429
    started before the last decrease (its ``epoch`` is older): one burst of refusals is one
    signal. :meth:`increase` adds one after as many successes as the current limit.
    """

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        total = limiter.total_tokens
        if not isinstance(total, int) or total < 1:
            raise ValueError(f"the limiter needs a whole number of tokens >= 1, got {total!r}")
        self.limiter = limiter
        self.ceiling = total
        self.epoch = 0
        self._current = total
        self._successes = 0

    @property
    def current(self) -> int:
        return self._current

    def decrease(self, epoch: int) -> bool:
        """Halve the limit for a 429 seen by a call that started in ``epoch``; False when that
        round has already been answered with a decrease."""
        if epoch != self.epoch:
            return False
        self.epoch += 1
        self._successes = 0
        self._set(max(1, self._current // 2))
        return True

    def increase(self) -> None:
        """Count a success; every ``current`` successes raise the limit by one."""
        if self._current >= self.ceiling:
            return
        self._successes += 1
        if self._successes >= self._current:
            self._successes = 0
            self._set(self._current + 1)

    def _set(self, value: int) -> None:
        self._current = min(self.ceiling, max(1, value))
        if self.limiter.total_tokens != self._current:
            self.limiter.total_tokens = self._current


class SharedBudget(Protocol):
    """A request budget shared with other processes on the same API key (see the module
    docstring): :meth:`learn` is told the limit and window the headers show, :meth:`spend`
    waits until one more request fits the shared window and records it, returning the
    seconds it waited. Before the first :meth:`learn` it holds nothing."""

    def learn(self, limit: int, window_s: float) -> None: ...

    async def spend(self) -> float: ...


@dataclass
class CallPacing:
    """One call across its attempts: how long it was held, and the pause its own 429 set."""

    waited_s: float = 0.0
    own_pause: float | None = None


@dataclass
class Slot:
    """One attempt's permission to send: the AIMD round it started in."""

    pacer: Pacer
    call: CallPacing
    epoch: int
    sent: float = 0.0  # the pacer's clock when it let the attempt go

    def answered(
        self,
        headers: Mapping[str, str],
        outcome: Outcome,
        *,
        retry_after: float | None = None,
    ) -> None:
        """Report the server's answer: its headers and whether it was a success, a 429 that may
        pass (with the wait it asked for) or another failure."""
        self.pacer.answered(self, headers, outcome, retry_after)


class Pacer:
    """The rate window and the AIMD concurrency limit shared by every call of a transport;
    see the module docstring. Use :meth:`slot` around each attempt's request."""

    def __init__(
        self,
        limiter: anyio.CapacityLimiter,
        *,
        max_hold_s: float = math.inf,
        sleep: SleepFn | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.limit = AdaptiveLimit(limiter)
        self.max_hold_s = max_hold_s
        self._sleep: SleepFn = sleep if sleep is not None else anyio.sleep
        self._clock = clock if clock is not None else time.monotonic
        self._budget: int | None = None  # requests we may still start (None: unknown)
        self._window_end: float | None = None  # when the request window is whole again
        self._window_limit: int | None = None  # x-ratelimit-limit-requests
        self._pause_until: float | None = None  # no call starts before this
        self._in_flight = 0
        self._sent: list[float] = []  # when each attempt in flight was let go
        self._window_len = 0.0  # the longest reset seen: the window's length, at least
        self._changed = anyio.Event()
        self._held = 0  # calls waiting now for the rate window or a 429 pause
        self._answers = 0  # answers read so far (headers or not)
        self._watchers: list[Callable[[], None]] = []
        self.shared: SharedBudget | None = None

    def share(self, budget: SharedBudget) -> None:
        """Also spend ``budget`` (shared with other processes) for every attempt."""
        self.shared = budget

    @property
    def budget(self) -> int | None:
        return self._budget

    @property
    def paused_until(self) -> float | None:
        return self._pause_until

    @property
    def held(self) -> int:
        """Calls held right now by the rate window or a 429 pause (not those waiting for a
        concurrency slot): nonzero means the budget is spent."""
        return self._held

    @property
    def answers(self) -> int:
        """Answers reported so far: 0 means the budget has not been heard of yet."""
        return self._answers

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (synchronously, on the event loop) whenever the budget may have
        changed: an answer, a window reset, a pause over, a slot given back. A batch uses it
        to decide when one more run fits (:mod:`image_project.run.batch`)."""
        self._watchers.append(callback)

    @asynccontextmanager
    async def slot(self, call: CallPacing) -> AsyncIterator[Slot]:
        """Hold until a concurrency slot is free and the rate window allows a request; the
        time held (0 when nothing held it) is added to ``call.waited_s``. Report the answer
        with :meth:`Slot.answered` before leaving."""
        start = self._clock()
        limiter = self.limit.limiter
        queued = limiter.borrowed_tokens >= limiter.total_tokens
        async with limiter:
            held = await self._wait_turn(call)
            if self.shared is not None:
                held = await self.shared.spend() > 0 or held
            if queued or held:
                call.waited_s += max(0.0, self._clock() - start)
            self._in_flight += 1
            sent = self._clock()
            self._sent.append(sent)
            try:
                yield Slot(self, call, self.limit.epoch, sent)
            finally:
                self._in_flight -= 1
                self._sent.remove(sent)
                self._settle()

    def answered(
        self, slot: Slot, headers: Mapping[str, str], outcome: Outcome, retry_after: float | None
    ) -> None:
        now = self._clock()
        self._answers += 1
        window = parse_rate_limit_headers(headers)
        self._read_window(window, now, slot.sent)
        if self.shared is not None and self._window_limit is not None and self._window_len > 0:
            self.shared.learn(self._window_limit, self._window_len)
        if outcome == "ok":
            self.limit.increase()
        elif outcome == "rate_limited":
            self.limit.decrease(slot.epoch)
            if retry_after is not None and retry_after <= self.max_hold_s:
                slot.call.own_pause = self._pause(now + retry_after)
        self._notify()

    # -- the rate window ------------------------------------------------------------------

    async def _wait_turn(self, call: CallPacing) -> bool:
        """Wait until the window allows one more request and spend it; True if it had to
        wait."""
        held = False
        while True:
            now = self._clock()
            self._expire(now, call)
            if self._pause_until is None and (self._budget is None or self._budget > 0):
                if self._budget is not None:
                    self._budget -= 1
                return held
            held = True
            self._held += 1
            try:
                if self._pause_until is not None:
                    await self._sleep_until(self._pause_until, now, self._end_pause)
                elif self._window_end is not None:
                    await self._sleep_until(self._window_end, now, self._reset_window)
                else:  # spent, reset unknown: the next answer of a call in flight will tell
                    await self._changed.wait()
            finally:
                self._held -= 1
                if not self._held:
                    self._notify()

    def _expire(self, now: float, call: CallPacing) -> None:
        pause = self._pause_until
        if pause is not None and (now >= pause or pause == call.own_pause):
            # Over, or the pause this call's own 429 set: the retry layer has waited it out.
            self._end_pause(pause)
        if self._window_end is not None and now >= self._window_end:
            self._reset_window(self._window_end)

    async def _sleep_until(self, target: float, now: float, done: Callable[[float], None]) -> None:
        await self._sleep(target - now)
        done(target)  # a finished sleep is the wait it was asked for, whatever the clock says

    def _end_pause(self, target: float) -> None:
        if self._pause_until == target:
            self._pause_until = None
            self._notify()

    def _reset_window(self, target: float) -> None:
        if self._window_end == target:
            self._window_end = None
            self._budget = self._window_limit
            self._notify()

    def _pause(self, until: float) -> float:
        if self._pause_until is None or until > self._pause_until:
            self._pause_until = until
        return self._pause_until

    def _read_window(self, h: RateLimitHeaders, now: float, sent: float = -math.inf) -> None:
        if h.limit_requests is not None and h.limit_requests > 0:
            self._window_limit = h.limit_requests
        remaining, reset = h.remaining_requests, h.reset_requests_s
        if remaining is not None and reset is not None and reset <= self.max_hold_s:
            end = now + reset
            known = self._window_end
            self._window_end = end if known is None else max(known, end)
            self._window_len = max(self._window_len, reset)
            if self._budget is None:  # the calls still in flight may not be counted yet
                self._budget = max(0, remaining - (self._in_flight - 1))
            elif known is not None and _next_window(known, end, reset):
                # The first answer of a window that began since the one this pacer knew (its
                # spent budget says nothing about the new one): what it says is left, less
                # the other calls let go since the window began (the server may not have
                # counted them yet; those sent before count against the old window).
                began = end - self._window_len
                since = sum(1 for t in self._sent if t >= began) - (sent >= began)
                self._budget = max(0, remaining - since)
            else:
                self._budget = min(self._budget, remaining)
        tokens, tokens_reset = h.remaining_tokens, h.reset_tokens_s
        if tokens == 0 and tokens_reset is not None and tokens_reset <= self.max_hold_s:
            self._pause(now + tokens_reset)

    def _settle(self) -> None:
        if self._budget == 0 and self._window_end is None and self._in_flight == 0:
            self._budget = None  # spent, with nothing in flight to say when it resets
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
        for callback in self._watchers:
            callback()


def _next_window(known_end: float, end: float, reset: float) -> bool:
    """An answer whose window ends later than the known one by more than half its own
    length to go (and more than a transit time, 50 ms): a new window, not the known one
    seen a few milliseconds later."""
    return end - known_end > max(0.05, reset / 2)
