"""Scopes: blocks run from code, whose steps hand back typed values and are recorded at their
declared paths and positions, in both execution modes; a fan-out of threads from one
baseline reduced by the steps after it (the tree-of-thought shape)."""

from __future__ import annotations

import functools

import anyio
import pytest

from image_project.backends.base import ImageReply, ImageRequest, TextRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep, ImageStep
from image_project.engine.outcome import Answer
from image_project.engine.output import TextOutput
from image_project.engine.recorder import DefaultStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.engine.scope import Scope
from image_project.errors import PipelineDefinitionError, location_of
from image_project.record.events import ActionEvent, ChatEvent
from image_project.testing import FakeImageBackend, FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def echo() -> FunctionTextBackend:
    return FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")


def length_step(name: str, prompt: str) -> ChatStep[int]:
    return ChatStep(name=name, prompt=prompt, temperature=0.0, merge="none", output=TextOutput(len))


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
async def test_steps_hand_back_typed_values_and_record_in_declared_order(mode: str) -> None:
    ctx = Context()
    runner = ChatRunner(echo(), mode=mode)  # type: ignore[arg-type]
    async with runner.root(ctx).scope("root", merge="all_messages") as root:
        first = await root.ask(length_step("plan", "abc"))
        count: int = first.value  # "re:abc" has 6 characters
        answers = await root.gather(
            "round", [length_step(f"s{i}", "x" * (i + 1)) for i in range(count // 2)]
        )
        total = await root.act("sum", lambda: sum(a.value for a in answers))
        await root.ask(ChatStep(name="after", prompt="done", temperature=0.0))
    assert count == 6 and [a.value for a in answers] == [4, 5, 6] and total == 15
    assert isinstance(first.event, ChatEvent) and first.event.path == "root/plan"
    assert [a.event.path for a in answers] == ["root/round/s0", "root/round/s1", "root/round/s2"]
    paths = [e.path for e in ctx.steps]
    assert paths == [
        "root/plan",
        "root/round/s0",
        "root/round/s1",
        "root/round/s2",
        "root/sum",
        "root/after",
    ]
    action = ctx.steps[4]
    assert isinstance(action, ActionEvent) and action.result == 15
    # merge "none" steps leave the conversation alone; the last step merged its messages.
    assert [m.content for m in ctx.messages] == ["done", "re:done"]


async def test_a_nested_scope_merges_only_when_it_closes_and_as_its_mode_says() -> None:
    ctx = Context()
    runner = ChatRunner(echo())
    async with runner.root(ctx).scope("root", merge="all_messages") as root:
        async with root.scope("quiet") as quiet:  # merge "none" by default
            await quiet.ask(ChatStep(name="a", prompt="hidden", temperature=0.0))
            assert [m.content for m in quiet.working] == ["hidden", "re:hidden"]
        assert not root.working
        async with root.scope("loud", merge="last_response") as loud:
            await loud.ask(ChatStep(name="b", prompt="kept", temperature=0.0))
        assert [m.content for m in root.working] == ["kept", "re:kept"]
    assert [m.content for m in ctx.messages] == ["kept", "re:kept"]


async def test_each_sees_every_answer_that_arrived_before_a_sibling_failed() -> None:
    release = anyio.Event()

    async def answer(request: TextRequest) -> str:
        text = last_user_text(request)
        if text == "bad":
            await release.wait()  # fails only once the good sibling has answered
            raise RuntimeError("boom")
        return f"re:{text}"

    arrived: list[tuple[int, str]] = []

    def each(i: int, a: Answer[str]) -> None:
        arrived.append((i, a.value))
        release.set()

    steps: list[ChatStep[str]] = [
        ChatStep(name="good", prompt="fine", temperature=0.0, merge="none"),
        ChatStep(name="bad", prompt="bad", temperature=0.0, merge="none"),
    ]
    ctx = Context()
    with pytest.raises(RuntimeError) as info:
        async with ChatRunner(FunctionTextBackend(answer)).root(ctx).scope("root") as root:
            await root.gather("panel", steps, each=each)
    assert arrived == [(0, "re:fine")]
    loc = location_of(info.value)
    assert loc is not None and loc.path == "root/panel/bad"
    assert ctx.messages == ()  # a failed scope merges nothing


async def test_gather_announces_its_group_to_a_recorder_that_listens() -> None:
    groups: list[tuple[str, int]] = []

    class Listening(DefaultStepRecorder):
        def on_group_start(self, path: str, steps: int) -> None:
            groups.append((path, steps))

    runner = ChatRunner(echo(), recorder=Listening())
    async with runner.root(Context()).scope("root") as root:
        await root.gather("ideas", [length_step(f"i{n}", "p") for n in range(3)])
        await root.gather("tree", [length_step("t", "q")])
    assert groups == [("root/ideas", 3), ("root/tree", 1)]


async def test_children_need_distinct_names_and_a_valid_merge() -> None:
    runner = ChatRunner(echo())
    with pytest.raises(PipelineDefinitionError, match="two children are named 'a'"):
        async with runner.root(Context()).scope("root") as root:
            await root.ask(length_step("a", "x"))
            await root.ask(length_step("a", "y"))
    with pytest.raises(PipelineDefinitionError, match="merge"):
        async with runner.root(Context()).scope("root", merge="sideways") as root:  # type: ignore[arg-type]
            pass


async def test_the_root_scope_places_children_at_the_top_after_earlier_roots() -> None:
    ctx = Context.with_system("sys")
    runner = ChatRunner(echo())
    first = runner.root(ctx)
    await first.ask(ChatStep(name="a", prompt="A", temperature=0.0))
    assert [m.content for m in ctx.messages] == ["sys", "A", "re:A"]  # merged as it ends
    async with runner.root(ctx).scope("b", merge="all_messages") as b:
        await b.ask(ChatStep(prompt="B", temperature=0.0))
    await first.ask(ChatStep(prompt="C", temperature=0.0, merge="none"))
    assert [e.path for e in ctx.steps] == ["a", "b/step_01", "step_03"]
    assert [m.content for m in ctx.messages] == ["sys", "A", "re:A", "B", "re:B"]


@pytest.mark.parametrize("mode", ["concurrent", "sequential"])
async def test_an_unnamed_gather_runs_functions_as_the_scopes_own_children(mode: str) -> None:
    """Each function's steps sit at the position its item was given when the gather started,
    so the record is in declared order although the first item reaches its step (and
    finishes) last."""
    second_done = anyio.Event()

    async def answer(request: TextRequest) -> str:
        text = last_user_text(request)
        if text == "second":
            second_done.set()
        return f"re:{text}"

    async def one(prompt: str, scope: Scope) -> int:
        if prompt == "first" and mode == "concurrent":
            await second_done.wait()  # the second item asks and answers first
        got = await scope.ask(length_step(prompt, prompt))
        return got.value

    arrived: list[int] = []
    ctx = Context()
    root = ChatRunner(FunctionTextBackend(answer), mode=mode).root(ctx)  # type: ignore[arg-type]
    with anyio.fail_after(10):
        values = await root.gather(
            None,
            [functools.partial(one, "first"), functools.partial(one, "second")],
            each=lambda i, value: arrived.append(i),
        )
        await root.ask(length_step("after", "x"))
    assert values == [8, 9]
    assert arrived == ([1, 0] if mode == "concurrent" else [0, 1])
    assert [e.path for e in ctx.steps] == ["first", "second", "after"]


async def test_a_named_gather_of_functions_merges_their_messages_in_declared_order() -> None:
    backend = echo()
    ctx = Context.with_system("sys")

    async def idea(k: str, scope: Scope) -> str:
        async with scope.scope(f"idea_{k}", merge="last_response") as inner:
            gen_step: ChatStep[str] = ChatStep(name="gen", prompt=f"idea {k}", temperature=0.0)
            gen = await inner.ask(gen_step)
            polish: ChatStep[str] = ChatStep(
                name="polish", prompt=f"polish {gen.value}", temperature=0.0
            )
            polished = await inner.ask(polish)
        return polished.value

    async with ChatRunner(backend).root(ctx).scope("root", merge="all_messages") as root:
        values = await root.gather(
            "ideas", [functools.partial(idea, k) for k in "AB"], merge="all_messages"
        )
    assert values == ["re:polish re:idea A", "re:polish re:idea B"]
    assert [e.path for e in ctx.steps] == [
        "root/ideas/idea_A/gen",
        "root/ideas/idea_A/polish",
        "root/ideas/idea_B/gen",
        "root/ideas/idea_B/polish",
    ]
    assert [m.content for m in ctx.messages] == [
        "sys",
        "idea A",
        "re:polish re:idea A",
        "idea B",
        "re:polish re:idea B",
    ]


async def test_an_image_step_is_asked_like_a_chat_step() -> None:
    async def size_of(reply: ImageReply) -> int:
        return len(reply.data)

    ctx = Context()
    runner = ChatRunner(echo(), image_backend=FakeImageBackend())
    request = ImageRequest(prompt="a lighthouse", model="m", size="64x32", seed=3)
    drawn = await runner.root(ctx).ask(ImageStep(name="image", request=request, check=size_of))
    assert drawn.value == drawn.event.received_bytes and drawn.event.path == "image"
    assert ctx.steps == [drawn.event] and ctx.messages == ()


def thread(i: int) -> ChatStep[str]:
    return ChatStep(name=f"t{i}", prompt=f"thread {i}", temperature=0.8, merge="none")


async def test_a_fanout_runs_threads_from_one_baseline_and_the_reduce_reads_them() -> None:
    backend = FunctionTextBackend(lambda r: f"<{last_user_text(r)}>")
    ctx = Context.with_system("sys")
    async with ChatRunner(backend).root(ctx).scope("pipeline", merge="all_messages") as root:
        await root.ask(ChatStep(name="draft", prompt="d", temperature=0))
        async with root.scope("enclave", merge="all_messages") as enclave:
            threads = await enclave.gather("fanout", [thread(1), thread(2), thread(3)])
            async with enclave.scope("reduce", merge="all_messages") as reduce:
                await reduce.ask(
                    ChatStep(
                        name="consensus",
                        prompt=",".join(t.value for t in threads),
                        temperature=0,
                    )
                )
    thread_requests = [r for r in backend.requests if last_user_text(r).startswith("thread")]
    assert all([m.content for m in r.messages[:-1]] == ["sys", "d", "<d>"] for r in thread_requests)
    assert ctx.messages[-1].content == "<<thread 1>,<thread 2>,<thread 3>>"
    assert [r.path for r in ctx.steps][-1] == "pipeline/enclave/reduce/consensus"


@pytest.mark.parametrize("bad", ["", "  ", None])
async def test_scopes_and_groups_reject_empty_names(bad: object) -> None:
    root = ChatRunner(echo()).root(Context())
    with pytest.raises(PipelineDefinitionError):
        async with root.scope(bad):  # type: ignore[arg-type]
            pass
    if bad is not None:  # a gather without a name is the scope's own children
        with pytest.raises(PipelineDefinitionError):
            await root.gather(bad, [thread(1)])  # type: ignore[call-overload]
    with pytest.raises(PipelineDefinitionError):
        await root.act(bad, lambda: None)  # type: ignore[call-overload]
