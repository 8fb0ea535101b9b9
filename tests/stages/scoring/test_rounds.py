"""The rounds of multi-round selection as a unit (:mod:`image_project.stages.scoring.rounds`):
a round's plan (kept parents, then each survivor's variants with their ids, directives and
seeds), a variant's step (its parent card and directive, nothing of the scores), the
near-duplicates dropped before judging, the selector's step, and the survivors chosen by
code, by a valid LLM proposal, or by code after an invalid one (loudly). Whole runs:
tests/test_evolution_run.py."""

from __future__ import annotations

from typing import Any

import pytest

from image_project.backends.offline.text import OfflineTextBackend
from image_project.config.models import ScoringConfig, SurvivorCategory
from image_project.engine.budget import TokenBudget
from image_project.engine.context import Context
from image_project.engine.runner import ChatRunner
from image_project.errors import BackendConnectionError, ModelOutputError, StepFailedError
from image_project.record.scoring import RoundCandidate, ScoreRow, SelectorRecord, Survivor
from image_project.seeding import derive_seed
from image_project.stages.scoring.evolution import code_survivors, directive_for, variant_ids
from image_project.stages.scoring.prompts import SELECTOR_SYSTEM, selector_prompt, variant_prompt
from image_project.stages.scoring.rounds import Rounds
from image_project.testing import FunctionTextBackend
from tests.stages.scoring.support import BRIEF, CARDS, SEED, card

pytestmark = pytest.mark.anyio

SLOTS: tuple[SurvivorCategory, ...] = ("performance", "diversity")

KNOWN = {
    i: RoundCandidate(id=i, kind="card", parent=None, directive=f"as {i}", seed=n, card=CARDS[i])
    for n, i in enumerate("ABC")
}
SURVIVORS = (
    Survivor(id="C", category="performance", reason="best", proposed_by="code"),
    Survivor(id="A", category="diversity", reason="other", proposed_by="code"),
)
TABLE = tuple(
    ScoreRow(
        id=i,
        judge_scores={"strict": s, "warm": s - 4},
        median=s - 2,
        aggregate=s - 2,
        spread=4,
        n_ok=2,
        effective_score=float(s - 2),
    )
    for i, s in (("C", 84), ("A", 71), ("B", 52))
)


def rounds(selector: str = "code", **evolution: Any) -> Rounds:
    scoring = ScoringConfig.model_validate(
        {
            "num_ideas": 3,
            "evolution": {"enabled": True, "survivors": 2, "variants_per_survivor": 2}
            | {"selector": selector, **evolution},
        }
    )
    return Rounds(scoring, BRIEF, None, SEED, "selector-model", selector_backend="local")


def test_a_round_plans_its_kept_parents_then_each_survivors_variants() -> None:
    planned = rounds().plan(1, SURVIVORS, KNOWN)
    assert [(c.id, c.kind, c.parent, c.card) for c in planned[:2]] == [
        ("C", "parent", None, None),
        ("A", "parent", None, None),
    ]
    assert (planned[0].directive, planned[0].seed) == ("as C", 2)  # as it was written
    ids = variant_ids(3, 2, 2, 1)
    assert [(c.id, c.kind, c.parent) for c in planned[2:]] == [
        (ids[0], "variant", "C"),
        (ids[1], "variant", "C"),
        (ids[2], "variant", "A"),
        (ids[3], "variant", "A"),
    ]
    for c in planned[2:]:
        assert c.directive == directive_for(SEED, 1, c.id)
        assert c.seed == derive_seed(SEED, "step", "variant", 1, c.id)
    unkept = rounds(keep_parents=False).plan(2, SURVIVORS, KNOWN)
    assert [c.kind for c in unkept] == ["variant"] * 4
    assert [c.id for c in unkept] == list(variant_ids(3, 2, 2, 2))


