"""The ``list`` protocol on its own: one call with every card, bare 0-100 scores, the
degeneracy gate on each answer (re-asked), the default judging instruction."""

from __future__ import annotations

import json

import pytest

from image_project import markers
from image_project.config.models import RubricSpec
from image_project.errors import ModelOutputError, RefusalError
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Call, Verdict
from image_project.stages.scoring.rubrics import DEFAULT_CRITERION, judge_system_prompt
from tests.stages.scoring.protocols.support import answered, limit, parsed

LIST = PROTOCOLS["list"]
SHOWN = ("C", "A", "B")


def test_every_card_goes_in_one_call_in_the_judges_order() -> None:
    assert LIST.calls(SHOWN, 7, ("warm",)) == (Call(SHOWN),)
    assert LIST.top_logprobs is None


def test_the_prompt_asks_for_one_bare_score_per_card_in_the_order_shown() -> None:
    form = LIST.answer_form(SHOWN)
    assert form.startswith(f"{markers.SCORE_EVERY}C, A, B), integers 0-100. ")
    assert form.endswith('Output ONLY {"scores": {"C": ..., "A": ..., "B": ...}}.')


def test_its_instruction_with_the_default_rubric_is_the_plain_judge_prompt() -> None:
    system = judge_system_prompt(RubricSpec(name="default"), "list")
    assert system == LIST.instruction.format(criterion=DEFAULT_CRITERION)
    assert "no explanation" in system and "rationale" not in system


def test_the_schema_requires_every_shown_id_once_as_an_integer_0_to_100() -> None:
    schema = LIST.output(SHOWN).schema
    assert schema.name == "idea_scores"
    scores = schema.schema["properties"]["scores"]
    assert scores["required"] == list(SHOWN) and scores["additionalProperties"] is False
    assert {k: v["type"] for k, v in scores["properties"].items()} == dict.fromkeys(
        SHOWN, "integer"
    )
    assert (scores["properties"]["A"]["minimum"], scores["properties"]["A"]["maximum"]) == (0, 100)


def test_an_answer_is_read_as_scores_in_the_order_shown() -> None:
    verdict = parsed(LIST, SHOWN, json.dumps({"scores": {"A": 20, "B": 55, "C": 80}}))
    assert verdict == Verdict("ok", {"C": 80, "A": 20, "B": 55})
    assert list(verdict.scores or {}) == list(SHOWN)
    listed = {
        "scores": [{"id": "B", "score": 55}, {"id": "C", "score": 80}, {"id": "A", "score": 2}]
    }
    assert parsed(LIST, SHOWN, json.dumps(listed)).scores == {"C": 80, "A": 2, "B": 55}


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ({"scores": {"A": 20, "C": 80}}, "no score for id(s) ['B']"),
        ({"scores": {"A": 20, "B": 55, "C": 80, "D": 1}}, "not card ids"),
        ({"scores": {"A": 20.5, "B": 55, "C": 80}}, "must be an integer"),
        ({"scores": {"A": 120, "B": 55, "C": 80}}, "out of range"),
        ({"scores": {"A": 20, "B": 55, "C": 80}, "why": "x"}, "unexpected top-level key"),
        ({"scores": "A is best"}, "'scores' must be an object"),
    ],
)
def test_a_malformed_answer_is_re_asked_naming_the_problem(answer: object, says: str) -> None:
    with pytest.raises(ValueError) as caught:
        parsed(LIST, SHOWN, json.dumps(answer))
    assert says in str(caught.value)


def test_prose_is_malformed_and_a_refusal_is_a_refusal() -> None:
    with pytest.raises(ValueError):
        parsed(LIST, SHOWN, 'Sure! {"scores": {"A": 1, "B": 2, "C": 3}} hope that helps')
    with pytest.raises(RefusalError):
        parsed(LIST, SHOWN, "I'm sorry, but I can't help with rating these.")


@pytest.mark.parametrize("scores", [[50, 50, 50], [0, 1, 2], [3, 1, 2]])
def test_an_answer_without_judgement_is_re_asked_at_the_gate(scores: list[int]) -> None:
    with pytest.raises(ModelOutputError) as caught:
        parsed(LIST, SHOWN, json.dumps({"scores": dict(zip(SHOWN, scores, strict=True))}))
    assert caught.value.reason == "gate:judge_degenerate"


def test_its_limit_grows_by_judge_per_card_with_the_cards_shown() -> None:
    assert limit(LIST, SHOWN) == 100 + 3 * 10
    assert limit(LIST, SHOWN[:2]) == 100 + 2 * 10


def test_the_verdict_is_its_one_answers_including_a_failed_one() -> None:
    ok = Verdict("ok", {"C": 80, "A": 20, "B": 55})
    assert LIST.combine(SHOWN, LIST.calls(SHOWN, 7, ("j",)), [answered(ok)]) == ok
    failed = Verdict("refused", None, "refused", "I'm sorry")
    assert LIST.combine(SHOWN, LIST.calls(SHOWN, 7, ("j",)), [answered(failed)]) == failed
