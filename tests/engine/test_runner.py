"""Runner semantics: merge modes, values, fail-fast, re-asks, error attribution, recorders."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from image_project.backends.base import Message, TextReply, TextRequest
from image_project.engine.context import Context, EngineEvent
from image_project.engine.nodes import ChatStep
from image_project.engine.output import ReaskPolicy, TextOutput
from image_project.engine.recorder import DefaultStepRecorder, NullStepRecorder
from image_project.engine.runner import ChatRunner
from image_project.engine.scope import Scope
from image_project.errors import (
    EmptyPromptError,
    EmptyResponseError,
    ModelOutputError,
    PipelineDefinitionError,
    RefusalError,
    ServerError,
    StepFailedError,
    location_of,
)
from image_project.record.events import ActionEvent, ChatEvent, ChatParams, StepError
from image_project.testing import FunctionTextBackend, ScriptedTextBackend, last_user_text

pytestmark = pytest.mark.anyio


def echo_backend() -> FunctionTextBackend:
    return FunctionTextBackend(lambda req: f"re:{last_user_text(req)}")


def ctx0() -> Context:
    return Context.with_system("sys")


def pipeline(ctx: Context, runner: ChatRunner | None = None) -> AbstractAsyncContextManager[Scope]:
    """A root scope named ``pipeline`` that merges all its messages into ``ctx``."""
    return (runner or ChatRunner(echo_backend())).root(ctx).scope("pipeline", merge="all_messages")


def roles(ctx: Context) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in ctx.messages]


def chats(ctx: Context) -> list[ChatEvent]:
    """The recorded events, every one of which must be a chat step's."""
    events = [ev for ev in ctx.steps if isinstance(ev, ChatEvent)]
    assert len(events) == len(ctx.steps), ctx.steps
    return events


# -- merge modes ----------------------------------------------------------------------


async def test_all_messages_appends_prompt_and_response() -> None:
    ctx = ctx0()
    await ChatRunner(echo_backend()).root(ctx).ask(ChatStep(name="s", prompt="p1", temperature=0.2))
    assert roles(ctx) == [("system", "sys"), ("user", "p1"), ("assistant", "re:p1")]


async def test_last_response_appends_one_exchange() -> None:
    ctx = ctx0()
    step: ChatStep[str] = ChatStep(name="s", prompt="p1", temperature=0.2, merge="last_response")
    await ChatRunner(echo_backend()).root(ctx).ask(step)
    assert roles(ctx) == [("system", "sys"), ("user", "p1"), ("assistant", "re:p1")]


async def test_merge_none_leaves_conversation_but_records_step() -> None:
    ctx = ctx0()
    step: ChatStep[str] = ChatStep(name="s", prompt="p1", temperature=0.2, merge="none")
    assert (await ChatRunner(echo_backend()).root(ctx).ask(step)).value == "re:p1"
    assert roles(ctx) == [("system", "sys")]
    assert [r.path for r in ctx.steps] == ["s"]


async def test_scope_last_response_hides_internal_messages() -> None:
    ctx = ctx0()
    async with pipeline(ctx) as root, root.scope("stage", merge="last_response") as stage:
        await stage.ask(ChatStep(name="draft", prompt="d", temperature=0.1))
        await stage.ask(ChatStep(name="refine", prompt="r", temperature=0.1))
    # The block's question (its first prompt) answered by its last answer: one exchange.
    assert roles(ctx) == [("system", "sys"), ("user", "d"), ("assistant", "re:r")]
    assert [r.path for r in ctx.steps] == ["pipeline/stage/draft", "pipeline/stage/refine"]


async def test_later_steps_see_earlier_merged_messages_only() -> None:
    backend = echo_backend()
    async with pipeline(ctx0(), ChatRunner(backend)) as root:
        await root.ask(ChatStep(name="a", prompt="A", temperature=0.1, merge="none"))
        await root.ask(ChatStep(name="b", prompt="B", temperature=0.1))
        await root.ask(ChatStep(name="c", prompt="C", temperature=0.1))
    seen_by_c = [m.content for m in backend.requests[2].messages]
    assert seen_by_c == ["sys", "B", "re:B", "C"]


