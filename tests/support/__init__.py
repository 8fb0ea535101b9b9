"""Helpers shared by tests: a scripted OpenAI-compatible server, a recording sleep and a fake
clock."""

from __future__ import annotations

import anyio.lowlevel


class RecordingSleep:
    """An injectable ``sleep`` that records each requested wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(float(seconds))
        await anyio.lowlevel.checkpoint()


class FakeClock:
    """A virtual monotonic clock (call it for the time) and a ``sleep`` that moves it on at
    once instead of sleeping, recording each wait. Concurrent sleeps overlap as real ones do:
    a sleep started at ``t`` for ``s`` seconds moves the clock to ``t + s`` unless it is
    already later."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake = self.now + max(0.0, seconds)
        self.sleeps.append(float(seconds))
        await anyio.lowlevel.checkpoint()
        self.now = max(self.now, wake)
