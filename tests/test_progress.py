"""The CLI's live progress lines: group counts from the engine's announcements, whatever order
steps finish in."""

from __future__ import annotations

import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.cli.progress import ProgressRecorder, counted
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.engine.scope import Scope
from image_project.errors import ServerError
from image_project.testing import FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def test_counted_puts_the_noun_in_the_right_number() -> None:
    assert [counted(n, "judge") for n in (0, 1, 2)] == ["0 judges", "1 judge", "2 judges"]


async def flow(scope: Scope) -> None:
    async with scope.scope("root", merge="all_messages") as root:
        await root.ask(ChatStep(name="first", prompt="p", temperature=0.0))
        fan: list[ChatStep[str]] = [
            ChatStep(name=f"c{i}", prompt=f"p{i}", temperature=0.0) for i in range(3)
        ]
        await root.gather("fan", fan, merge="all_messages")


async def test_the_engine_announces_each_parallel_group_with_its_steps() -> None:
    recorder = DefaultStepRecorder()
    backend = FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")
    await flow(ChatRunner(backend, recorder=recorder).root(Context.with_system("s")))
    assert recorder.groups == {"root/fan": 3}


async def test_each_finished_step_gets_one_line_with_its_group_count() -> None:
    lines: list[str] = []
    recorder = ProgressRecorder(lines.append, clock=lambda: 0.0)
    backend = FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")
    await flow(ChatRunner(backend, recorder=recorder).root(Context.with_system("s")))
    assert lines[0] == "[   0.0s] ✓ root/first"
    # Whatever order the three concurrent calls finished in, the counts run 1/3, 2/3, 3/3.
    assert sorted(line.rsplit("   ", 1)[-1] for line in lines[1:]) == [
        "1/3 of fan",
        "2/3 of fan",
        "3/3 of fan",
    ]
    assert len(lines) == 4


async def test_actions_retries_and_recovered_failures_get_their_own_marks() -> None:
    def answer(request: TextRequest) -> TextReply | str:
        text = last_user_text(request)
        if text == "flaky":
            return TextReply(text="ok", model="m", attempts=3)
        if text == "broken":
            raise ServerError("overloaded", status=503, attempts=2)
        return "fine"

    lines: list[str] = []
    recorder = ProgressRecorder(lines.append, clock=lambda: 0.0)
    runner = ChatRunner(FunctionTextBackend(answer), recorder=recorder)
    async with runner.root(Context.with_system("s")).scope("root", merge="all_messages") as root:
        await root.act("prepare", lambda: {"ready": True})
        await root.ask(ChatStep(name="flaky", prompt="flaky", temperature=0.0))
        await root.ask(
            ChatStep(name="judge", prompt="broken", temperature=0.0, on_failure=lambda exc: None)
        )
    assert lines == [
        "[   0.0s] ✓ root/prepare",
        "[   0.0s] ✓ root/flaky  (attempts: 3)",
        "[   0.0s] ! root/judge  (attempts: 2)  (failed, recovered: ServerError)",
    ]
