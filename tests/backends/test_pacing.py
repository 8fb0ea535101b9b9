"""Adaptive pacing: reading ``x-ratelimit-*`` headers, the AIMD concurrency limit, and holding
calls for the rate window. Every wait is on a :class:`FakeClock` (asked for, never slept).
The AIMD bounds under any sequence of answers: tests/property/test_pacing_properties.py."""

from __future__ import annotations

import math

import anyio
import pytest

from image_project.backends.pacing import (
    AdaptiveLimit,
    CallPacing,
    Pacer,
    RateLimitHeaders,
    parse_duration,
    parse_rate_limit_headers,
)
from tests.support import FakeClock
from tests.support.openai_server import openai_duration

# --- parse_duration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("20ms", 0.02),
        ("1.5s", 1.5),
        ("59.123s", 59.123),
        ("1m30.5s", 90.5),
        ("1h2m3s", 3723.0),
        ("0s", 0.0),
        ("500us", 0.0005),
        ("250µs", 0.00025),
        ("7ns", 7e-9),
        (" 12ms ", 0.012),
        ("2", 2.0),
        ("0.25", 0.25),
    ],
)
def test_parse_duration_reads_openai_durations(raw: str, seconds: float) -> None:
    assert parse_duration(raw) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "raw", [None, "", "soon", "-1s", "1x", "s", "1s2", "ms", "nan", "inf", "-3", "1 s", "1s-2s"]
)
def test_parse_duration_rejects_nonsense(raw: str | None) -> None:
    assert parse_duration(raw) is None


@pytest.mark.parametrize("seconds", [0.0, 0.0004, 0.02, 0.999, 1.0, 1.5, 59.9991, 360.0, 3725.25])
def test_the_test_servers_durations_read_back_never_shorter(seconds: float) -> None:
    parsed = parse_duration(openai_duration(seconds))
    assert parsed is not None and seconds <= parsed <= seconds + 0.001 + 1e-9


# --- parse_rate_limit_headers ---------------------------------------------------------------


