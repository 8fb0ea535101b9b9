from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from image_project.engine.fanout import ordered_fanout
from image_project.errors import cancelled_paths_of

pytestmark = pytest.mark.anyio


async def test_results_come_back_in_input_order_not_completion_order() -> None:
    finished: list[int] = []
    events = [anyio.Event() for _ in range(4)]

    def make(i: int) -> Callable[[], Awaitable[int]]:
        async def fn() -> int:
            if i < 3:
                await events[i + 1].wait()  # 3 finishes first, then 2, 1, 0
            finished.append(i)
            events[i].set()
            return i * 10

        return fn

    assert await ordered_fanout([make(i) for i in range(4)]) == [0, 10, 20, 30]
    assert finished == [3, 2, 1, 0]


async def test_lowest_index_failure_wins_and_others_become_notes() -> None:
    both_started = anyio.Event()
    started = 0

    def make(i: int) -> Callable[[], Awaitable[int]]:
        async def fn() -> int:
            nonlocal started
            started += 1
            if started == 3:
                both_started.set()
            await both_started.wait()
            if i == 0:
                return 0
            raise ValueError(f"fail {i}")

        return fn

    with pytest.raises(ValueError, match="fail 1") as info:
        await ordered_fanout([make(i) for i in range(3)], labels=["a", "b", "c"])
    assert any("c: ValueError: fail 2" in note for note in getattr(info.value, "__notes__", []))
    assert cancelled_paths_of(info.value) == ()


async def test_limiter_bounds_concurrency() -> None:
    limiter = anyio.CapacityLimiter(3)
    in_flight = peak = 0

    async def fn() -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.lowlevel.checkpoint()
        in_flight -= 1

    await ordered_fanout([fn] * 10, limiter=limiter)
    assert peak == 3


async def test_labels_must_match() -> None:
    async def fn() -> None: ...

    with pytest.raises(ValueError, match="labels"):
        await ordered_fanout([fn], labels=["a", "b"])
