"""The ``pointwise`` protocol on its own: one call per card, each asked like ``list``, and
the degeneracy gate across every card's answer (not re-asked: each card was its own call)."""

from __future__ import annotations

import json

from image_project.config.models import RubricSpec
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Call, Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from tests.stages.scoring.protocols.support import answered, limit, parsed

POINTWISE = PROTOCOLS["pointwise"]
LIST = PROTOCOLS["list"]
SHOWN = ("C", "A", "B")


def combine(scores: dict[str, int]) -> Verdict:
    calls = POINTWISE.calls(tuple(scores), 7, ("warm",))
    return POINTWISE.combine(
        tuple(scores), calls, [answered(Verdict("ok", {i: s})) for i, s in scores.items()]
    )


def test_each_card_is_its_own_call_named_by_the_card_in_the_judges_order() -> None:
    assert POINTWISE.calls(SHOWN, 7, ("warm",)) == tuple(Call((i,), (i,)) for i in SHOWN)
    assert POINTWISE.top_logprobs is None


def test_a_call_is_asked_and_read_as_a_list_call_of_one_card() -> None:
    assert POINTWISE.answer_form(("A",)) == LIST.answer_form(("A",))
    strict = RubricSpec(name="strict")
    assert judge_system_prompt(strict, "pointwise") == judge_system_prompt(strict, "list")
    schema = POINTWISE.output(("A",)).schema.schema
    assert schema == LIST.output(("A",)).schema.schema
    assert schema["properties"]["scores"]["required"] == ["A"]
    assert parsed(POINTWISE, ("A",), json.dumps({"scores": {"A": 50}})) == Verdict("ok", {"A": 50})


def test_a_call_shows_one_card_and_its_limit_is_one_cards() -> None:
    assert limit(POINTWISE, ("A",)) == 100 + 10


def test_the_scores_are_the_cards_own_answers_in_the_judges_order() -> None:
    assert combine({"C": 80, "A": 20, "B": 55}) == Verdict("ok", {"C": 80, "A": 20, "B": 55})


def test_equal_scores_across_the_cards_are_degenerate_without_a_re_ask() -> None:
    verdict = combine({"C": 50, "A": 50, "B": 50})
    assert verdict.status == "degenerate" and verdict.scores is None
    assert verdict.error == (
        "gate:judge_degenerate: every card got the same score "
        "(across the per-card answers; not re-asked)"
    )
    assert verdict.output_preview == json.dumps({"C": 50, "A": 50, "B": 50})
    assert combine({"C": 50, "A": 50}).status == "ok"  # two cards may honestly tie


def test_the_first_failed_card_fails_the_judge() -> None:
    calls = POINTWISE.calls(SHOWN, 7, ("warm",))
    refused = Verdict("refused", None, "refused: no", "I'm sorry")
    invalid = Verdict("parse_error", None, "bad", "{")
    answers = [answered(Verdict("ok", {"C": 80})), answered(refused), answered(invalid)]
    assert POINTWISE.combine(SHOWN, calls, answers) == refused
