"""Output-token limits: every step of the pipeline names the kind of its answer,
the runner resolves it from its TokenLimits (the config's ``backend.max_output_tokens``),
sends it with every request of the step and records it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from image_project.backends.base import Message, TextReply
from image_project.engine.budget import TokenBudget, TokenLimits
from image_project.engine.context import Context
from image_project.engine.nodes import ChatStep
from image_project.engine.output import JsonOutput, ReaskPolicy
from image_project.engine.runner import ChatRunner
from image_project.errors import ConfigError, PipelineDefinitionError
from image_project.record.base import RecordModel
from image_project.record.events import ChatEvent
from image_project.run.driver import token_limits
from image_project.stages.scoring.cards import CARD_OUTPUT
from image_project.stages.scoring.evolution import selector_output
from image_project.stages.scoring.hints import hints_output
from image_project.stages.scoring.judges import judge_output, reasoned_output
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.standard import concept_rewrite_output
from image_project.testing import ScriptedTextBackend
from tests.test_app import make_cfg

pytestmark = pytest.mark.anyio


class Pick(RecordModel):
    choice: str


def test_a_budget_resolves_by_kind_per_card_and_with_reasoning_headroom() -> None:
    limits = TokenLimits(
        card=900,
        judge_base=100,
        judge_per_card=50,
        reasoning_headroom=7000,
        reasoning_models=frozenset({"thinker"}),
    )
    assert limits.resolve(TokenBudget("card"), "m") == 900
    assert limits.resolve(TokenBudget("judge", items=6), "m") == 100 + 6 * 50
    assert limits.resolve(TokenBudget("card"), "thinker") == 900 + 7000
    assert limits.resolve(123, "thinker") == 123  # a plain int is sent as it is
    assert limits.resolve(None, "m") is None


@pytest.mark.parametrize("bad", [0, -5, True, 2.5, "100"])
def test_a_step_limit_that_is_not_a_positive_int_or_a_budget_fails_when_built(bad: Any) -> None:
    with pytest.raises(PipelineDefinitionError, match="max_output_tokens"):
        ChatStep(name="s", prompt="p", temperature=0.0, max_output_tokens=bad)


def test_an_unknown_kind_fails_when_built() -> None:
    with pytest.raises(PipelineDefinitionError, match=r"TokenBudget\.kind"):
        TokenBudget("essay")  # type: ignore[arg-type]


async def test_every_request_of_a_step_carries_its_resolved_limit_and_the_record_says_it() -> None:
    backend = ScriptedTextBackend(["not json", '{"choice": "b"}'])
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        max_output_tokens=TokenBudget("selector", items=2),
        output=JsonOutput(Pick),
        reask=ReaskPolicy(max=1),
    )
    ctx = Context()
    limits = TokenLimits(selector_base=21, selector_per_pick=150)
    await ChatRunner(backend, token_limits=limits).root(ctx).ask(step)
    assert [r.max_output_tokens for r in backend.requests] == [321, 321]
    (event,) = [e for e in ctx.steps if isinstance(e, ChatEvent)]
    assert event.params.max_output_tokens == 321


async def test_a_cut_off_after_a_smaller_retry_names_the_limit_that_was_sent() -> None:
    """The backend retried a timed-out attempt with a smaller limit: the re-ask names that
    limit, and the step records the backend's note."""
    note = "attempt 2: max_completion_tokens 1000 -> 500 after attempt 1 timed out"
    backend = ScriptedTextBackend(
        [
            TextReply(
                text='{"choice": "a lo',
                model="m",
                finish_reason="length",
                max_output_tokens=500,
                notes=(note,),
            ),
            '{"choice": "a lot"}',
        ]
    )
    step: ChatStep[Any] = ChatStep(
        name="pick",
        prompt="choose",
        temperature=0.0,
        max_output_tokens=1000,
        output=JsonOutput(Pick),
        reask=ReaskPolicy(max=1),
    )
    ctx = Context()
    await ChatRunner(backend).root(ctx).ask(step)
    (event,) = [e for e in ctx.steps if isinstance(e, ChatEvent)]
    assert "cut off at 500 tokens" in event.reasks[0].error
    assert event.wire_notes == (note,)


