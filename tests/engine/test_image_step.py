"""The image call as an engine step: recorded however it ends, at its path and position."""

from __future__ import annotations

import anyio
import pytest

from image_project.backends.base import ImageReply, ImageRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ImageStep
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.errors import PipelineDefinitionError, location_of
from image_project.record.events import ImageEvent
from image_project.testing import FakeImageBackend, FunctionTextBackend

pytestmark = pytest.mark.anyio

REQUEST = ImageRequest(prompt="a lighthouse", model="m", size="64x32", quality="low", seed=3)


def runner(image: FakeImageBackend | None) -> ChatRunner:
    return ChatRunner(FunctionTextBackend(lambda _r: "x"), image_backend=image)


def only_event(ctx: Context) -> ImageEvent:
    (event,) = ctx.steps
    assert isinstance(event, ImageEvent)
    return event


async def test_the_checked_value_is_handed_back_and_the_call_recorded() -> None:
    async def size_of(reply: ImageReply) -> int:
        return len(reply.data)

    ctx = Context()
    step: ImageStep[int] = ImageStep(name="image", request=REQUEST, check=size_of)
    drawn = await runner(FakeImageBackend()).root(ctx).ask(step)
    event = only_event(ctx)
    assert drawn.value == event.received_bytes and event.error is None
    assert (event.path, event.model, event.size, event.seed) == ("image", "m", "64x32", 3)
    assert drawn.event is event and ctx.messages == ()


async def test_a_failed_check_is_recorded_with_the_reply_and_locates_the_step() -> None:
    async def refuse(reply: ImageReply) -> int:
        raise ValueError("not an image")

    ctx = Context()
    with pytest.raises(ValueError) as info:
        await (
            runner(FakeImageBackend())
            .root(ctx)
            .ask(ImageStep(name="image", request=REQUEST, check=refuse))
        )
    event = only_event(ctx)
    assert event.error is not None and event.error.type == "ValueError"
    assert event.received_bytes is not None  # the reply arrived; its check failed
    loc = location_of(info.value)
    assert loc is not None and (loc.path, loc.node_type) == ("image", "image")


async def test_a_cut_off_call_is_recorded_as_cancelled_with_the_message_of_that_moment() -> None:
    started = anyio.Event()

    class Hanging(FakeImageBackend):
        async def generate(self, request: ImageRequest) -> ImageReply:
            started.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    reason = ["not yet"]
    recorder = DefaultStepRecorder()
    ctx = Context()
    step: ImageStep[ImageReply] = ImageStep(
        name="image", request=REQUEST, cancelled=lambda: reason[0]
    )
    run = ChatRunner(
        FunctionTextBackend(lambda _r: "x"), image_backend=Hanging(), recorder=recorder
    )

    async def draw() -> None:
        await run.root(ctx).ask(step)

    async with anyio.create_task_group() as tg:
        tg.start_soon(draw)
        await started.wait()
        reason[0] = "the title call failed, so the run stopped"
        tg.cancel_scope.cancel()
    event = only_event(ctx)
    assert event.cancelled and event.error is not None
    assert event.error.message == "the title call failed, so the run stopped"
    assert event.attempts is None and event.received_bytes is None
    assert recorder.in_flight == []


async def test_an_image_step_needs_an_image_backend() -> None:
    with pytest.raises(PipelineDefinitionError, match="image_backend"):
        await runner(None).root(Context()).ask(ImageStep(name="image", request=REQUEST))
