"""The project's work per chat call does not grow with the conversation.

Measured without a clock: the number of Python function calls (``sys.setprofile`` "call"
events) between a step's start and its end, for the engine's part (prompt, conversation
check, request, record) plus the real OpenAI adapter's body for that request, along a
conversation of 40 turns. Building and encoding the body has to touch every message, but it
does so in comprehensions and C (``json``), not with a function call per message; a check,
copy or validation that called something per message per call would make the count grow.
The control plants such a per-message call in the same run and shows the measure sees it.
What the SDK does with the body inside ``chat.completions.create`` is the library's and is
not counted. bench/latency.py reports the client CPU per call in time
(``along_conversation``).
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, cast

import pytest

from image_project import testing
from image_project.backends.base import TextRequest
from image_project.backends.openai_backend import openai_backends
from image_project.engine.context import Context, EngineEvent
from image_project.engine.nodes import ChatStep
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.testing import FunctionTextBackend

pytestmark = pytest.mark.anyio

TURNS = 40


_FAKE = testing.__file__


class _Counter:
    """Counts the calls of Python functions, except the test fake's own (the stand-in for
    the server, which looks at the messages to answer)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename != _FAKE:
            self.calls += 1


@contextmanager
def counting() -> Iterator[_Counter]:
    """Count with the cyclic garbage collector off (after a collection): a collection inside
    a step would run the finalizers (``__del__``) of other tests' garbage, calls that are not
    the step's."""
    counter = _Counter()
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(counter)
    try:
        yield counter
    finally:
        sys.setprofile(previous)
        if enabled:
            gc.enable()


class _PerStep(DefaultStepRecorder):
    """Counts the function calls from each step's start to its end."""

    def __init__(self) -> None:
        super().__init__()
        self.counter: _Counter | None = None
        self.started = 0
        self.per_step: list[tuple[int, int]] = []  # (messages before the step, calls)

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        super().on_step_start(ctx, path, **metrics)
        assert self.counter is not None
        self.started = self.counter.calls

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        assert self.counter is not None
        calls = self.counter.calls - self.started
        assert record.type == "chat"
        self.per_step.append((record.context_messages, calls))
        super().on_step_end(ctx, record)


def _adapter_body(
    per_message: Callable[[dict[str, str]], object] | None = None,
) -> Callable[[TextRequest], str]:
    """An answer function that first builds and encodes the real adapter's body (and, for
    the control, calls ``per_message`` on each of its messages)."""
    backends = openai_backends(
        api_key="test", text_model="m", image_model="i", base_url="http://127.0.0.1:9/v1"
    )
    text = backends.text

    def answer(request: TextRequest) -> str:
        body = text.body(request, "m")
        json.dumps(body)
        if per_message is not None:
            for message in body["messages"]:
                per_message(cast(dict[str, str], message))
        return f"answer {len(request.messages)}"

    return answer


async def _per_step(answer: Callable[[TextRequest], str]) -> list[tuple[int, int]]:
    """(messages before the step, calls) of each step of a conversation of :data:`TURNS`."""
    recorder = _PerStep()
    runner = ChatRunner(FunctionTextBackend(answer), recorder=recorder)
    ctx = Context.with_system("sys")
    with counting() as counter:
        recorder.counter = counter
        async with runner.root(ctx).scope("pipeline", merge="all_messages") as pipeline:
            for i in range(TURNS):
                await pipeline.ask(ChatStep(name=f"turn{i}", prompt=f"say {i}", temperature=0.0))
    return recorder.per_step


async def test_calls_per_chat_step_stay_flat_along_a_long_conversation() -> None:
    per_step = await _per_step(_adapter_body())
    assert [m for m, _ in per_step] == [1 + 2 * i for i in range(TURNS)]
    calls = [c for _, c in per_step]
    # The first step pays one-time work (caches); from the second on, every step makes the
    # same calls whether it sends 4 messages or 80. A call now and then that the step did
    # not make (a finaliser or weakref callback the collector runs inside it) is no growth,
    # so the steps near the start and near the end are compared by their medians: one call
    # per message would put 70 calls between them.
    assert calls[1] > 0
    early, late = statistics.median(calls[1:6]), statistics.median(calls[-5:])
    assert late == early, calls
    assert max(calls[1:]) - min(calls[1:]) < TURNS, calls


async def test_the_measure_sees_a_per_message_cost() -> None:
    """Control: the same run with one Python call per message of each body grows by a call
    per message from step to step."""

    def check(message: dict[str, str]) -> object:
        return message["role"]

    calls = dict(await _per_step(_adapter_body(per_message=check)))
    assert calls[79] > calls[3] + 76