@pytest.mark.parametrize(
    "nodes",
    [[], [ChatStep(name="hidden", prompt="x", temperature=0.1, merge="none")]],
    ids=["empty", "hidden-children"],
)
async def test_last_response_without_output_is_an_error(nodes: list[ChatStep[str]]) -> None:
    ctx = ctx0()
    with pytest.raises(StepFailedError, match="last_response"):
        async with pipeline(ctx) as root, root.scope("b", merge="last_response") as block:
            for step in nodes:
                await block.ask(step)
    assert roles(ctx) == [("system", "sys")]


async def test_merge_none_threads_are_independent_and_consensus_sees_their_values() -> None:
    backend = echo_backend()
    threads: list[ChatStep[str]] = [
        ChatStep(name=f"t{i}", prompt=f"thread {i}", temperature=0.8, merge="none") for i in (1, 2)
    ]
    ctx = ctx0()
    async with pipeline(ctx, ChatRunner(backend)) as root:
        t1, t2 = [await root.ask(thread) for thread in threads]
        consensus: ChatStep[str] = ChatStep(
            name="consensus", prompt=f"merge {t1.value} + {t2.value}", temperature=0.8
        )
        await root.ask(consensus)
    assert [m.content for m in backend.requests[1].messages] == ["sys", "thread 2"]
    assert last_user_text(backend.requests[2]) == "merge re:thread 1 + re:thread 2"


# -- values -----------------------------------------------------------------------


async def test_values_of_a_step_and_of_actions() -> None:
    ctx = ctx0()
    root = ChatRunner(echo_backend()).root(ctx)
    async with root.scope("stage", merge="all_messages") as stage:
        x: ChatStep[str] = ChatStep(prompt="x", temperature=0)
        answer = await stage.ask(x)
    assert answer.value == "re:x" == stage.produced[-1].content

    async def async_action() -> dict[str, int]:
        return {"n": len(ctx.steps)}

    upper = await root.act("sync", lambda: "re:x".upper())
    count = await root.act("async", async_action)
    assert (upper, count) == ("RE:X", {"n": 2})
    action_records = [r.model_dump(mode="json") for r in ctx.steps if r.type == "action"]
    assert action_records[1]["result"] == {"n": 2}
    assert "prompt" not in action_records[0]


async def test_action_result_and_meta_are_recorded_in_full() -> None:
    """Action results are recorded whole: the old record trimmed them to 25 items and depth 4
    (a bug the typed record fixes), so a long or deep result used to lose its tail."""
    deep: object = "leaf"
    for _ in range(8):
        deep = {"next": deep}
    result = {"items": list(range(40)), "deep": deep, "pair": (1, "a")}
    ctx = Context()
    root = ChatRunner(echo_backend()).root(ctx)
    await root.act("big", lambda: result, meta={"ids": list(range(30))})
    (event,) = ctx.steps
    assert isinstance(event, ActionEvent)
    assert event.result == {"items": list(range(40)), "deep": deep, "pair": [1, "a"]}
    assert event.meta == {"ids": list(range(30))}
    dumped = event.model_dump(mode="json")
    assert dumped["result"]["items"][-1] == 39
    assert set(dumped) == {"type", "name", "path", "created_at", "latency_ms", "result", "meta"}


async def test_action_result_json_cannot_hold_is_recorded_as_its_repr() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    ctx = Context()
    await (
        ChatRunner(echo_backend())
        .root(ctx)
        .act("odd", lambda: {"x": Opaque(), "b": b"ab", "s": {3}})
    )
    (event,) = ctx.steps
    assert isinstance(event, ActionEvent)
    assert event.result == {"x": "<opaque>", "b": "YWI=", "s": [3]}


