"""The Deferred node: built when the run reaches it, run at its own path and declared
position, in both execution modes."""

from __future__ import annotations

import pytest

from image_project.engine import ActionStep, Block, ChatRunner, ChatStep, Context, Deferred
from image_project.errors import PipelineDefinitionError, location_of
from image_project.record.events import ChatEvent
from image_project.testing import FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def echo() -> FunctionTextBackend:
    return FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")


def grow(ctx: Context) -> Block:
    """As many parallel steps as the earlier action asked for."""
    count = ctx.outputs["count"]
    return Block(
        name="ignored",
        parallel=True,
        merge="none",
        nodes=[
            ChatStep(
                name=f"s{i}", prompt=f"p{i}", temperature=0.0, merge="none", capture_key=f"k{i}"
            )
            for i in range(count)
        ],
    )


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
async def test_a_deferred_block_is_built_from_earlier_captures(mode: str) -> None:
    tree = Block(
        name="root",
        nodes=[
            ActionStep(name="plan", fn=lambda ctx: 3, capture_key="count"),
            Deferred(name="round", build=grow),
            ChatStep(name="after", prompt="done", temperature=0.0),
        ],
    )
    ctx = Context()
    await ChatRunner(echo(), mode=mode).run(ctx, tree)  # type: ignore[arg-type]
    paths = [e.path for e in ctx.steps]
    assert paths == ["root/plan", "root/round/s0", "root/round/s1", "root/round/s2", "root/after"]
    assert [ctx.outputs[f"k{i}"] for i in range(3)] == ["re:p0", "re:p1", "re:p2"]
    # merge "none" (the default): nothing of the round reached the conversation.
    assert [m.content for m in ctx.messages] == ["done", "re:done"]
    assert all(isinstance(e, ChatEvent) for e in ctx.steps[1:])


async def test_a_failing_or_wrong_build_fails_at_the_deferred_path() -> None:
    def boom(ctx: Context) -> Block:
        raise ValueError("cannot build")

    for build, error in ((boom, ValueError), (lambda ctx: "not a node", PipelineDefinitionError)):
        tree = Block(name="root", nodes=[Deferred(name="round", build=build)])  # type: ignore[arg-type]
        with pytest.raises(error) as info:
            await ChatRunner(echo()).run(Context(), tree)
        loc = location_of(info.value)
        assert loc is not None and loc.path == "root/round"


def test_deferred_checks_its_fields() -> None:
    with pytest.raises(PipelineDefinitionError, match="merge"):
        Deferred(name="x", build=grow, merge="sideways")  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError, match="callable"):
        Deferred(name="x", build="nope")  # type: ignore[arg-type]
