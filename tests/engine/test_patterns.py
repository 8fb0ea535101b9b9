from __future__ import annotations

import functools

import pytest

from image_project.engine import (
    Block,
    ChatRunner,
    ChatStep,
    Context,
    fanout_then_reduce,
)
from image_project.errors import PipelineDefinitionError
from image_project.testing import FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def thread(i: int, kept: dict[str, object] | None = None) -> ChatStep[str]:
    return ChatStep(
        name=f"t{i}",
        prompt=f"thread {i}",
        temperature=0.8,
        merge="none",
        keep=None if kept is None else functools.partial(kept.__setitem__, f"t{i}"),
    )


def test_fanout_then_reduce_shape() -> None:
    block = fanout_then_reduce(
        "enclave", fanout=[thread(1), thread(2)], reduce=[ChatStep(prompt="r", temperature=0)]
    )
    fan, red = block.nodes
    assert isinstance(fan, Block) and isinstance(red, Block)
    assert (block.name, block.merge) == ("enclave", "all_messages")
    assert (fan.name, fan.merge, fan.parallel) == ("fanout", "none", True)
    assert (red.name, red.merge, red.parallel) == ("reduce", "all_messages", False)


async def test_fanout_then_reduce_runs_threads_from_one_baseline_and_reduces() -> None:
    backend = FunctionTextBackend(lambda r: f"<{last_user_text(r)}>")
    kept: dict[str, object] = {}
    block = fanout_then_reduce(
        "enclave",
        fanout=[thread(1, kept), thread(2, kept), thread(3, kept)],
        reduce=[
            ChatStep(
                name="consensus",
                prompt=lambda c: ",".join(str(kept[f"t{i}"]) for i in (1, 2, 3)),
                temperature=0,
            )
        ],
    )
    ctx = Context.with_system("sys")
    await ChatRunner(backend).run(
        ctx, Block(nodes=[ChatStep(name="draft", prompt="d", temperature=0), block])
    )
    thread_requests = [r for r in backend.requests if last_user_text(r).startswith("thread")]
    assert all([m.content for m in r.messages[:-1]] == ["sys", "d", "<d>"] for r in thread_requests)
    assert ctx.messages[-1].content == "<<thread 1>,<thread 2>,<thread 3>>"
    assert [r.path for r in ctx.steps][-1] == "pipeline/enclave/reduce/consensus"


@pytest.mark.parametrize("bad", ["", "  ", None])
def test_fanout_then_reduce_rejects_empty_names(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError):
        fanout_then_reduce(bad, fanout=[], reduce=[])  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError):
        fanout_then_reduce("e", fanout=[], reduce=[], fanout_name=bad)  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError):
        fanout_then_reduce("e", fanout=[], reduce=[], reduce_name=bad)  # type: ignore[arg-type]