# -- fail fast ------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [lambda c: None, lambda c: 42, "   ", lambda c: ""])
async def test_bad_prompt_fails_before_any_model_call(prompt: Any) -> None:
    backend = echo_backend()
    with pytest.raises(EmptyPromptError):
        await ChatRunner(backend).root(ctx0()).ask(ChatStep(name="s", prompt=prompt, temperature=0))
    assert backend.requests == []


async def test_allow_empty_prompt_permits_blank_but_not_none() -> None:
    backend = echo_backend()
    await (
        ChatRunner(backend)
        .root(ctx0())
        .ask(ChatStep(name="s", prompt="", temperature=0, allow_empty_prompt=True))
    )
    assert len(backend.requests) == 1

    def returns_none(c: Context) -> Any:  # not a PromptFn: the runner checks at run time
        return None

    with pytest.raises(EmptyPromptError):
        await (
            ChatRunner(backend)
            .root(ctx0())
            .ask(
                ChatStep(name="s", prompt=returns_none, temperature=0, allow_empty_prompt=True),
            )
        )


@pytest.mark.parametrize("answer", [None, "", "  \n"])
async def test_empty_response_fails_unless_allowed(answer: str | None) -> None:
    backend = FunctionTextBackend(lambda req: answer)
    ctx = ctx0()
    with pytest.raises(EmptyResponseError):
        await ChatRunner(backend).root(ctx).ask(ChatStep(name="s", prompt="p", temperature=0))
    assert ctx.steps == []
    await (
        ChatRunner(backend)
        .root(ctx)
        .ask(ChatStep(name="s", prompt="p", temperature=0, allow_empty_response=True))
    )
    assert chats(ctx)[0].response == (answer or "")


# -- re-asks and refusals -------------------------------------------------------------


def parse_int(text: str) -> int:
    return int(text.strip())


async def test_bad_answer_is_reasked_with_the_error_then_accepted() -> None:
    backend = ScriptedTextBackend(["seven", "7"])
    ctx = ctx0()
    step = ChatStep(
        name="n",
        prompt="a number",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1),
    )
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == 7
    backend.assert_all_used()
    reask = backend.requests[1].messages
    assert [m.role for m in reask[-3:]] == ["user", "assistant", "user"]
    assert "seven" in reask[-2].content and "invalid literal" in reask[-1].content
    record = chats(ctx)[0]
    assert record.attempts == 2 and record.response == "7"
    assert record.reasks[0].response == "seven"
    # Only the accepted exchange reaches the conversation.
    assert roles(ctx)[-2:] == [("user", "a number"), ("assistant", "7")]


async def test_the_record_sums_the_pacing_waits_of_every_answer() -> None:
    backend = ScriptedTextBackend(
        [
            TextReply(text="seven", model="m", pacing_wait_ms=1500.0),
            TextReply(text="7", model="m", attempts=2, pacing_wait_ms=250.5),
        ]
    )
    step = ChatStep(
        name="n",
        prompt="a number",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1),
    )
    ctx = ctx0()
    await ChatRunner(backend).root(ctx).ask(step)
    record = chats(ctx)[0]
    assert (record.pacing_wait_ms, record.attempts, record.answers) == (1750.5, 3, 2)


async def test_a_recoverable_transport_failure_keeps_its_pacing_wait() -> None:
    error = ServerError("down", status=503, attempts=4)
    error.pacing_wait_ms = 2000.0
    step = ChatStep(name="j", prompt="p", temperature=0, on_failure=lambda exc: None)
    ctx = ctx0()
    await ChatRunner(ScriptedTextBackend([error])).root(ctx).ask(step)
    record = chats(ctx)[0]
    assert (record.pacing_wait_ms, record.attempts) == (2000.0, 4)
    assert record.error is not None and record.error.type == "ServerError"


