"""The standard prompt pipeline: shape per refinement mode, context hygiene, the concurrent
ToT enclave, and the dislike rewrite's structured answer and re-asks."""

from __future__ import annotations

import json

import anyio
import pytest

from image_project.backends.base import TextRequest
from image_project.engine.context import Context
from image_project.engine.output import JsonOutput
from image_project.engine.runner import ChatRunner
from image_project.errors import ModelOutputError
from image_project.stages.standard import (
    CRITICS,
    STAGES,
    SYSTEM_PROMPT,
    Brief,
    Refinement,
    concept_rewrite_output,
    dislike_phrases,
    dislike_rewrite_step,
    prompt_pipeline,
)
from image_project.testing import FunctionTextBackend, ScriptedTextBackend, last_user_text
from tests.support.pipeline import pipeline_shape

pytestmark = pytest.mark.anyio

CONCEPTS = (
    "Baroque: dramatic chiaroscuro",
    "Bird's-Eye View: from above",
    "Teal and Orange: contrast",
)


BRIEF = Brief(concepts=CONCEPTS, preferences="Likes:\n- lighthouses", dislikes=("clowns",))


def run_ctx() -> Context:
    return Context.with_system(SYSTEM_PROMPT)


def rewrite_answer(*concepts: str) -> str:
    """The dislike rewrite's structured answer."""
    return json.dumps({"concepts": list(concepts)})


async def chat_paths(refinement: Refinement) -> list[str]:
    shape = await pipeline_shape(BRIEF, run_seed=1, refinement=refinement)
    return list(shape.paths)


@pytest.mark.parametrize(
    ("refinement", "calls"), [("none", 6), ("final", 6 + 9), ("per_stage", 6 * 10)]
)
async def test_pipeline_shape_per_refinement(refinement: Refinement, calls: int) -> None:
    paths = await chat_paths(refinement)
    assert len(paths) == calls == len(set(paths))
    assert paths[0] == "pipeline/initial_prompt/draft"


async def test_final_refinement_wraps_only_the_last_stage() -> None:
    paths = await chat_paths("final")
    assert next(p for p in paths if "tot_enclave" in p).startswith(
        "pipeline/dalle_prompt_creation/tot_enclave/fanout/"
    )
    assert paths[-1] == "pipeline/dalle_prompt_creation/tot_enclave/reduce/final_consensus"


async def test_every_step_has_a_distinct_seed_derived_from_the_run_seed() -> None:
    async def seeds(run_seed: int) -> list[int | None]:
        shape = await pipeline_shape(BRIEF, run_seed=run_seed, refinement="final")
        return list(shape.seeds)

    assert await seeds(5) == await seeds(5)
    assert len(set(await seeds(5))) == len(await seeds(5))
    assert await seeds(5) != await seeds(6)


async def test_context_holds_only_stage_outputs_and_prompt_is_the_last_response() -> None:
    backend = FunctionTextBackend(lambda r: f"answer to: {last_user_text(r)[:30]}")
    ctx = run_ctx()
    final_prompt = await prompt_pipeline(
        ChatRunner(backend).root(ctx), brief=BRIEF, run_seed=1, refinement="final", temperature=0.8
    )
    # Each stage is one exchange: its prompt, then its (refined) output.
    assert [m.role for m in ctx.messages] == ["system"] + ["user", "assistant"] * len(STAGES)
    assert final_prompt == ctx.messages[-1].content
    assert final_prompt is not None
    assert final_prompt.startswith("answer to: Synthesise")
    assert ctx.messages[-2].content.startswith("Write the final prompt")
    # Later stages never see enclave chatter: only system + previous stages + prompt.
    last_draft = next(r for r in backend.requests if "Write the final prompt" in last_user_text(r))
    assert len(last_draft.messages) == 1 + 2 * (len(STAGES) - 1) + 1


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
        await prompt_pipeline(
            ChatRunner(FunctionTextBackend(answer)).root(run_ctx()),
            brief=BRIEF,
            run_seed=1,
            refinement="final",
            temperature=0.8,
        )
    assert waiting == {"critic": 5, "consensus": 3}