def test_rate_limit_headers_are_read_case_insensitively() -> None:
    headers = {
        "X-RateLimit-Limit-Requests": "500",
        "x-ratelimit-remaining-requests": "499",
        "x-ratelimit-reset-requests": "120ms",
        "x-ratelimit-limit-tokens": "30000",
        "X-Ratelimit-Remaining-Tokens": "29950",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    parsed = parse_rate_limit_headers(headers)
    assert parsed == RateLimitHeaders(
        limit_requests=500,
        remaining_requests=499,
        reset_requests_s=parsed.reset_requests_s,
        remaining_tokens=29950,
        reset_tokens_s=360.0,
    )
    assert parsed.reset_requests_s == pytest.approx(0.12)


def test_absent_or_unreadable_rate_limit_headers_are_none() -> None:
    assert parse_rate_limit_headers({}) == RateLimitHeaders()
    junk = {
        "x-ratelimit-remaining-requests": "many",
        "x-ratelimit-reset-requests": "later",
        "x-ratelimit-remaining-tokens": "-5",
        "x-ratelimit-limit-requests": "nan",
    }
    assert parse_rate_limit_headers(junk) == RateLimitHeaders()


# --- AdaptiveLimit (AIMD) ---------------------------------------------------------------------


def test_the_limit_starts_at_the_ceiling_and_halves_on_429_down_to_one() -> None:
    limiter = anyio.CapacityLimiter(8)
    aimd = AdaptiveLimit(limiter)
    assert (aimd.ceiling, aimd.current) == (8, 8)
    seen = []
    for _ in range(5):
        aimd.decrease(aimd.epoch)
        seen.append((aimd.current, limiter.total_tokens))
    assert seen == [(4, 4), (2, 2), (1, 1), (1, 1), (1, 1)]


def test_one_burst_of_429s_is_one_decrease() -> None:
    aimd = AdaptiveLimit(anyio.CapacityLimiter(8))
    started = aimd.epoch  # four calls in flight since this round began all get a 429
    assert [aimd.decrease(started) for _ in range(4)] == [True, False, False, False]
    assert aimd.current == 4
    assert aimd.decrease(aimd.epoch) and aimd.current == 2  # a call of the next round


def test_the_limit_grows_by_one_per_round_of_successes_never_above_the_ceiling() -> None:
    limiter = anyio.CapacityLimiter(5)
    aimd = AdaptiveLimit(limiter)
    aimd.decrease(aimd.epoch)  # 5 -> 2
    grown = []
    for _ in range(20):
        aimd.increase()
        grown.append(aimd.current)
    # 2 successes at limit 2, 3 at 3, 4 at 4, then the ceiling.
    assert grown[:9] == [2, 3, 3, 3, 4, 4, 4, 4, 5]
    assert set(grown[9:]) == {5} and limiter.total_tokens == 5


def test_a_429_resets_the_count_towards_the_next_increase() -> None:
    aimd = AdaptiveLimit(anyio.CapacityLimiter(8))
    aimd.decrease(aimd.epoch)  # 4
    for _ in range(3):
        aimd.increase()
    aimd.decrease(aimd.epoch)  # 2, and the three successes are forgotten
    aimd.increase()
    assert aimd.current == 2
    aimd.increase()
    assert aimd.current == 3


def test_a_limiter_without_a_whole_number_of_tokens_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        AdaptiveLimit(anyio.CapacityLimiter(math.inf))


# --- Pacer: holding calls for the rate window ------------------------------------------------


def make_pacer(tokens: int = 8, *, max_hold_s: float = 60.0) -> tuple[Pacer, FakeClock]:
    clock = FakeClock()
    pacer = Pacer(
        anyio.CapacityLimiter(tokens), max_hold_s=max_hold_s, sleep=clock.sleep, clock=clock
    )
    return pacer, clock


def window(remaining: int, reset: str, limit: int | None = None) -> dict[str, str]:
    headers = {
        "x-ratelimit-remaining-requests": str(remaining),
        "x-ratelimit-reset-requests": reset,
    }
    if limit is not None:
        headers["x-ratelimit-limit-requests"] = str(limit)
    return headers


async def one_call(
    pacer: Pacer, headers: dict[str, str] | None = None, *, call: CallPacing | None = None
) -> CallPacing:
    call = call if call is not None else CallPacing()
    async with pacer.slot(call) as slot:
        slot.answered(headers or {}, "ok")
    return call


@pytest.mark.anyio
async def test_without_headers_nothing_is_held() -> None:
    pacer, clock = make_pacer()
    calls = [await one_call(pacer) for _ in range(20)]
    assert clock.sleeps == [] and {c.waited_s for c in calls} == {0.0}
    assert pacer.budget is None


@pytest.mark.anyio
async def test_a_spent_window_holds_the_next_call_until_it_resets() -> None:
    pacer, clock = make_pacer()
    first = await one_call(pacer, window(0, "1.5s"))
    assert first.waited_s == 0.0
    second = await one_call(pacer)
    assert clock.sleeps == [1.5]
    assert second.waited_s == pytest.approx(1.5)


@pytest.mark.anyio
async def test_the_remaining_requests_go_at_once_then_the_window_is_waited_for() -> None:
    pacer, clock = make_pacer()
    await one_call(pacer, window(2, "2s", limit=3))
    start = clock.now
    calls = [await one_call(pacer) for _ in range(2)]
    assert clock.sleeps == [] and clock.now == start
    held = await one_call(pacer)  # the budget is spent: held until the window is whole
    assert clock.sleeps == [2.0] and held.waited_s == pytest.approx(2.0)
    assert pacer.budget == 2  # the learned limit (3), one spent by the held call
    assert {c.waited_s for c in calls} == {0.0}


@pytest.mark.anyio
async def test_a_later_answer_can_only_lower_the_budget_and_extend_the_window() -> None:
    pacer, clock = make_pacer()
    await one_call(pacer, window(5, "1s"))
    await one_call(pacer, window(1, "3s"))  # another client used the quota too
    assert pacer.budget == 1
    await one_call(pacer, window(9, "500ms"))  # stale and generous: ignored
    assert pacer.budget == 0
    await one_call(pacer)
    assert clock.sleeps == [3.0]


@pytest.mark.anyio
async def test_an_answer_from_a_new_window_renews_a_spent_budget() -> None:
    # Fixed windows of 1 s. The budget is spent and the pacer expects the window to end at
    # 1001 (its reading of an earlier answer, a little late by the transit time). The server's
    # window turns over just before; a call in flight is answered in the new one: 47 left,
    # ending a second later. The pacer used to keep its spent budget and hold every call until
    # the end of that new window too: a whole window lost (found by bench/batch.py).
    pacer, clock = make_pacer()
    answer = anyio.Event()

    async def in_flight() -> None:
        async with pacer.slot(CallPacing()) as slot:
            await answer.wait()
            slot.answered(window(47, "1s", limit=48), "ok")

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_flight)
        await anyio.wait_all_tasks_blocked()
        await one_call(pacer, window(0, "1s", limit=48))
        assert pacer.budget == 0
        clock.now += 0.99  # before the pacer's own end of the window
        answer.set()
    assert pacer.budget == 47
    calls = [await one_call(pacer) for _ in range(3)]
    assert clock.sleeps == [] and {c.waited_s for c in calls} == {0.0}


