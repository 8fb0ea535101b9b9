"""The CLI's live progress lines: group counts from the tree, whatever order steps finish in."""

from __future__ import annotations

import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.cli.progress import ProgressRecorder, counted, parallel_groups
from image_project.engine import ActionStep, Block, ChatRunner, ChatStep, Context
from image_project.errors import ServerError
from image_project.testing import FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def test_counted_puts_the_noun_in_the_right_number() -> None:
    assert [counted(n, "judge") for n in (0, 1, 2)] == ["0 judges", "1 judge", "2 judges"]


def tree() -> Block:
    fan = Block(
        name="fan",
        parallel=True,
        nodes=[ChatStep(name=f"c{i}", prompt=f"p{i}", temperature=0.0) for i in range(3)],
    )
    return Block(name="root", nodes=[ChatStep(name="first", prompt="p", temperature=0.0), fan])


def test_parallel_groups_count_the_steps_under_each_parallel_block() -> None:
    assert parallel_groups(tree()) == {"root/fan": 3}


async def test_each_finished_step_gets_one_line_with_its_group_count() -> None:
    lines: list[str] = []
    recorder = ProgressRecorder(lines.append, clock=lambda: 0.0)
    root = tree()
    recorder.watch(root)
    backend = FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")
    await ChatRunner(backend, recorder=recorder).run(Context.with_system("s"), root)
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

    root = Block(
        name="root",
        nodes=[
            ActionStep(name="prepare", fn=lambda ctx: {"ready": True}),
            ChatStep(name="flaky", prompt="flaky", temperature=0.0),
            ChatStep(name="judge", prompt="broken", temperature=0.0, on_failure=lambda exc: None),
        ],
    )
    lines: list[str] = []
    recorder = ProgressRecorder(lines.append, clock=lambda: 0.0)
    recorder.watch(root)
    await ChatRunner(FunctionTextBackend(answer), recorder=recorder).run(
        Context.with_system("s"), root
    )
    assert lines == [
        "[   0.0s] ✓ root/prepare",
        "[   0.0s] ✓ root/flaky  (attempts: 3)",
        "[   0.0s] ! root/judge  (attempts: 2)  (failed, recovered: ServerError)",
    ]
