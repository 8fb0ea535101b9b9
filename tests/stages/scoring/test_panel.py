"""The judge panel as a unit (:mod:`image_project.stages.scoring.panel`): each judge's own
seeded order, the steps its protocol makes (names, seeds, prompts, limits, meta), the
record of its answers, a round's judges run in one block, and the score table's quorum,
aggregate and novelty penalty. Whole runs: tests/test_scoring_run.py."""

from __future__ import annotations

import pytest

from image_project.backends.base import TextRequest
from image_project.config.models import EffectiveJudge, RubricSpec, ScoringConfig
from image_project.engine.budget import TokenBudget
from image_project.engine.context import Context
from image_project.engine.output import JsonOutput
from image_project.engine.runner import ChatRunner
from image_project.errors import ModelOutputError
from image_project.record.scoring import JudgeResult
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.cards import card_text
from image_project.stages.scoring.novelty import novelty_penalty, recent_motifs
from image_project.stages.scoring.panel import Panel, judge_orders, score_table
from image_project.stages.scoring.prompts import judge_prompt
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.testing import FunctionTextBackend
from tests.stages.scoring.protocols.support import answered
from tests.stages.scoring.support import BRIEF, CARDS, SCORES, SEED, judge_answer

pytestmark = pytest.mark.anyio

STRICT = EffectiveJudge("strict", "m", 0.0, RubricSpec(name="strict"))
WARM = EffectiveJudge("warm", "m", 0.0, RubricSpec(name="profile_fit"), protocol="pointwise")
PAIR = EffectiveJudge("pair", "m2", 0.2, protocol="pairwise", backend="local")
WEIGHED = EffectiveJudge("weighed", "m", 0.0, protocol="logprobs")
THINKS = EffectiveJudge("thinks", "m", 0.0, protocol="reasoned", profile="dislikes_only")
IDS = ("A", "B", "C")


def panel(*judges: EffectiveJudge) -> Panel:
    return Panel(judges, BRIEF, None, None, SEED, max_reasks=1)


def test_each_judge_sees_the_cards_in_its_own_seeded_order_per_round() -> None:
    orders = judge_orders(SEED, (STRICT, WARM), IDS, 0)
    for judge in (STRICT, WARM):
        expected = list(IDS)
        rng_for(SEED, "judge_order", judge.id).shuffle(expected)
        assert orders[judge.id] == tuple(expected)
    later = judge_orders(SEED, (STRICT,), IDS, 2)["strict"]
    expected = list(IDS)
    rng_for(SEED, "judge_order", 2, "strict").shuffle(expected)
    assert later == tuple(expected) and sorted(later) == list(IDS)
    assert judge_orders(SEED, (STRICT,), IDS, 0) == judge_orders(SEED, (STRICT,), IDS, 0)


def test_a_list_judges_one_step_is_its_protocols_request() -> None:
    order = ("C", "A", "B")
    (step,) = panel(STRICT).steps(STRICT, order, CARDS, 0)
    assert step.name == "strict" and step.seed == derive_seed(SEED, "step", "judge", "strict")
    assert step.prompt == judge_prompt(order, CARDS, BRIEF, None, "raw", None)
    assert step.system_prompt == judge_system_prompt(STRICT.rubric, "list")
    assert step.max_output_tokens == TokenBudget("judge", items=3) and step.top_logprobs is None
    assert isinstance(step.output, JsonOutput)
    assert step.output.schema == PROTOCOLS["list"].output(order).schema
    assert (step.stateless, step.merge, step.allow_empty_response) == (True, "none", True)
    assert step.meta == {
        "role": "judge",
        "judge_id": "strict",
        "order": ["C", "A", "B"],
        "rubric": "strict",
        "profile": "raw",
    }


def test_a_later_rounds_step_has_the_round_in_its_seed_and_meta() -> None:
    (step,) = panel(STRICT).steps(STRICT, IDS, CARDS, 2)
    assert step.seed == derive_seed(SEED, "step", "judge", 2, "strict")
    assert step.meta["round"] == 2 and "protocol" not in step.meta


def test_each_call_of_a_protocol_is_a_step_named_and_seeded_by_its_part() -> None:
    order = ("C", "A", "B")
    steps = panel(WARM).steps(WARM, order, CARDS, 1)
    assert [s.name for s in steps] == ["warm.C", "warm.A", "warm.B"]
    assert [s.seed for s in steps] == [
        derive_seed(SEED, "step", "judge", 1, "warm", i) for i in order
    ]
    assert [s.meta["order"] for s in steps] == [["C"], ["A"], ["B"]]
    assert all(s.meta["protocol"] == "pointwise" and s.meta["round"] == 1 for s in steps)
    pairs = panel(PAIR).steps(PAIR, order, CARDS, 0)
    calls = PROTOCOLS["pairwise"].calls(order, SEED, ("pair",))
    assert [s.name for s in pairs] == [f"pair.{a}-{b}" for a, b in (c.shown for c in calls)]
    assert {(s.model, s.backend, s.temperature) for s in pairs} == {("m2", "local", 0.2)}
    assert all(s.max_output_tokens == TokenBudget("judge") for s in pairs)
    (weighed,) = panel(WEIGHED).steps(WEIGHED, order, CARDS, 0)
    assert weighed.top_logprobs == 10 and weighed.meta["protocol"] == "logprobs"
    (thinks,) = panel(THINKS).steps(THINKS, order, CARDS, 0)
    assert thinks.system_prompt == judge_system_prompt(THINKS.rubric, "reasoned")
    assert thinks.prompt == judge_prompt(
        order, CARDS, BRIEF, None, "dislikes_only", None, protocol="reasoned"
    )


