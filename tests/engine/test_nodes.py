"""Build-time checks of the step tree: naming, collisions, merge modes, hooks."""

from __future__ import annotations

from typing import Any

import pytest

from image_project.engine import (
    ActionStep,
    Block,
    ChatStep,
    ReaskPolicy,
    TextOutput,
)
from image_project.errors import PipelineDefinitionError


def chat(name: str | None = None, **kw: object) -> ChatStep[Any]:
    return ChatStep(prompt="p", temperature=0.5, name=name, **kw)  # type: ignore[arg-type]


def test_unnamed_children_are_named_by_index_and_kind() -> None:
    block = Block(
        nodes=[chat(), ActionStep(fn=lambda ctx: None), Block(nodes=[]), chat("x"), chat()]
    )
    assert block.child_names == ("step_01", "action_02", "block_03", "x", "step_05")


def test_sibling_name_collision_is_a_build_error() -> None:
    with pytest.raises(PipelineDefinitionError, match="'dup'"):
        Block(name="b", nodes=[chat("dup"), chat("dup")])


def test_explicit_name_colliding_with_generated_name_is_an_error() -> None:
    with pytest.raises(PipelineDefinitionError, match="step_01"):
        Block(nodes=[chat(), chat("step_01")])


@pytest.mark.parametrize("bad", ["", "   ", "a/b", 3])
def test_bad_names_are_rejected(bad: object) -> None:
    with pytest.raises(PipelineDefinitionError):
        ChatStep(prompt="p", temperature=0.1, name=bad)  # type: ignore[arg-type]


def test_names_are_stripped() -> None:
    assert chat("  draft ").name == "draft"


@pytest.mark.parametrize("merge", ["all", "", None, "last"])
def test_invalid_merge_mode_is_rejected(merge: object) -> None:
    with pytest.raises(PipelineDefinitionError, match="merge"):
        chat(merge=merge)
    with pytest.raises(PipelineDefinitionError, match="merge"):
        Block(nodes=[], merge=merge)  # type: ignore[arg-type]


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


def test_keep_and_on_failure_must_be_callable() -> None:
    with pytest.raises(PipelineDefinitionError, match="keep must be callable"):
        chat("a", keep="k")
    with pytest.raises(PipelineDefinitionError, match="on_failure must be callable"):
        chat("a", on_failure="k")


def test_a_fallback_needs_an_output_and_system_prompt_needs_stateless() -> None:
    with pytest.raises(PipelineDefinitionError, match="needs an output"):
        chat(reask=ReaskPolicy(fallback=lambda text, exc: text))
    with pytest.raises(PipelineDefinitionError, match="stateless"):
        chat(system_prompt="sys")
    chat(stateless=True, system_prompt="sys", output=TextOutput(str), reask=ReaskPolicy(max=2))


def test_children_must_be_nodes() -> None:
    with pytest.raises(PipelineDefinitionError, match="children"):
        Block(nodes=["not a node"])  # type: ignore[list-item]


def test_walk_yields_paths_in_preorder() -> None:
    from image_project.engine import walk

    tree = Block(nodes=[chat("a"), Block(name="b", nodes=[chat(), ActionStep(fn=lambda c: 1)])])
    assert [p for p, _ in walk(tree)] == [
        "pipeline",
        "pipeline/a",
        "pipeline/b",
        "pipeline/b/step_01",
        "pipeline/b/action_02",
    ]
