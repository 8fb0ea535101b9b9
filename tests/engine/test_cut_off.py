"""An answer the server stopped at its token limit (``finish_reason == "length"``) is never
accepted: a structured step re-asks it with its own reason; prose fails loudly, or is re-asked
once first where its policy says so (the pipeline's prose steps)."""

from __future__ import annotations

from typing import Any

import pytest

from image_project.backends.base import TextReply, TextRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.output import JsonOutput, ReaskPolicy
from image_project.engine.runner import ChatRunner
from image_project.errors import ModelOutputError
from image_project.record.base import RecordModel
from image_project.record.events import ChatEvent
from image_project.stages.standard import PROSE_REASK
from image_project.testing import ScriptedTextBackend

pytestmark = pytest.mark.anyio


class Pick(RecordModel):
    choice: str


def cut(text: str) -> TextReply:
    return TextReply(text=text, model="m", finish_reason="length")


async def test_a_cut_off_json_answer_is_reasked_saying_it_was_cut_off() -> None:
    backend = ScriptedTextBackend([cut('{"choice": "a lo'), '{"choice": "a lot"}'])
    ctx = Context()
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        max_output_tokens=8,
        output=JsonOutput(Pick),
        reask=ReaskPolicy(max=1, style="restate"),
    )
    async with ChatRunner(backend).root(ctx).scope("root", merge="all_messages") as root:
        answer = await root.ask(step)
    assert answer.value == Pick(choice="a lot")
    (reask,) = answer.event.reasks
    assert "cut off at 8 tokens" in reask.error and "no {" not in reask.error
    requests: list[TextRequest] = backend.requests
    assert [r.max_output_tokens for r in requests] == [8, 8]
    assert "cut off at 8 tokens" in requests[1].messages[-1].content


async def test_cut_off_prose_fails_loudly_instead_of_being_accepted() -> None:
    ctx = Context()
    step: ChatStep[str] = ChatStep(name="draft", prompt="write", temperature=0.0)
    with pytest.raises(ModelOutputError) as info:
        backend = ScriptedTextBackend([cut("A lighthouse at dusk, its beam")])
        await ChatRunner(backend).root(ctx).ask(step)
    assert info.value.reason == "cut_off"
    assert "the server's token limit" in str(info.value)
    assert not [e for e in ctx.steps if isinstance(e, ChatEvent)]  # not recorded as a success


async def test_a_cut_off_answer_still_cut_off_after_the_reasks_fails_with_that_reason() -> None:
    backend = ScriptedTextBackend([cut('{"choice": '), cut('{"choice": "x')])
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        output=JsonOutput(Pick),
        reask=ReaskPolicy(max=1),
    )
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(step)
    assert info.value.reason == "cut_off"


async def test_pipeline_prose_cut_off_is_restated_once_then_accepted_when_it_stops() -> None:
    """The standard pipeline's prose steps (``PROSE_REASK``) re-ask a cut-off answer once,
    restated: one user message, the prompt with the reason (no assistant turn)."""
    step: ChatStep[str] = ChatStep(
        name="draft", prompt="write", temperature=0.0, max_output_tokens=8, reask=PROSE_REASK
    )
    backend = ScriptedTextBackend([cut("A lighthouse at dusk, its beam"), "A lighthouse."])
    async with ChatRunner(backend).root(Context()).scope("root", merge="all_messages") as root:
        answer = await root.ask(step)
    assert answer.value == "A lighthouse."
    (reask,) = answer.event.reasks
    assert "cut off at 8 tokens" in reask.error
    second = backend.requests[1].messages
    assert [m.role for m in second] == ["user"]
    assert second[0].content.startswith("write") and "cut off at 8 tokens" in second[0].content