async def test_reasks_are_bounded_then_raise_with_path_and_preview() -> None:
    backend = ScriptedTextBackend(["x" * 500, "still bad"])
    step = ChatStep(
        name="n",
        prompt="a number",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1),
    )
    with pytest.raises(ModelOutputError) as info:
        async with ChatRunner(backend).root(ctx0()).scope("root") as root:
            await root.ask(step)
    err = info.value
    assert err.reason == "invalid_output"
    assert "root/n" in str(err) and "2 attempt" in str(err)
    assert err.output_preview == "still bad"
    loc = location_of(err)
    assert loc is not None and loc.path == "root/n"
    backend.assert_all_used()


async def test_parser_reason_is_kept() -> None:
    def strict(text: str) -> str:
        raise ModelOutputError("invalid_judge_output", "scores missing", output=text)

    step = ChatStep(name="j", prompt="p", temperature=0, output=TextOutput(strict))
    with pytest.raises(ModelOutputError) as info:
        await ChatRunner(echo_backend()).root(ctx0()).ask(step)
    assert info.value.reason == "invalid_judge_output"


async def test_refusal_is_never_reasked() -> None:
    backend = ScriptedTextBackend(
        [TextReply(text=None, model="m", refusal="I can't help with that.")]
    )
    step = ChatStep(
        name="j", prompt="p", temperature=0, output=TextOutput(parse_int), reask=ReaskPolicy(max=3)
    )
    with pytest.raises(RefusalError, match="refused"):
        await ChatRunner(backend).root(ctx0()).ask(step)
    assert len(backend.requests) == 1


async def test_refusal_raised_by_parser_is_not_reasked() -> None:
    def parse(text: str) -> str:
        raise RefusalError("refusal phrase found", output=text)

    backend = echo_backend()
    step = ChatStep(
        name="j", prompt="p", temperature=0, output=TextOutput(parse), reask=ReaskPolicy(max=3)
    )
    with pytest.raises(RefusalError):
        await ChatRunner(backend).root(ctx0()).ask(step)
    assert len(backend.requests) == 1


# -- request shape --------------------------------------------------------------------


async def test_stateless_step_sees_only_its_system_prompt_and_prompt() -> None:
    backend = echo_backend()
    ctx = ctx0()
    async with pipeline(ctx, ChatRunner(backend)) as root:
        await root.ask(ChatStep(name="a", prompt="history", temperature=0))
        await root.ask(
            ChatStep(
                name="judge",
                prompt="score",
                temperature=0,
                stateless=True,
                system_prompt="judge sys",
                merge="none",
            )
        )
    assert backend.requests[1].messages == (
        Message("system", "judge sys"),
        Message("user", "score"),
    )
    record = chats(ctx)[1]
    assert record.system_prompt == "judge sys" and record.context_messages == 1


async def test_request_and_record_carry_temperature_model_and_seed() -> None:
    backend = echo_backend()
    ctx = ctx0()
    await (
        ChatRunner(backend)
        .root(ctx)
        .ask(ChatStep(name="s", prompt="p", temperature=0.3, model="judge-model", seed=1234))
    )
    await ChatRunner(backend).root(ctx).ask(ChatStep(name="t", prompt="q", temperature=0.9))
    req = backend.requests[0]
    assert (req.temperature, req.model, req.seed) == (0.3, "judge-model", 1234)
    first, second = chats(ctx)
    assert first.params == ChatParams(temperature=0.3, model="judge-model", seed=1234)
    assert second.params.model == backend.default_model


async def test_record_has_the_documented_keys() -> None:
    ctx = ctx0()
    backend = FunctionTextBackend(
        lambda r: TextReply(text="ok", model="m-2024", system_fingerprint="fp_1", attempts=3)
    )
    await (
        ChatRunner(backend).root(ctx).ask(ChatStep(name="s", prompt="p", temperature=0, model="m"))
    )
    rec = chats(ctx)[0].model_dump(mode="json")
    for key in (
        "type",
        "name",
        "path",
        "prompt",
        "response",
        "params",
        "created_at",
        "latency_ms",
        "usage",
        "attempts",
    ):
        assert key in rec
    assert rec["system_fingerprint"] == "fp_1" and rec["attempts"] == 3
    assert rec["response_model"] == "m-2024"
    assert rec["created_at"].endswith("Z")


