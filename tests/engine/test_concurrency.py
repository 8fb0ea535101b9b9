"""Parallel groups: real concurrency, results independent of completion order, cancellation.

No test here measures time. Concurrency is proven structurally: a barrier that only opens
when all N calls are in flight at once (a sequential runner would never get past it; the
``fail_after`` is a hang guard, not a timing claim). Wall-clock figures live in ``bench/``.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from image_project.backends.base import Message, TextRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.runner import ChatRunner, ExecutionMode
from image_project.engine.scope import Scope
from image_project.errors import location_of
from image_project.record.events import TIMING_FIELDS
from image_project.testing import FunctionTextBackend, last_user_text

pytestmark = pytest.mark.anyio

HANG_GUARD_S = 10


def answer_for(request: TextRequest) -> str:
    """A deterministic answer that depends on everything the model was shown."""
    digest = hashlib.sha256(
        repr([(m.role, m.content) for m in request.messages]).encode()
    ).hexdigest()
    return f"{last_user_text(request)[:24]}->{digest[:8]}"


def shuffled_backend(
    rng: random.Random, completions: list[str] | None = None
) -> FunctionTextBackend:
    async def answer(request: TextRequest) -> str:
        await anyio.sleep(rng.random() * 0.004)  # reorders completions; not synchronisation
        if completions is not None:
            completions.append(last_user_text(request))
        return answer_for(request)

    return FunctionTextBackend(answer)


@dataclass
class KeptContext(Context):
    """A run's context with the values its steps handed back, kept by the flow."""

    kept: dict[str, object] = field(default_factory=dict)


async def run_flow(root: Scope, kept: dict[str, object]) -> None:
    """Nested parallel groups, values read by later prompts (and kept), all three merge
    modes."""

    def critic(stage: str, i: int) -> ChatStep[str]:
        return ChatStep(
            name=f"critic_{i}",
            prompt=f"critique {stage} as critic {i}",
            temperature=0.8,
            merge="none",
        )

    async def stage(scope: Scope, stage_name: str) -> None:
        async with scope.scope(stage_name, merge="last_response") as block:
            await block.ask(ChatStep(name="draft", prompt=f"draft {stage_name}", temperature=0.8))
            async with block.scope("enclave", merge="all_messages") as enclave:
                critiques = await enclave.gather(
                    "fanout", [critic(stage_name, i) for i in range(5)]
                )
                for i, critique in enumerate(critiques):
                    kept[f"{stage_name}.critic_{i}"] = critique.value
                async with enclave.scope("reduce", merge="all_messages") as reduce:
                    await reduce.ask(
                        ChatStep(
                            name="consensus",
                            prompt="merge: "
                            + " | ".join(str(kept[f"{stage_name}.critic_{i}"]) for i in range(5)),
                            temperature=0.8,
                        )
                    )

    async def idea(k: str, scope: Scope) -> None:
        async with scope.scope(f"idea_{k}", merge="last_response") as block:
            gen: ChatStep[str] = ChatStep(name="gen", prompt=f"idea {k}", temperature=0.9)
            kept[f"idea.{k}"] = (await block.ask(gen)).value
            await block.ask(
                ChatStep(name="polish", prompt=f"polish {kept[f'idea.{k}']}", temperature=0.9)
            )

    async with root.scope("pipeline", merge="all_messages") as pipeline:
        await stage(pipeline, "s1")
        await pipeline.gather(
            "ideas", [functools.partial(idea, k) for k in "ABCD"], merge="all_messages"
        )
        await pipeline.act("count", lambda: sorted(k for k in kept if k.startswith("idea.")))
        await stage(pipeline, "s2")


async def run_once(
    mode: ExecutionMode, rng: random.Random, completions: list[str] | None = None
) -> KeptContext:
    ctx = KeptContext(messages=(Message("system", "system"),))
    runner = ChatRunner(shuffled_backend(rng, completions), mode=mode)
    await run_flow(runner.root(ctx), ctx.kept)
    return ctx


def comparable(ctx: KeptContext) -> dict[str, Any]:
    steps = []
    for record in ctx.steps:
        data = record.model_dump(mode="json")
        for key in TIMING_FIELDS:
            data.pop(key, None)  # pacing_wait_ms: model calls only
        steps.append(data)
    return {"steps": steps, "messages": ctx.messages, "kept": dict(ctx.kept)}


async def test_concurrent_runs_equal_the_sequential_run_under_many_shuffles() -> None:
    reference = comparable(await run_once("sequential", random.Random(0)))
    assert len(reference["steps"]) == 2 * 7 + 4 * 2 + 1
    orders = set()
    for shuffle in range(25):
        completions: list[str] = []
        ctx = await run_once("concurrent", random.Random(shuffle), completions)
        assert comparable(ctx) == reference
        orders.add(tuple(completions))
    assert len(orders) > 1, "the shuffles never changed the completion order"


async def test_transcript_is_in_declared_preorder() -> None:
    ctx = await run_once("concurrent", random.Random(7))
    paths = [r.path for r in ctx.steps]
    assert paths[:7] == [
        "pipeline/s1/draft",
        *[f"pipeline/s1/enclave/fanout/critic_{i}" for i in range(5)],
        "pipeline/s1/enclave/reduce/consensus",
    ]
    assert paths[7:15] == [
        f"pipeline/ideas/idea_{k}/{s}" for k in "ABCD" for s in ("gen", "polish")
    ]
    assert len(set(paths)) == len(paths)


