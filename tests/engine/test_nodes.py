"""Checks of steps when they are built and of a scope's children before any call: naming,
collisions, merge modes, hooks."""

from __future__ import annotations

from typing import Any

import pytest

from image_project.backends.base import ImageRequest
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep, ImageStep
from image_project.engine.output import ReaskPolicy, TextOutput
from image_project.engine.runner import ChatRunner
from image_project.engine.scope import Scope
from image_project.errors import PipelineDefinitionError
from image_project.testing import FakeImageBackend, FunctionTextBackend


def chat(name: str | None = None, **kw: object) -> ChatStep[Any]:
    return ChatStep(prompt="p", temperature=0.5, name=name, **kw)  # type: ignore[arg-type]


def root(backend: FunctionTextBackend | None = None) -> Scope:
    runner = ChatRunner(
        backend or FunctionTextBackend(lambda r: "ok"), image_backend=FakeImageBackend()
    )
    return runner.root(Context())


@pytest.mark.anyio
async def test_unnamed_children_are_named_by_index_and_kind() -> None:
    ctx = Context()
    runner = ChatRunner(FunctionTextBackend(lambda r: "ok"), image_backend=FakeImageBackend())
    async with runner.root(ctx).scope("pipeline") as scope:
        await scope.ask(chat())
        await scope.ask(ImageStep(request=ImageRequest(prompt="p", model="m", seed=1)))
        await scope.act("prepare", lambda: None)  # an action is named by its code
        await scope.ask(chat("x"))
        await scope.ask(chat())
    names = tuple(e.name for e in ctx.steps)
    assert names == ("step_01", "image_02", "prepare", "x", "step_05")


@pytest.mark.anyio
async def test_sibling_name_collision_is_an_error_before_any_call() -> None:
    backend = FunctionTextBackend(lambda r: "ok")
    with pytest.raises(PipelineDefinitionError, match="'dup'"):
        await root(backend).gather("b", [chat("dup"), chat("dup")])
    assert backend.requests == []


@pytest.mark.anyio
async def test_explicit_name_colliding_with_generated_name_is_an_error() -> None:
    with pytest.raises(PipelineDefinitionError, match="step_01"):
        await root().gather("pipeline", [chat(), chat("step_01")])


@pytest.mark.parametrize("bad", ["", "   ", "a/b", 3])
def test_bad_names_are_rejected(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError):
        ChatStep(prompt="p", temperature=0.1, name=bad)  # type: ignore[arg-type]


def test_names_are_stripped() -> None:
    assert chat("  draft ").name == "draft"


@pytest.mark.anyio
@pytest.mark.parametrize("merge", ["all", "", None, "last"])
async def test_invalid_merge_mode_is_rejected(merge: object) -> None:
    with pytest.raises(PipelineDefinitionError, match="merge"):
        chat(merge=merge)
    with pytest.raises(PipelineDefinitionError, match="merge"):
        async with root().scope("b", merge=merge):  # type: ignore[arg-type]
            pass


def test_temperature_is_a_field_not_a_meta_param() -> None:
    with pytest.raises(PipelineDefinitionError, match="temperature"):
        chat(meta={"temperature": 0.3})


@pytest.mark.parametrize("bad", [True, "0.5", float("nan"), -0.1, 2.5, None])
def test_bad_temperature_is_rejected(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError, match="temperature"):
        ChatStep(prompt="p", temperature=bad)  # type: ignore[arg-type]


def test_prompt_must_be_string_or_callable() -> None:
    with pytest.raises(PipelineDefinitionError, match="prompt"):
        ChatStep(prompt=42, temperature=0.0)  # type: ignore[arg-type]


def test_on_failure_must_be_callable() -> None:
    with pytest.raises(PipelineDefinitionError, match="on_failure must be callable"):
        chat("a", on_failure="k")


def test_a_fallback_needs_an_output_and_system_prompt_needs_stateless() -> None:
    with pytest.raises(PipelineDefinitionError, match="needs an output"):
        chat(reask=ReaskPolicy(fallback=lambda text, exc: text))
    with pytest.raises(PipelineDefinitionError, match="stateless"):
        chat(system_prompt="sys")
    chat(stateless=True, system_prompt="sys", output=TextOutput(str), reask=ReaskPolicy(max=2))


@pytest.mark.anyio
async def test_children_must_be_nodes() -> None:
    with pytest.raises(PipelineDefinitionError, match="children"):
        await root().gather("b", ["not a node"])  # type: ignore[arg-type]