async def test_only_representative_sees_preferences_and_only_chameleon_sees_concepts() -> None:
    backend = FunctionTextBackend(lambda r: "fine")
    await prompt_pipeline(
        ChatRunner(backend).root(run_ctx()),
        brief=BRIEF,
        run_seed=1,
        refinement="final",
        temperature=0.8,
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


def rewrite_parse(expected: int, text: str) -> object:
    """The dislike rewrite's answer read the way the runner reads it."""
    return concept_rewrite_output(expected).parse(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"concepts": ["a", "b", "c"]}',
        '  \n{"concepts": [" a ", "b", "c"]}\n ',
        '```json\n{"concepts": ["a", "b", "c"]}\n```',
        '```\n{"concepts": ["a", "b", "c"]}\n```',
    ],
)
def test_concept_rewrite_accepts_the_object_alone_or_in_one_fence(text: str) -> None:
    assert rewrite_parse(3, text) == ("a", "b", "c")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("no array here", "expected a JSON object, found no"),
        ('{"concepts": ["a", "b"]}', "expected 3 concepts, got 2"),
        ('{"concepts": ["a", "b", "c", "d"]}', "expected 3 concepts, got 4"),
        ('{"concepts": ["a", 2, "c"]}', "concepts\\.1: Input should be a valid string"),
        ('{"concepts": ["a", "  ", "c"]}', "concepts\\.1: String should have at least 1"),
        ('{"concepts": ["a", "b", ', "expected a JSON object, found no"),
        ('{"concepts": ["a" "b" "c"]}', "not valid JSON"),
        # Behaviour change: the old free-text parser dug the array out of prose; a structured
        # answer must be the object alone (prose around it is rejected, like every JSON answer).
        ('Sure! Here: {"concepts": ["a", "b", "c"]} hope it helps', "ONLY the JSON object"),
        ('["a", "b", "c"]', "expected a JSON object, found no"),
        ('{"concepts": ["a", "b", "c"], "note": "x"}', r"\(top level\): a key that is not in"),
    ],
)
def test_concept_rewrite_rejects_bad_answers(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        rewrite_parse(3, text)


@pytest.mark.parametrize("count", [1, 3, 4])
async def test_dislike_rewrite_sends_a_strict_schema_for_exactly_n_concepts(count: int) -> None:
    concepts = tuple(f"concept {i}" for i in range(count))
    backend = ScriptedTextBackend([rewrite_answer(*concepts)])
    step = dislike_rewrite_step(concepts, ("clowns",), run_seed=3)
    assert isinstance(step.output, JsonOutput)
    ctx = run_ctx()
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == concepts
    [request] = backend.requests
    schema = request.json_schema
    assert schema is not None
    assert (schema.name, schema.strict) == ("concept_rewrite", True)
    assert schema.schema["required"] == ["concepts"]
    assert schema.schema["additionalProperties"] is False
    array = schema.schema["properties"]["concepts"]
    assert array["items"] == {"type": "string"}
    assert array["minItems"] == array["maxItems"] == count


async def test_dislike_rewrite_reasks_then_captures_concepts() -> None:
    backend = ScriptedTextBackend([rewrite_answer("only one"), rewrite_answer(*CONCEPTS)])
    ctx = run_ctx()
    step = dislike_rewrite_step(CONCEPTS, ("clowns",), run_seed=3)
    assert (await ChatRunner(backend).root(ctx).ask(step)).value == CONCEPTS
    first = backend.requests[0]
    assert [m.role for m in first.messages] == ["system", "user"]
    assert "clowns" in last_user_text(first)
    assert "expected 3 concepts" in last_user_text(backend.requests[1])


async def test_dislike_rewrite_gives_up_after_bounded_reasks() -> None:
    backend = ScriptedTextBackend(["nope"] * 3)
    with pytest.raises(ModelOutputError, match="dislike_rewrite"):
        await (
            ChatRunner(backend)
            .root(run_ctx())
            .ask(dislike_rewrite_step(CONCEPTS, ("clowns",), run_seed=3, max_reasks=2))
        )
    backend.assert_all_used()


DISLIKES = ("Gore, body horror or anything gruesome", "Clowns", "Spiders in close-up")


def test_dislike_phrases_cut_each_dislike_into_its_phrases() -> None:
    assert dislike_phrases(DISLIKES) == (
        ("gore",),
        ("body", "horror"),
        ("anything", "gruesome"),
        ("clowns",),
        ("spiders", "in", "close", "up"),
    )


def test_a_rewrite_that_copies_the_dislikes_is_a_gate_rejection() -> None:
    # What Gemma 3 270M did: the first three dislikes instead of the concepts.
    output = concept_rewrite_output(3, concepts=CONCEPTS, dislikes=DISLIKES)
    with pytest.raises(ModelOutputError) as caught:
        output.parse(rewrite_answer(*DISLIKES))
    assert caught.value.reason == "gate:rewrite_dislike"
    assert "contains the dislike 'gore'" in str(caught.value)


def test_a_rewrite_that_loses_a_concept_is_a_gate_rejection() -> None:
    output = concept_rewrite_output(3, concepts=CONCEPTS, dislikes=DISLIKES)
    with pytest.raises(ModelOutputError) as caught:
        output.parse(rewrite_answer(CONCEPTS[0], "A quiet harbour", CONCEPTS[2]))
    assert caught.value.reason == "gate:rewrite_meaning"
    assert "concept 2 shares no word with the original" in str(caught.value)
    assert "A quiet harbour" not in str(caught.value)


def test_a_rewrite_may_replace_a_conflicting_concept_and_reword_the_others() -> None:
    concepts = ("Clowns at a birthday party", "Bird's-Eye View: from above", "Teal forests")
    output = concept_rewrite_output(3, concepts=concepts, dislikes=DISLIKES)
    rewritten = ("Jugglers in the rain", "A view from high above", "A teal forest at dusk")
    assert output.parse(rewrite_answer(*rewritten)) == rewritten
    # Keeping a concept that holds a dislike phrase is no rewrite.
    with pytest.raises(ModelOutputError, match="gate:rewrite_dislike"):
        output.parse(rewrite_answer(concepts[0], *rewritten[1:]))


async def test_a_rewrite_still_failing_its_gate_fails_the_step_with_the_gate_reason() -> None:
    backend = ScriptedTextBackend([rewrite_answer(*DISLIKES)] * 2)
    with pytest.raises(ModelOutputError) as caught:
        await (
            ChatRunner(backend)
            .root(run_ctx())
            .ask(dislike_rewrite_step(CONCEPTS, DISLIKES, run_seed=3, max_reasks=1))
        )
    assert caught.value.reason == "gate:rewrite_dislike"
    assert "dislike_rewrite" in str(caught.value)
    assert "gate:rewrite_dislike" in last_user_text(backend.requests[1])
    backend.assert_all_used()