async def test_a_conversation_strict_templates_reject_is_never_sent() -> None:
    backend = ScriptedTextBackend(["never"])
    ctx = Context(messages=(Message("system", "s"), Message("assistant", "orphan")))
    with pytest.raises(PipelineDefinitionError, match="break strict chat templates"):
        await ChatRunner(backend).root(ctx).ask(ChatStep(name="s", prompt="p", temperature=0.0))
    assert backend.requests == []


def test_the_config_limits_reach_the_runner_with_headroom_for_reasoning_models(
    tmp_path: Path,
) -> None:
    cfg = make_cfg(
        tmp_path, "backend.max_output_tokens.card=700", "backend.max_output_tokens.title=40"
    )
    limits = token_limits(cfg)
    assert limits.card == 700 and limits.title == 40
    assert limits.resolve(TokenBudget("card"), "gpt-6.1-sol") == 700 + 25_000
    # gpt-6-luna is sent reasoning_effort none: no reasoning tokens, no headroom.
    assert limits.resolve(TokenBudget("card"), "gpt-6-luna") == 700


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("backend.max_output_tokens.prose=0", "backend.max_output_tokens.prose"),
        ("backend.max_output_tokens.card=1000000", "backend.max_output_tokens.card"),
        ("backend.max_output_tokens.essay=10", "backend.max_output_tokens.essay"),
        ("backend.token_limit_param=max_length", "backend.token_limit_param"),
        ("backend.role_style=assistant", "backend.role_style"),
        ("backend.schema_dialect=gbnf", "backend.schema_dialect"),
    ],
)
def test_bad_wire_settings_are_config_errors_naming_the_key(
    tmp_path: Path, setting: str, key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        make_cfg(tmp_path, setting)


def _longest(node: dict[str, Any]) -> Any:
    """The longest valid instance of a grammar-dialect schema: every string at its maxLength
    (as words), every array at its maxItems."""
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    kind = node["type"]
    if kind == "object":
        return {k: _longest(v) for k, v in node["properties"].items()}
    if kind == "array":
        return [_longest(node["items"]) for _ in range(node["maxItems"])]
    if kind == "string":
        return ("word " * node["maxLength"])[: node["maxLength"]]
    return node.get("maximum", 0)


CHARS_PER_TOKEN = 4
"""OpenAI's rule of thumb for English text (an estimate: the tokenizer decides)."""


@pytest.mark.parametrize(
    "kind", ["card", "rewrite", "hints", "judge", "judge_reasoned", "selector"]
)
def test_the_default_limits_fit_the_longest_valid_answer(kind: str) -> None:
    """A default that cut off a valid answer would re-ask a model for doing what it was
    told; each JSON kind's default fits its longest valid answer (rule of thumb: 4
    characters per token), for the default panel sizes."""
    ids = [chr(ord("A") + i) for i in range(6)]
    outputs: dict[str, tuple[JsonOutput[Any], TokenBudget]] = {
        "card": (CARD_OUTPUT, TokenBudget("card")),
        "rewrite": (concept_rewrite_output(3), TokenBudget("rewrite")),
        "hints": (hints_output(["light"]), TokenBudget("hints")),
        "judge": (judge_output(ids), TokenBudget("judge", items=len(ids))),
        "judge_reasoned": (reasoned_output(ids), PROTOCOLS["reasoned"].budget(tuple(ids))),
        "selector": (
            selector_output(ids, ("performance", "diversity", "potential")),
            TokenBudget("selector", items=3),
        ),
    }
    output, budget = outputs[kind]
    grammar = output.schema.grammar
    assert grammar is not None
    chars = len(json.dumps(_longest(dict(grammar))))
    limit = TokenLimits().resolve(budget, "any-model")
    assert limit is not None and chars / CHARS_PER_TOKEN <= limit, (chars, limit)
