"""A re-ask's answer is a new answer: never the preview a re-ask (or an error) quoted, never a
copy of the rejected answer's start, never a text ending in the truncation mark; the re-ask
says why the answer was rejected without quoting it; a step that fails after re-asks keeps
them; a re-ask can get its own seed and temperature, or be skipped, as its policy says.

The answers are the ones a small real model gave (Qwen2.5-Coder 0.5B Instruct on
llama-server): a 2,000-token final prompt cut off, then its own 200-character preview."""

from __future__ import annotations

from typing import Any

import pytest

from image_project.backends.base import TextReply
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.output import JsonOutput, ReaskPolicy
from image_project.engine.runner import ChatRunner
from image_project.errors import ModelOutputError, preview, rejected_of
from image_project.record.base import RecordModel
from image_project.stages.standard import PROSE_REASK
from image_project.testing import ScriptedTextBackend

pytestmark = pytest.mark.anyio

LONG_PROMPT = (
    "Deliverable: one painterly image. Subject and action: a lighthouse keeper and a stray "
    "cat share the last lamp-lighting of the season on a misty coastal headland at dawn. "
    "Setting and context: weathered stone, teal sea, burnt-orange lamplight spilling over "
    "wet flagstones; gulls far out. Style and medium: visible brushstrokes, oil on linen, "
) * 6


def cut(text: str) -> TextReply:
    return TextReply(text=text, model="m", finish_reason="length")


def prose_step() -> ChatStep[str]:
    return ChatStep(
        name="draft", prompt="write", temperature=0.0, max_output_tokens=2000, reask=PROSE_REASK
    )


async def test_a_reask_answered_with_the_preview_of_the_cut_answer_is_not_accepted() -> None:
    echoed = preview(LONG_PROMPT)  # 200 characters ending in the truncation mark
    assert echoed.endswith("…")
    backend = ScriptedTextBackend([cut(LONG_PROMPT), echoed])
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(prose_step())
    assert info.value.reason == "reask_echo"
    assert "truncation mark" in str(info.value)


async def test_a_reask_answered_with_the_start_of_the_cut_answer_is_not_accepted() -> None:
    start = LONG_PROMPT[:150].rstrip()
    backend = ScriptedTextBackend([cut(LONG_PROMPT), start])
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(prose_step())
    assert info.value.reason == "reask_echo"


async def test_a_shorter_new_answer_after_a_cut_off_is_accepted() -> None:
    backend = ScriptedTextBackend([cut(LONG_PROMPT), "A keeper and a cat at the lamp, dawn."])
    async with ChatRunner(backend).root(Context()).scope("root", merge="all_messages") as root:
        answer = await root.ask(prose_step())
    assert answer.value == "A keeper and a cat at the lamp, dawn."


async def test_the_reask_carries_the_reason_but_never_a_preview_of_the_answer() -> None:
    backend = ScriptedTextBackend([cut(LONG_PROMPT), "A keeper and a cat at the lamp, dawn."])
    async with ChatRunner(backend).root(Context()).scope("root", merge="all_messages") as root:
        answer = await root.ask(prose_step())
    second = backend.requests[1].messages[-1].content
    assert "cut off at 2000 tokens" in second
    assert "output preview" not in second and LONG_PROMPT[:60] not in second
    (reask,) = answer.event.reasks
    assert reask.error.startswith("cut_off: ") and "output preview" not in reask.error


async def test_a_cut_off_failure_shows_its_preview_once() -> None:
    backend = ScriptedTextBackend([cut(LONG_PROMPT), cut(LONG_PROMPT[::-1])])
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(prose_step())
    assert info.value.reason == "cut_off"
    assert str(info.value).count("output preview") == 1


class Pick(RecordModel):
    choice: str


def _never_ok(value: Pick) -> Pick:
    raise ModelOutputError("gate:x", f"{value.choice!r} is no choice")


async def test_a_failing_step_keeps_its_requests_and_rejected_answers() -> None:
    backend = ScriptedTextBackend(['{"choice": "a"}', '{"choice": "b"}'])
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        output=JsonOutput(Pick, check=_never_ok),
        reask=ReaskPolicy(max=1),
    )
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(step)
    kept = rejected_of(info.value)
    assert kept is not None
    requests, reasks = kept
    assert requests == 2
    assert [getattr(r, "response", None) for r in reasks] == ['{"choice": "a"}', '{"choice": "b"}']


async def test_a_policy_may_give_a_reask_its_own_seed_and_temperature() -> None:
    backend = ScriptedTextBackend(['{"choice": "a"}', '{"choice": "b"}'])
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        seed=7,
        output=JsonOutput(Pick, check=lambda v: v if v.choice == "b" else _never_ok(v)),
        reask=ReaskPolicy(max=1, resample=lambda exc, k: (1000 + k, 0.3)),
    )
    async with ChatRunner(backend).root(Context()).scope("root", merge="all_messages") as root:
        answer = await root.ask(step)
    assert [(r.seed, r.temperature) for r in backend.requests] == [(7, 0.0), (1001, 0.3)]
    (reask,) = answer.event.reasks
    assert (reask.seed, reask.temperature) == (1001, 0.3)


async def test_a_policy_may_skip_the_reask_of_an_answer_it_would_only_repeat() -> None:
    backend = ScriptedTextBackend(['{"choice": "a"}'])
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        output=JsonOutput(Pick, check=_never_ok),
        reask=ReaskPolicy(max=2, skip=lambda exc: "not re-asked: it would repeat"),
    )
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(backend).root(Context()).ask(step)
    assert len(backend.requests) == 1
    assert "not re-asked: it would repeat" in str(info.value)