def test_a_variants_step_sees_its_parent_and_directive_and_nothing_of_the_scores() -> None:
    variant = rounds().plan(1, SURVIVORS, KNOWN)[2]
    step = rounds().variant_step(variant, CARDS["C"], 1)
    assert step.name == f"variant_{variant.id}" and step.seed == variant.seed
    assert step.prompt == variant_prompt(CARDS["C"], variant.directive, BRIEF, None)
    assert not any(str(n) in step.prompt for r in TABLE for n in r.judge_scores.values())
    assert step.temperature == ScoringConfig().generator_temperature
    assert step.max_output_tokens == TokenBudget("card") and step.stateless
    assert step.meta == {
        "role": "variant",
        "card_id": variant.id,
        "parent": "C",
        "round": 1,
        "directive": variant.directive,
    }
    assert step.on_failure is not None
    assert step.on_failure(ModelOutputError("invalid_output", "bad")) is None
    with pytest.raises(BackendConnectionError):
        step.on_failure(BackendConnectionError("connection reset"))


def test_near_duplicates_are_dropped_before_judging_and_an_empty_round_fails() -> None:
    planned = rounds().plan(1, SURVIVORS, KNOWN)
    d, e, _, g = (c.id for c in planned[2:])
    cards = {**CARDS, d: CARDS["C"], e: card("Kettle storm at sea", "Waves rise."), g: CARDS["A"]}
    judged = rounds().dedupe(1, planned, SURVIVORS, cards)
    assert judged.ids == ("C", "A", e)  # the third has no card (invalid), d and g copy a parent
    assert set(judged.dropped) == {d, g}
    assert (judged.dropped[d].of, judged.dropped[d].distance) == ("C", 0.0)
    with pytest.raises(StepFailedError, match="nothing is left to judge"):
        rounds(keep_parents=False).dedupe(1, planned, SURVIVORS, {**CARDS, d: CARDS["C"]})


def test_the_selectors_step_asks_for_the_rounds_slots() -> None:
    r = rounds("llm")
    assert r.slots(TABLE) == ("performance", "diversity")
    assert rounds("llm", survivors=3).slots(TABLE[:2]) == ("performance", "diversity")
    step = r.selector_step(1, TABLE, CARDS)
    assert step.name == "selector" and step.seed == derive_seed(SEED, "step", "selector", 1)
    assert (step.model, step.backend, step.temperature) == ("selector-model", "local", 0.0)
    assert step.prompt == selector_prompt(
        1, 2, "median", TABLE, CARDS, ("performance", "diversity")
    )
    assert step.system_prompt == SELECTOR_SYSTEM
    assert step.max_output_tokens == TokenBudget("selector", items=2)
    assert step.meta == {"role": "selector", "round": 1, "slots": ["performance", "diversity"]}


async def choose(r: Rounds, backend: Any) -> tuple[Any, Context]:
    ctx = Context()
    async with ChatRunner(backend).root(ctx).scope("round_1", merge="all_messages") as scope:
        choice = await r.survivors(scope, 1, TABLE, CARDS)
    return choice, ctx


async def test_the_code_selector_chooses_with_no_call() -> None:
    backend = FunctionTextBackend(lambda request: pytest.fail("the code selector called a model"))
    choice, ctx = await choose(rounds(), backend)
    assert choice.survivors == code_survivors(TABLE, CARDS, SLOTS, label="median")
    assert choice.selector == SelectorRecord(kind="code", status="ok")
    assert [e.path for e in ctx.steps] == ["round_1/survivors"]


async def test_a_valid_llm_proposal_is_taken_with_its_reasons() -> None:
    choice, ctx = await choose(rounds("llm"), OfflineTextBackend())
    assert [s.proposed_by for s in choice.survivors] == ["llm", "llm"]
    assert [s.category for s in choice.survivors] == ["performance", "diversity"]
    record = choice.selector
    assert (record.kind, record.status, record.model) == ("llm", "ok", "selector-model")
    assert record.path == "round_1/selector" and record.attempts == 1 and record.summary
    assert [e.path for e in ctx.steps] == ["round_1/selector", "round_1/survivors"]


async def test_an_invalid_llm_proposal_falls_back_to_the_code_choice_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    choice, _ = await choose(rounds("llm"), FunctionTextBackend(lambda request: "no idea"))
    assert choice.survivors == code_survivors(TABLE, CARDS, SLOTS, label="median")
    record = choice.selector
    assert (record.kind, record.status, record.attempts) == ("llm", "fallback", 2)
    assert record.warning is not None and record.warning.startswith(
        "round 1: the LLM selector's proposal was still invalid after 2 answer(s)"
    )
    assert any("SELECTOR FALLBACK" in m for m in caplog.messages)
