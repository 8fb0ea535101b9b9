"""The standard prompt pipeline: shape per refinement mode, context hygiene, the concurrent
ToT enclave, and the dislike rewrite's parser and re-asks."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import anyio
import pytest

from image_project.backends.base import TextRequest
from image_project.engine import ChatRunner, ChatStep, Context, walk
from image_project.errors import ModelOutputError
from image_project.stages.standard import (
    CRITICS,
    DALLE_PROMPT_KEY,
    STAGES,
    SYSTEM_PROMPT,
    Refinement,
    dislike_rewrite_step,
    parse_concept_array,
    prompt_pipeline,
)
from image_project.testing import FunctionTextBackend, ScriptedTextBackend, last_user_text

pytestmark = pytest.mark.anyio

CONCEPTS = (
    "Baroque: dramatic chiaroscuro",
    "Bird's-Eye View: from above",
    "Teal and Orange: contrast",
)


def run_ctx() -> Context:
    ctx = Context.with_system(SYSTEM_PROMPT)
    ctx.outputs.update(concepts=CONCEPTS, preferences="Likes:\n- lighthouses", dislikes=("clowns",))
    return ctx


def chat_paths(refinement: Refinement) -> list[str]:
    tree = prompt_pipeline(run_seed=1, refinement=refinement, temperature=0.8)
    return [p for p, n in walk(tree) if isinstance(n, ChatStep)]


@pytest.mark.parametrize(
    ("refinement", "calls"), [("none", 6), ("final", 6 + 9), ("per_stage", 6 * 10)]
)
def test_pipeline_shape_per_refinement(refinement: Refinement, calls: int) -> None:
    paths = chat_paths(refinement)
    assert len(paths) == calls == len(set(paths))
    assert paths[0] == "pipeline/initial_prompt/draft"


def test_final_refinement_wraps_only_the_last_stage() -> None:
    paths = chat_paths("final")
    assert next(p for p in paths if "tot_enclave" in p).startswith(
        "pipeline/dalle_prompt_creation/tot_enclave/fanout/"
    )
    assert paths[-1] == "pipeline/dalle_prompt_creation/tot_enclave/reduce/final_consensus"


def test_every_step_has_a_distinct_seed_derived_from_the_run_seed() -> None:
    def seeds(run_seed: int) -> list[int | None]:
        tree = prompt_pipeline(run_seed=run_seed, refinement="final", temperature=0.8)
        return [n.seed for _, n in walk(tree) if isinstance(n, ChatStep)]

    assert seeds(5) == seeds(5)
    assert len(set(seeds(5))) == len(seeds(5))
    assert seeds(5) != seeds(6)


async def test_context_holds_only_stage_outputs_and_prompt_is_captured() -> None:
    backend = FunctionTextBackend(lambda r: f"answer to: {last_user_text(r)[:30]}")
    ctx = run_ctx()
    await ChatRunner(backend).run(
        ctx, prompt_pipeline(run_seed=1, refinement="final", temperature=0.8)
    )
    assert [m.role for m in ctx.messages] == ["system"] + ["assistant"] * len(STAGES)
    assert ctx.outputs[DALLE_PROMPT_KEY] == ctx.messages[-1].content
    assert ctx.outputs[DALLE_PROMPT_KEY].startswith("answer to: Synthesise")
    # Later stages never see enclave chatter: only system + previous stage outputs + prompt.
    last_draft = next(r for r in backend.requests if "Write the final prompt" in last_user_text(r))
    assert len(last_draft.messages) == 1 + (len(STAGES) - 1) + 1


async def test_enclave_critics_and_consensus_drafts_run_concurrently() -> None:
    critic_gate, consensus_gate = anyio.Event(), anyio.Event()
    waiting = {"critic": 0, "consensus": 0}

    async def answer(request: TextRequest) -> str:
        text = last_user_text(request)
        kind = (
            "critic"
            if "critique circle" in text
            else "consensus"
            if text.startswith("Five critics")
            else None
        )
        if kind:
            waiting[kind] += 1
            gate, need = (critic_gate, len(CRITICS)) if kind == "critic" else (consensus_gate, 3)
            if waiting[kind] == need:
                gate.set()
            await gate.wait()  # opens only when every sibling is in flight at once
        return f"ok: {text[:20]}"

    with anyio.fail_after(10):
        await ChatRunner(FunctionTextBackend(answer)).run(
            run_ctx(), prompt_pipeline(run_seed=1, refinement="final", temperature=0.8)
        )
    assert waiting == {"critic": 5, "consensus": 3}


async def test_only_representative_sees_preferences_and_only_chameleon_sees_concepts() -> None:
    backend = FunctionTextBackend(lambda r: "fine")
    await ChatRunner(backend).run(
        run_ctx(), prompt_pipeline(run_seed=1, refinement="final", temperature=0.8)
    )
    critic_prompts = {
        name: last_user_text(r)
        for r in backend.requests
        for name, label, _, _ in CRITICS
        if last_user_text(r).startswith(f"You are {label}.")
    }
    assert set(critic_prompts) == {c[0] for c in CRITICS}
    for name, text in critic_prompts.items():
        assert ("lighthouses" in text) == (name == "representative")
        assert ("Baroque" in text) == (name == "chameleon")


def concept_parser(expected: int) -> Callable[[str], tuple[str, ...]]:
    """``parse_concept_array`` is annotated ``-> object``; it returns this parser."""
    return cast(Callable[[str], tuple[str, ...]], parse_concept_array(expected))


@pytest.mark.parametrize(
    "text",
    [
        '["a", "b", "c"]',
        '```json\n["a", "b", "c"]\n```',
        'Sure! Here: ["a", "b", "c"] hope it helps',
    ],
)
def test_concept_array_parser_accepts_json_arrays(text: str) -> None:
    assert concept_parser(3)(text) == ("a", "b", "c")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("no array here", "no \\[...\\]"),
        ('["a", "b"]', "expected 3"),
        ('["a", 2, "c"]', "non-empty string"),
        ('["a", "b", ', "no \\[...\\]"),
        ('["a" "b" "c"]', "not valid JSON"),
    ],
)
def test_concept_array_parser_rejects_bad_answers(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        concept_parser(3)(text)


async def test_dislike_rewrite_reasks_then_captures_concepts() -> None:
    backend = ScriptedTextBackend(['["only one"]', '["x", "y", "z"]'])
    ctx = run_ctx()
    await ChatRunner(backend).run(ctx, dislike_rewrite_step(CONCEPTS, ("clowns",), run_seed=3))
    assert ctx.outputs["concepts"] == ("x", "y", "z")
    first = backend.requests[0]
    assert [m.role for m in first.messages] == ["system", "user"]
    assert "clowns" in last_user_text(first)
    assert "expected 3 concepts" in last_user_text(backend.requests[1])


async def test_dislike_rewrite_gives_up_after_bounded_reasks() -> None:
    backend = ScriptedTextBackend(["nope"] * 3)
    with pytest.raises(ModelOutputError, match="dislike_rewrite"):
        await ChatRunner(backend).run(
            run_ctx(), dislike_rewrite_step(CONCEPTS, ("clowns",), run_seed=3, max_reasks=2)
        )
    backend.assert_all_used()