async def test_record_dump_has_every_key_with_none_for_what_did_not_happen() -> None:
    """A dump holds every documented key, None/empty included (the old ``to_dict`` left
    ``system_prompt``, ``system_fingerprint``, ``response_model``, ``reasks``, ``error`` and
    ``meta`` out when unset); ``order`` is never serialised."""
    ctx = ctx0()
    await ChatRunner(echo_backend()).root(ctx).ask(ChatStep(name="s", prompt="p", temperature=0))
    rec = chats(ctx)[0].model_dump(mode="json")
    assert set(rec) == {
        "type",
        "name",
        "path",
        "prompt",
        "system_prompt",
        "response",
        "params",
        "context_messages",
        "created_at",
        "latency_ms",
        "pacing_wait_ms",
        "usage",
        "attempts",
        "answers",
        "system_fingerprint",
        "response_model",
        "reasks",
        "wire_notes",
        "error",
        "meta",
    }
    assert rec["type"] == "chat" and rec["answers"] == 1
    assert rec["wire_notes"] == [] and rec["params"]["max_output_tokens"] is None
    for key in ("system_prompt", "system_fingerprint", "response_model", "error"):
        assert rec[key] is None, key
    assert rec["reasks"] == [] and rec["meta"] == {}
    assert rec["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 1,
        "total_tokens": 3,
        "cached_tokens": None,
    }


async def test_a_step_without_an_output_hands_back_its_text() -> None:
    step: ChatStep[str] = ChatStep(prompt="hi", temperature=0)
    assert (await ChatRunner(echo_backend()).root(ctx0()).ask(step)).value == "re:hi"


# -- error attribution ----------------------------------------------------------------


async def test_innermost_failing_path_is_attached_and_nothing_half_applied() -> None:
    def answer(req: TextRequest) -> str:
        if last_user_text(req) == "boom":
            raise RuntimeError("model exploded")
        return "fine"

    ctx = ctx0()
    with pytest.raises(RuntimeError) as info:
        async with pipeline(ctx, ChatRunner(FunctionTextBackend(answer))) as root:
            for section, prompt in (("section_1", "ok"), ("section_2", "boom")):
                async with root.scope(section, merge="last_response") as stage:
                    await stage.ask(ChatStep(name="draft", prompt=prompt, temperature=0))
    loc = location_of(info.value)
    assert loc is not None
    assert (loc.path, loc.name, loc.node_type) == ("pipeline/section_2/draft", "draft", "chat")
    assert [r.path for r in ctx.steps] == ["pipeline/section_1/draft"]
    assert roles(ctx) == [("system", "sys")]


async def test_action_errors_are_attributed_to_the_action() -> None:
    def broken() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError) as info:
        async with pipeline(ctx0()) as root, root.scope("b") as b:
            await b.act("action_01", broken)
    loc = location_of(info.value)
    assert loc is not None and (loc.path, loc.node_type) == ("pipeline/b/action_01", "action")


async def test_reused_flow_gets_unique_paths() -> None:
    async def enclave(scope: Scope) -> None:
        async with scope.scope("enclave") as inner:
            await inner.ask(ChatStep(name="critic", prompt="c", temperature=0, merge="none"))

    ctx = ctx0()
    async with pipeline(ctx) as root:
        for stage in ("s1", "s2"):
            async with root.scope(stage) as inner:
                await enclave(inner)
    paths = [r.path for r in ctx.steps]
    assert paths == ["pipeline/s1/enclave/critic", "pipeline/s2/enclave/critic"]


