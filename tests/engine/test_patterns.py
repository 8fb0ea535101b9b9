from __future__ import annotations

import functools

import pytest

from image_project.engine import (
    ActionStep,
    Block,
    ChatRunner,
    ChatStep,
    Context,
    fanout_then_reduce,
    generate_then_select,
    iterate,
)
from image_project.errors import PipelineDefinitionError
from image_project.record.events import ActionEvent
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


async def test_generate_then_select_wraps_a_single_select_node() -> None:
    kept: dict[str, object] = {}
    block = generate_then_select(
        "pick",
        generate=[thread(1, kept), thread(2, kept)],
        select=ActionStep(name="choose", fn=lambda c: max(str(kept["t1"]), str(kept["t2"]))),
    )
    assert [n.name for n in block.nodes] == ["generate", "select"]
    ctx = Context()
    await ChatRunner(FunctionTextBackend(lambda r: last_user_text(r)[-1])).run(ctx, block)
    choose = ctx.steps[-1]
    assert isinstance(choose, ActionEvent) and choose.result == "2"
    assert [r.path for r in ctx.steps] == [
        "pick/generate/t1",
        "pick/generate/t2",
        "pick/select/choose",
    ]


async def test_iterate_builds_named_isolated_iterations() -> None:
    kept: dict[str, object] = {}
    block = iterate(
        "loop",
        items=["a", "b"],
        build=lambda item, idx: ChatStep(
            name="gen",
            prompt=f"{item}{idx}",
            temperature=0,
            keep=functools.partial(kept.__setitem__, f"out.{idx}"),
        ),
    )
    assert [n.name for n in block.nodes] == ["iter_01", "iter_02"]
    assert all(isinstance(n, Block) and n.merge == "none" for n in block.nodes)
    ctx = Context()
    await ChatRunner(FunctionTextBackend(lambda r: last_user_text(r).upper())).run(ctx, block)
    assert kept == {"out.1": "A1", "out.2": "B2"}


def test_iterate_custom_names_and_block_children_keep_their_settings() -> None:
    inner = Block(nodes=[thread(1)], parallel=True)
    block = iterate(
        "loop", items=[1], build=lambda i, idx: inner, iteration_name=lambda i, idx: f"round_{i}"
    )
    child = block.nodes[0]
    assert isinstance(child, Block) and child.name == "round_1" and child.parallel


@pytest.mark.parametrize("bad", ["", "  ", None])
def test_patterns_reject_empty_names(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError):
        fanout_then_reduce(bad, fanout=[], reduce=[])  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError):
        generate_then_select("g", generate=[], select=thread(1), generate_name=bad)  # type: ignore[arg-type]
    with pytest.raises(PipelineDefinitionError):
        iterate("i", items=[1], build=lambda i, idx: thread(1), iteration_name=lambda i, idx: bad)  # type: ignore[arg-type,return-value]
