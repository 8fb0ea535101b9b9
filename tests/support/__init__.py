"""Helpers shared by tests: a scripted OpenAI-compatible server and a recording sleep."""

from __future__ import annotations

import anyio.lowlevel


class RecordingSleep:
    """An injectable ``sleep`` that records each requested wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(float(seconds))
        await anyio.lowlevel.checkpoint()