async def test_parallel_merges_apply_in_declared_order() -> None:
    # idea_A answers only once B and C have answered, so it finishes last; its message must
    # still come first.
    answered: list[str] = []
    others_done = anyio.Event()

    async def answer(request: TextRequest) -> str:
        text = last_user_text(request)
        if text == "idea A":
            await others_done.wait()
        answered.append(text)
        if len(answered) == 2:
            others_done.set()
        return f"ans({text})"

    steps: list[ChatStep[str]] = [
        ChatStep(name=f"idea_{k}", prompt=f"idea {k}", temperature=0.5, merge="last_response")
        for k in "ABC"
    ]
    ctx = Context.with_system("s")
    backend = FunctionTextBackend(answer)
    with anyio.fail_after(HANG_GUARD_S):
        await ChatRunner(backend).root(ctx).gather("ideas", steps, merge="all_messages")
    assert last_user_text(backend.requests[0]) == "idea A"
    assert answered[-1] == "idea A"
    assert [m.content for m in ctx.messages[2::2]] == ["ans(idea A)", "ans(idea B)", "ans(idea C)"]


class Gate:
    """Counts calls in flight; ``wait_for_all`` opens once ``n`` are in flight together."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.in_flight = 0
        self.max_in_flight = 0
        self.all_in = anyio.Event()

    async def call(self, request: TextRequest) -> str:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.in_flight >= self.n:
            self.all_in.set()
        await self.all_in.wait()
        self.in_flight -= 1
        return f"ok {last_user_text(request)}"


async def test_six_way_parallel_block_has_all_six_calls_in_flight_at_once() -> None:
    gate = Gate(6)
    steps: list[ChatStep[str]] = [
        ChatStep(name=f"c{i}", prompt=f"call {i}", temperature=0, merge="none") for i in range(6)
    ]
    ctx = Context()
    with anyio.fail_after(HANG_GUARD_S):
        await ChatRunner(FunctionTextBackend(gate.call)).root(ctx).gather("six", steps)
    assert gate.max_in_flight == 6
    assert [r.name for r in ctx.steps] == [f"c{i}" for i in range(6)]


async def test_sequential_mode_runs_one_call_at_a_time() -> None:
    in_flight = 0
    peak = 0

    async def call(request: TextRequest) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await anyio.lowlevel.checkpoint()
        in_flight -= 1
        return "ok"

    steps: list[ChatStep[str]] = [
        ChatStep(prompt=f"c{i}", temperature=0, merge="none") for i in range(6)
    ]
    runner = ChatRunner(FunctionTextBackend(call), mode="sequential")
    await runner.root(Context()).gather("pipeline", steps)
    assert peak == 1


async def test_runner_limiter_bounds_calls_in_flight() -> None:
    in_flight = 0
    peak = 0
    two_in = anyio.Event()

    async def call(request: TextRequest) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 2:
            two_in.set()
        await two_in.wait()
        await anyio.lowlevel.checkpoint()
        in_flight -= 1
        return "ok"

    steps: list[ChatStep[str]] = [
        ChatStep(prompt=f"c{i}", temperature=0, merge="none") for i in range(8)
    ]
    runner = ChatRunner(FunctionTextBackend(call), limiter=anyio.CapacityLimiter(2))
    with anyio.fail_after(HANG_GUARD_S):
        await runner.root(Context()).gather("pipeline", steps)
    assert peak == 2


async def test_failing_child_cancels_running_siblings_and_names_its_path() -> None:
    never = anyio.Event()
    fast_done = anyio.Event()
    cancelled: list[str] = []

    async def call(request: TextRequest) -> str:
        text = last_user_text(request)
        if text == "fast":
            fast_done.set()
            return "done"
        if text == "bad":
            await fast_done.wait()
            raise RuntimeError("upstream 500")
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            cancelled.append(text)
            raise
        return "unreachable"

    steps: list[ChatStep[str]] = [
        ChatStep(name="fast", prompt="fast", temperature=0, merge="none"),
        ChatStep(name="slow_1", prompt="slow 1", temperature=0, merge="none"),
        ChatStep(name="bad", prompt="bad", temperature=0, merge="none"),
        ChatStep(name="slow_2", prompt="slow 2", temperature=0, merge="none"),
    ]
    ctx = Context()
    root = ChatRunner(FunctionTextBackend(call)).root(ctx)
    with anyio.fail_after(HANG_GUARD_S), pytest.raises(RuntimeError, match="upstream 500") as info:
        async with root.scope("pipeline", merge="all_messages") as pipeline:
            await pipeline.gather("group", steps)
    loc = location_of(info.value)
    assert loc is not None
    assert loc.path == "pipeline/group/bad"
    assert set(loc.cancelled_paths) == {"pipeline/group/slow_1", "pipeline/group/slow_2"}
    assert sorted(cancelled) == ["slow 1", "slow 2"]
    assert [r.path for r in ctx.steps] == ["pipeline/group/fast"]


async def test_sequential_mode_reports_the_same_failure() -> None:
    def call(request: TextRequest) -> str:
        if last_user_text(request) == "bad":
            raise RuntimeError("nope")
        return "ok"

    steps: list[ChatStep[str]] = [
        ChatStep(name=n, prompt=n, temperature=0, merge="none") for n in ("a", "bad", "c")
    ]
    ctx = Context()
    with pytest.raises(RuntimeError) as info:
        await (
            ChatRunner(FunctionTextBackend(call), mode="sequential")
            .root(ctx)
            .gather("group", steps)
        )
    loc = location_of(info.value)
    assert loc is not None and loc.path == "group/bad"
    assert loc.cancelled_paths == ("group/c",)
    assert [r.path for r in ctx.steps] == ["group/a"]
