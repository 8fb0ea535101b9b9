"""The ``pairwise`` protocol on its own: one call per pair both ways in a seeded schedule,
a one-id answer, Bradley-Terry scores, and the position-bias and degeneracy gates across
the comparisons (the maths: tests/test_judge_protocols.py)."""

from __future__ import annotations

import json

import pytest

from image_project.config.models import RubricSpec
from image_project.stages.scoring.pairwise import fitted_scores
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from tests.stages.scoring.protocols.support import answered, limit, parsed

PAIRWISE = PROTOCOLS["pairwise"]
ORDER = ("C", "A", "B")
RANK = {"A": 0, "B": 1, "C": 2}


def judged(winner_of: dict[tuple[str, ...], str], order: tuple[str, ...] = ORDER) -> Verdict:
    """The verdict of a judge that picks ``winner_of[pair]`` in every comparison."""
    calls = PAIRWISE.calls(order, 7, ("warm",))
    answers = [answered(Verdict("ok", winner=winner_of[c.shown])) for c in calls]
    return PAIRWISE.combine(order, calls, answers)


def test_every_pair_is_asked_both_ways_in_a_seeded_order_each_call_named_by_it() -> None:
    calls = PAIRWISE.calls(ORDER, 7, ("warm",))
    assert len(calls) == 6 and {c.shown for c in calls} == {
        (a, b) for a in ORDER for b in ORDER if a != b
    }
    assert all(c.part == c.shown for c in calls)
    assert calls == PAIRWISE.calls(ORDER, 7, ("warm",))
    others = [PAIRWISE.calls(ORDER, 7, labels) for labels in (("novel",), (1, "warm"))]
    assert all(o != calls for o in [*others, PAIRWISE.calls(ORDER, 8, ("warm",))])
    assert PAIRWISE.top_logprobs is None


def test_a_call_asks_which_of_its_two_cards_is_better() -> None:
    assert PAIRWISE.answer_form(("A", "C")) == (
        'Which card is better by the rubric, A or C? Output ONLY {"better": "A"} or '
        '{"better": "C"}.'
    )
    strict = RubricSpec(name="strict")
    system = judge_system_prompt(strict, "pairwise")
    assert system.startswith(PAIRWISE.instruction.format(criterion="by the rubric below"))
    assert '"better"' in system and system.endswith(judge_system_prompt(strict).split("\n\n")[1])


def test_the_schema_is_one_of_the_two_ids_shown() -> None:
    schema = PAIRWISE.output(("A", "C")).schema
    assert schema.name == "idea_comparison"
    assert schema.schema["properties"]["better"]["enum"] == ["A", "C"]
    assert schema.schema["required"] == ["better"]


def test_an_answer_is_read_as_the_winner() -> None:
    assert parsed(PAIRWISE, ("A", "C"), '{"better": "C"}') == Verdict("ok", winner="C")


@pytest.mark.parametrize(
    "text", ['{"better": "B"}', '{"better": "A", "why": "x"}', '{"winner": "A"}', "A is better"]
)
def test_a_malformed_answer_is_re_asked(text: str) -> None:
    with pytest.raises(ValueError):
        parsed(PAIRWISE, ("A", "C"), text)


def test_a_call_answers_one_id_so_its_limit_is_the_judges_base() -> None:
    assert limit(PAIRWISE, ("A", "C")) == 100


def test_consistent_comparisons_are_fitted_and_recorded_as_shown() -> None:
    verdict = judged({pair: min(pair, key=RANK.__getitem__) for pair in _pairs()})
    assert verdict.status == "ok" and verdict.scores is not None
    assert verdict.scores["A"] > verdict.scores["B"] > verdict.scores["C"]
    assert list(verdict.scores) == list(ORDER)
    calls = PAIRWISE.calls(ORDER, 7, ("warm",))
    assert verdict.comparisons == tuple(
        (c.shown[0], c.shown[1], min(c.shown, key=RANK.__getitem__)) for c in calls
    )
    assert verdict.scores == fitted_scores(ORDER, verdict.comparisons)


def test_comparisons_that_follow_the_position_are_degenerate_without_a_re_ask() -> None:
    verdict = judged({pair: pair[0] for pair in _pairs()})
    assert verdict.status == "degenerate" and verdict.scores is None
    assert verdict.error == (
        "gate:judge_degenerate: every comparison chose the card shown first "
        "(across the comparisons; not re-asked)"
    )
    assert verdict.comparisons is not None and len(verdict.comparisons) == 6


def test_a_cycle_ties_every_card_which_is_degenerate() -> None:
    beats = {("A", "B"), ("B", "C"), ("C", "A")}
    verdict = judged({p: p[0] if p in beats else p[1] for p in _pairs()})
    assert verdict.status == "degenerate"
    assert "every card got the same score" in (verdict.error or "")


def test_a_failed_comparison_fails_the_judge_keeping_the_answered_ones() -> None:
    calls = PAIRWISE.calls(ORDER, 7, ("warm",))
    error = Verdict("error", None, "timed out")
    answers = [answered(Verdict("ok", winner=calls[0].shown[0])), answered(error)]
    answers += [answered(Verdict("ok", winner=c.shown[1])) for c in calls[2:]]
    verdict = PAIRWISE.combine(ORDER, calls, answers)
    assert (verdict.status, verdict.error, verdict.scores) == ("error", "timed out", None)
    assert verdict.comparisons is not None and len(verdict.comparisons) == 5
    assert verdict.comparisons[0] == (*calls[0].shown, calls[0].shown[0])


def _pairs() -> list[tuple[str, str]]:
    return [(a, b) for a in ORDER for b in ORDER if a != b]


def test_an_answer_names_a_card_not_the_scores() -> None:
    verdict = parsed(PAIRWISE, ("A", "C"), json.dumps({"better": "A"}))
    assert verdict.scores is None and verdict.winner == "A"