@pytest.mark.anyio
async def test_a_new_window_is_not_charged_for_calls_let_go_before_it_began() -> None:
    # A long call (an image: seconds) let go in the old window is still in flight when the
    # new window's first answer comes: the server counted it in the old window, so the new
    # budget is all that the answer says is left.
    pacer, clock = make_pacer()
    answers = [anyio.Event(), anyio.Event()]

    async def in_flight(index: int, headers: dict[str, str]) -> None:
        async with pacer.slot(CallPacing()) as slot:
            await answers[index].wait()
            slot.answered(headers, "ok")

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_flight, 0, {})  # the long call
        tg.start_soon(in_flight, 1, window(47, "1s", limit=48))
        await anyio.wait_all_tasks_blocked()
        await one_call(pacer, window(0, "1s", limit=48))
        clock.now += 0.99
        answers[1].set()
        await anyio.wait_all_tasks_blocked()
        assert pacer.budget == 47
        answers[0].set()


@pytest.mark.anyio
async def test_the_same_window_seen_a_little_later_does_not_renew_the_budget() -> None:
    pacer, clock = make_pacer()
    await one_call(pacer, window(1, "1s"))
    clock.now += 0.02  # 20 ms later: the same window's end, shifted by a transit time
    await one_call(pacer, window(5, "990ms"))
    assert pacer.budget == 0


@pytest.mark.anyio
async def test_calls_in_flight_count_against_the_first_window_seen() -> None:
    # Four calls are in flight when the first answer says 3 left: the other three may not
    # have been counted by the server yet, so none is left for a fifth call.
    pacer, clock = make_pacer()
    entered = anyio.Event()
    release = anyio.Event()
    inside = 0

    async def held_call() -> None:
        nonlocal inside
        async with pacer.slot(CallPacing()) as slot:
            inside += 1
            if inside == 4:
                entered.set()
            await release.wait()
            slot.answered({}, "ok")

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(held_call)
        async with pacer.slot(CallPacing()) as slot:
            inside += 1
            if inside == 4:
                entered.set()
            await entered.wait()
            slot.answered(window(3, "1s"), "ok")
        assert pacer.budget == 0
        release.set()
    await one_call(pacer)
    assert clock.sleeps == [1.0]


@pytest.mark.anyio
async def test_a_429_with_retry_after_holds_every_other_call_but_not_its_own_retry() -> None:
    pacer, clock = make_pacer()
    refused = CallPacing()
    async with pacer.slot(refused) as slot:
        slot.answered({}, "rate_limited", retry_after=5.0)
    assert pacer.paused_until == clock.now + 5.0
    other = await one_call(pacer)  # a new call is held for the server's pause
    assert clock.sleeps == [5.0] and other.waited_s == pytest.approx(5.0)

    pacer, clock = make_pacer()
    refused = CallPacing()
    async with pacer.slot(refused) as slot:
        slot.answered({}, "rate_limited", retry_after=5.0)
    # The refused call's retry comes back after the retry layer waited the 5 s (its own,
    # recorded, sleep); the pacer does not hold it a second time for the pause it set.
    await one_call(pacer, call=refused)
    assert clock.sleeps == [] and refused.waited_s == 0.0
    assert pacer.paused_until is None