# -- recorders ------------------------------------------------------------------------


class ListRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None:
        self.events.append(("start", path, metrics))

    def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
        self.events.append(("end", record.path, {}))

    def on_step_error(self, ctx: Context, path: str, step_name: str, exc: BaseException) -> None:
        self.events.append(("error", path, {"name": step_name, "exc": exc}))


async def test_custom_recorder_sees_paths_and_metrics() -> None:
    rec = ListRecorder()
    ctx = ctx0()
    async with pipeline(ctx, ChatRunner(echo_backend(), recorder=rec)) as root:
        await root.ask(ChatStep(name="s", prompt="abc", temperature=0))
    start = rec.events[0]
    assert start[0:2] == ("start", "pipeline/s")
    assert (
        start[2]["context_messages"] == 1
        and start[2]["prompt_chars"] == 3
        and start[2]["type"] == "chat"
    )
    assert rec.events[1][0:2] == ("end", "pipeline/s")
    assert ctx.steps == []  # a custom recorder decides what to keep


async def test_recorder_error_callback_gets_path() -> None:
    rec = ListRecorder()
    with pytest.raises(EmptyResponseError):
        await (
            ChatRunner(FunctionTextBackend(lambda r: ""), recorder=rec)
            .root(ctx0())
            .ask(ChatStep(name="s", prompt="p", temperature=0))
        )
    assert rec.events[-1][0:2] == ("error", "s")


def test_recorder_missing_a_method_is_rejected_at_construction() -> None:
    class Partial:
        def on_step_start(self, ctx: Context, path: str, **metrics: Any) -> None: ...

    with pytest.raises(TypeError, match="on_step_end, on_step_error"):
        ChatRunner(echo_backend(), recorder=Partial())


async def test_null_recorder_records_nothing() -> None:
    ctx = ctx0()
    await (
        ChatRunner(echo_backend(), recorder=NullStepRecorder())
        .root(ctx)
        .ask(ChatStep(prompt="p", temperature=0))
    )
    assert ctx.steps == []


async def test_default_recorder_appends_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    ctx = ctx0()
    caplog.set_level("DEBUG", logger="image_project.steps")
    async with pipeline(ctx, ChatRunner(echo_backend(), recorder=DefaultStepRecorder())) as root:
        await root.ask(ChatStep(name="s", prompt="p", temperature=0))
    assert [r.path for r in ctx.steps] == ["pipeline/s"]
    assert "pipeline/s" in caplog.text


async def test_recorder_exception_fails_the_step_and_keeps_the_path() -> None:
    class Exploding(ListRecorder):
        def on_step_end(self, ctx: Context, record: EngineEvent) -> None:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full") as info:
        async with pipeline(ctx0(), ChatRunner(echo_backend(), recorder=Exploding())) as root:
            await root.ask(ChatStep(name="s", prompt="p", temperature=0))
    loc = location_of(info.value)
    assert loc is not None and loc.path == "pipeline/s"


async def test_fallback_is_accepted_after_reasks_and_everything_is_recorded() -> None:
    backend = ScriptedTextBackend(["one", "two"])
    ctx = ctx0()
    step: ChatStep[Any] = ChatStep(
        name="n",
        prompt="a number",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1, fallback=lambda text, exc: f"fallback({text})"),
    )
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == "fallback(two)"
    record = chats(ctx)[0]
    assert [r.response for r in record.reasks] == ["one", "two"]
    assert record.attempts == 2


async def test_successive_root_runs_record_in_run_order() -> None:
    ctx = ctx0()
    runner = ChatRunner(echo_backend())
    async with runner.root(ctx).scope("first", merge="all_messages") as first:
        await first.ask(ChatStep(name="a", prompt="a", temperature=0))
        await first.ask(ChatStep(name="b", prompt="b", temperature=0))
    await runner.root(ctx).ask(ChatStep(name="second", prompt="c", temperature=0))
    assert [r.path for r in ctx.steps] == ["first/a", "first/b", "second"]


