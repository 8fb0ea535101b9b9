"""The AIMD concurrency limit under any sequence of answers: it never leaves 1..max_concurrency
and the shared limiter always has exactly its number of tokens."""

from __future__ import annotations

import anyio
from hypothesis import given
from hypothesis import strategies as st

from image_project.backends.pacing import AdaptiveLimit


@given(st.integers(1, 256), st.lists(st.sampled_from(["ok", "429", "stale429"]), max_size=300))
def test_the_limit_stays_within_one_and_max_concurrency(ceiling: int, events: list[str]) -> None:
    limiter = anyio.CapacityLimiter(ceiling)
    aimd = AdaptiveLimit(limiter)
    for event in events:
        if event == "ok":
            aimd.increase()
        else:
            aimd.decrease(aimd.epoch if event == "429" else aimd.epoch - 1)
        assert 1 <= aimd.current <= ceiling
        assert limiter.total_tokens == aimd.current