@pytest.mark.anyio
async def test_waits_longer_than_max_hold_are_left_to_the_server() -> None:
    pacer, clock = make_pacer(max_hold_s=60.0)
    async with pacer.slot(CallPacing()) as slot:
        slot.answered(window(0, "23h59m0s"), "rate_limited", retry_after=300.0)
    assert pacer.paused_until is None and pacer.budget is None
    await one_call(pacer)
    assert clock.sleeps == []


@pytest.mark.anyio
async def test_no_tokens_left_holds_until_the_tokens_reset() -> None:
    pacer, clock = make_pacer()
    tokens = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "3s"}
    await one_call(pacer, tokens)
    await one_call(pacer)
    assert clock.sleeps == [3.0]


@pytest.mark.anyio
async def test_a_spent_budget_with_no_reset_known_waits_for_the_call_in_flight() -> None:
    pacer, clock = make_pacer()
    await one_call(pacer, window(0, "1s", limit=1))
    order: list[str] = []

    async def third() -> None:
        order.append("third waiting")
        await one_call(pacer)
        order.append("third sent")

    async with anyio.create_task_group() as tg, pacer.slot(CallPacing()) as second:
        # Held until the window reset, then it spent the learned limit of 1 request.
        assert clock.sleeps == [1.0] and pacer.budget == 0
        tg.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert order == ["third waiting"]  # no reset known: it waits, without a sleep
        second.answered({}, "ok")  # an answer that says nothing more
        await anyio.wait_all_tasks_blocked()
        assert order == ["third waiting"]
    # The second call has left: nothing in flight can say when the window resets, so the
    # budget is unknown again and the third call goes (never a deadlock).
    assert order == ["third waiting", "third sent"]
    assert clock.sleeps == [1.0]


@pytest.mark.anyio
async def test_the_aimd_limit_bounds_the_calls_in_flight() -> None:
    pacer, _ = make_pacer(tokens=4)
    async with pacer.slot(CallPacing()) as slot:
        slot.answered({}, "rate_limited")
    assert pacer.limit.limiter.total_tokens == 2
    inside = peak = 0
    release = anyio.Event()

    async def call() -> None:
        nonlocal inside, peak
        async with pacer.slot(CallPacing()) as slot:
            inside += 1
            peak = max(peak, inside)
            await release.wait()
            inside -= 1
            slot.answered({}, "ok")

    async with anyio.create_task_group() as tg:
        for _ in range(6):
            tg.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        assert inside == peak == 2  # four calls wait for a slot of the shrunk limit
        release.set()
    assert pacer.limit.current == 4  # grown back: 2 successes at 2, 3 at 3, then the ceiling


class RecordingBudget:
    """A shared budget that counts what the pacer asks of it and holds each call ``hold_s``
    on ``clock``."""

    def __init__(self, clock: FakeClock | None = None, hold_s: float = 0.0) -> None:
        self.learned: list[tuple[int, float]] = []
        self.spent = 0
        self.clock, self.hold_s = clock, hold_s

    def learn(self, limit: int, window_s: float) -> None:
        self.learned.append((limit, window_s))

    async def spend(self) -> float:
        self.spent += 1
        if self.clock is not None and self.hold_s:
            await self.clock.sleep(self.hold_s)
        return self.hold_s


@pytest.mark.anyio
async def test_a_shared_budget_is_spent_once_per_attempt_and_told_the_headers_window() -> None:
    pacer, _ = make_pacer()
    budget = RecordingBudget()
    pacer.share(budget)
    await one_call(pacer)  # no headers: nothing to tell the budget
    assert (budget.spent, budget.learned) == (1, [])
    await one_call(pacer, window(9, "0.8s", limit=10))
    await one_call(pacer, window(8, "0.5s", limit=10))
    assert budget.spent == 3
    assert budget.learned == [(10, 0.8), (10, 0.8)], "the limit, and the longest reset seen"


@pytest.mark.anyio
async def test_a_call_the_shared_budget_held_counts_as_waited() -> None:
    pacer, clock = make_pacer()
    pacer.share(RecordingBudget(clock, hold_s=0.25))
    call = await one_call(pacer)
    assert call.waited_s == pytest.approx(0.25)
    assert clock.sleeps == [0.25]