# -- recoverable steps (on_failure) and stateless re-asks ------------------------------


async def test_recoverable_step_failure_is_recorded_and_siblings_continue() -> None:
    def fn(req: TextRequest) -> str:
        if "bad" in last_user_text(req):
            raise ServerError("503 upstream", status=503, attempts=3)
        return "7"

    ctx = ctx0()
    steps: list[ChatStep[object]] = [
        ChatStep(
            name=name,
            prompt=name,
            temperature=0,
            output=TextOutput(parse_int),
            on_failure=lambda exc: ("failed", type(exc).__name__),
        )
        for name in ("good", "bad")
    ]
    answers = await ChatRunner(FunctionTextBackend(fn)).root(ctx).gather("judges", steps)
    kept = {step.name: answer.value for step, answer in zip(steps, answers, strict=True)}
    assert kept == {"good": 7, "bad": ("failed", "ServerError")}
    good, bad = chats(ctx)
    assert good.error is None and bad.response is None
    assert bad.error == StepError(type="ServerError", message="503 upstream", status=503)
    assert bad.attempts == 3
    assert bad.model_dump(mode="json")["error"]["status"] == 503
    assert roles(ctx) == [("system", "sys")]


async def test_recoverable_step_keeps_the_last_bad_answer_and_reasks() -> None:
    backend = ScriptedTextBackend(["one", "two"])
    ctx = ctx0()
    step: ChatStep[Any] = ChatStep(
        name="n",
        prompt="a number",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1),
        on_failure=lambda exc: None,
    )
    answer = await ChatRunner(backend).root(ctx).ask(step)
    record = chats(ctx)[0]
    assert answer.value is None and answer.event is record
    assert record.response == "two" and [r.response for r in record.reasks] == ["one", "two"]
    assert record.error is not None and record.error.reason == "invalid_output"
    assert "two" in str(record.error.output_preview)
    assert roles(ctx) == [("system", "sys")]  # a recovered failure merges nothing


async def test_recoverable_refusal_is_recorded_without_reask() -> None:
    backend = ScriptedTextBackend([TextReply(text=None, model="m", refusal="no")])
    ctx = ctx0()
    step: ChatStep[Any] = ChatStep(
        name="n",
        prompt="p",
        temperature=0,
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=3),
        on_failure=lambda exc: "recovered",
    )
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == "recovered"
    error = chats(ctx)[0].error
    assert error is not None and error.type == "RefusalError"
    assert len(backend.requests) == 1


async def test_without_on_failure_the_same_error_fails_the_run() -> None:
    def fn(req: TextRequest) -> str:
        raise ServerError("503 upstream", status=503, attempts=3)

    with pytest.raises(ServerError):
        await (
            ChatRunner(FunctionTextBackend(fn))
            .root(ctx0())
            .ask(ChatStep(name="n", prompt="p", temperature=0))
        )


async def test_restate_reask_sends_one_fresh_user_message() -> None:
    backend = ScriptedTextBackend(["one", "2"])
    ctx = ctx0()
    step = ChatStep(
        name="n",
        prompt="give a number",
        temperature=0,
        stateless=True,
        system_prompt="judge",
        output=TextOutput(parse_int),
        reask=ReaskPolicy(max=1, style="restate"),
    )
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == 2
    second = backend.requests[1].messages
    assert [m.role for m in second] == ["system", "user"]
    assert second[1].content.startswith("give a number\n\n")
    assert "one" in second[1].content  # the validation error names the bad answer
    assert all(m.role != "assistant" for m in second)


def test_reask_style_is_checked_when_the_step_is_built() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"ReaskPolicy\.style"):
        ChatStep(
            prompt="p",
            temperature=0,
            output=TextOutput(parse_int),
            reask=ReaskPolicy(max=1, style="loud"),  # type: ignore[arg-type]
        )