def test_a_judges_record_is_what_its_protocol_makes_of_all_its_answers() -> None:
    order = ("C", "A", "B")
    answers = [
        answered(Verdict("ok", {c: SCORES[c]}), answers=n + 1, path=f"p/warm.{c}")
        for n, c in enumerate(order)
    ]
    result = panel(WARM).result(WARM, order, answers, 0)
    assert result == JudgeResult(
        id="warm",
        model="m",
        temperature=0.0,
        rubric="profile_fit",
        profile="raw",
        weight=1.0,
        status="ok",
        attempts=1 + 2 + 3,
        order=order,
        path="p/warm.C",
        scores={"C": 60, "A": 80, "B": 35},
        protocol="pointwise",
    )
    calls = PROTOCOLS["pairwise"].calls(order, SEED, ("pair",))
    wins = [answered(Verdict("ok", winner=max(c.shown, key=SCORES.__getitem__))) for c in calls]
    pair = panel(PAIR).result(PAIR, order, wins, 0)
    assert pair.status == "ok" and pair.protocol == "pairwise" and pair.attempts == 6
    assert pair.comparisons == tuple(
        (*c.shown, max(c.shown, key=SCORES.__getitem__)) for c in calls
    )
    assert pair.scores is not None and pair.scores["A"] > pair.scores["C"] > pair.scores["B"]


async def test_a_rounds_judges_run_in_one_block_each_result_handed_on_as_it_arrives() -> None:
    def answer(request: TextRequest) -> str:
        if request.seed == derive_seed(SEED, "step", "judge", "strict"):
            return "I'm sorry, but I can't help with that."
        return judge_answer(request)

    seen: list[str] = []
    ctx = Context()
    judges = panel(STRICT, WARM, PAIR, WEIGHED, THINKS)
    runner = ChatRunner(FunctionTextBackend(answer))
    async with runner.root(ctx).scope("root", merge="all_messages") as root:
        results = await judges.judge(root, IDS, CARDS, 0, lambda r: seen.append(r.id))
    assert [r.id for r in results] == ["strict", "warm", "pair", "weighed", "thinks"]
    assert sorted(seen) == sorted(r.id for r in results)
    statuses = {r.id: r.status for r in results}
    assert statuses == {
        "strict": "refused",
        "warm": "ok",
        "pair": "ok",
        "weighed": "ok",
        "thinks": "ok",
    }
    assert all(e.path.startswith("root/judges/") for e in ctx.steps)
    assert len(ctx.steps) == 1 + 3 + 6 + 1 + 1
    by_id = {r.id: r for r in results}
    assert by_id["warm"].scores == {c: SCORES[c] for c in by_id["warm"].order}
    assert by_id["thinks"].rationales == {c: f"about {c}" for c in by_id["thinks"].order}
    assert by_id["weighed"].warning is not None  # the fake gave no log-probabilities


def _result(judge_id: str, scores: dict[str, int] | None, status: str = "ok") -> JudgeResult:
    return JudgeResult.model_validate(
        {
            "id": judge_id,
            "model": "m",
            "temperature": 0.0,
            "status": status,
            "attempts": 1,
            "order": list(IDS),
            "path": f"root/judges/{judge_id}",
            "scores": scores,
            "error": None if status == "ok" else "gate:judge_degenerate: all equal",
        }
    )


def test_the_score_table_aggregates_only_the_judges_that_answered_well() -> None:
    scoring = ScoringConfig(aggregation="median", normalise="none")
    results = [
        _result("a", {"A": 80, "B": 30, "C": 50}),
        _result("b", {"A": 70, "B": 40, "C": 90}),
        _result("c", None, "degenerate"),
    ]
    table = score_table(IDS, results, CARDS, scoring, None)
    assert [r.id for r in table] == list(IDS)
    assert [(r.judge_scores, r.aggregate, r.n_ok) for r in table] == [
        ({"a": 80, "b": 70}, 75, 2),
        ({"a": 30, "b": 40}, 35, 2),
        ({"a": 50, "b": 90}, 70, 2),
    ]
    assert all(r.novelty_penalty == 0 and r.effective_score == r.aggregate for r in table)


def test_below_the_quorum_the_table_fails_naming_every_judge() -> None:
    scoring = ScoringConfig.model_validate(
        {"judges": [{"id": "a"}, {"id": "c"}], "min_ok_judges": 2, "normalise": "none"}
    )
    results = [_result("a", {"A": 80, "B": 30, "C": 50}), _result("c", None, "degenerate")]
    with pytest.raises(ModelOutputError) as caught:
        score_table(IDS, results, CARDS, scoring, None)
    assert caught.value.reason == "invalid_judge_output"
    assert "only 1 of 2 judge(s)" in str(caught.value) and "c=degenerate" in str(caught.value)


def test_the_novelty_penalty_comes_off_each_cards_aggregate() -> None:
    history = recent_motifs(["a storm kettle on a rail", "lightning and a kettle", "kettle, sky"])
    scoring = ScoringConfig(normalise="none")
    table = score_table(IDS, [_result("a", {"A": 80, "B": 30, "C": 50})], CARDS, scoring, history)
    penalties = {
        i: novelty_penalty(
            card_text(CARDS[i]),
            history,
            scoring.novelty.penalty_per_share,
            scoring.novelty.max_penalty,
        )[0]
        for i in IDS
    }
    assert penalties["B"] > 0
    assert {r.id: r.novelty_penalty for r in table} == pytest.approx(penalties)
    assert all(
        r.effective_score == pytest.approx(max(0.0, float(r.aggregate) - r.novelty_penalty))
        for r in table
    )
