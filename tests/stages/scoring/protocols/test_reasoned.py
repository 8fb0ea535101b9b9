"""The ``reasoned`` protocol on its own: one call with every card, a bounded rationale
before each score, its own instruction and token rate, the degeneracy gate on each
answer."""

from __future__ import annotations

import json

import pytest

from image_project import markers
from image_project.config.models import RubricSpec
from image_project.errors import ModelOutputError
from image_project.stages.scoring.judges import RATIONALE_MAX_CHARS
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Call, Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from tests.stages.scoring.protocols.support import answered, limit, parsed

REASONED = PROTOCOLS["reasoned"]
SHOWN = ("B", "A", "C")


def good(**scores: int) -> str:
    return json.dumps(
        {"scores": {i: {"rationale": f"why {i}", "score": s} for i, s in scores.items()}}
    )


def test_every_card_goes_in_one_call_without_log_probabilities() -> None:
    assert REASONED.calls(SHOWN, 7, ("strict",)) == (Call(SHOWN),)
    assert REASONED.top_logprobs is None


def test_the_prompt_asks_for_a_bounded_rationale_then_the_score_of_each_card() -> None:
    form = REASONED.answer_form(SHOWN)
    assert form.startswith(f"{markers.SCORE_EVERY}B, A, C), integers 0-100. ")
    assert f"at most {RATIONALE_MAX_CHARS} characters" in form
    assert form.endswith(
        'Output ONLY {"scores": {"B": {"rationale": "...", "score": ...}, '
        '"A": {"rationale": "...", "score": ...}, "C": {"rationale": "...", "score": ...}}}.'
    )


def test_its_instruction_asks_for_rationales_and_keeps_the_rubric() -> None:
    strict = RubricSpec(name="strict")
    system = judge_system_prompt(strict, "reasoned")
    assert system.startswith(REASONED.instruction.format(criterion="by the rubric below"))
    assert "rationale" in system and "no explanation" not in system
    assert system.split("\n\n", 1)[1] == judge_system_prompt(strict, "list").split("\n\n", 1)[1]


def test_the_schema_puts_a_bounded_rationale_before_each_score() -> None:
    schema = REASONED.output(SHOWN).schema
    scores = schema.schema["properties"]["scores"]
    assert schema.name == "idea_scores" and scores["required"] == list(SHOWN)
    card = scores["properties"]["B"]
    assert list(card["properties"]) == ["rationale", "score"] == card["required"]
    assert schema.grammar is not None
    grammar_card = schema.grammar["properties"]["scores"]["properties"]["B"]
    assert grammar_card["properties"]["rationale"]["maxLength"] == RATIONALE_MAX_CHARS


def test_an_answer_is_read_as_scores_and_rationales_in_the_order_shown() -> None:
    verdict = parsed(REASONED, SHOWN, good(A=20, B=70, C=45))
    assert verdict == Verdict(
        "ok", {"B": 70, "A": 20, "C": 45}, rationales={"B": "why B", "A": "why A", "C": "why C"}
    )


@pytest.mark.parametrize(
    "answer",
    [
        {"scores": {"B": 70, "A": 20, "C": 45}},
        {"scores": {i: {"rationale": "ok"} for i in SHOWN}},
        {"scores": {i: {"rationale": "", "score": 50 + n} for n, i in enumerate(SHOWN)}},
        {
            "scores": {
                i: {"rationale": "x" * (RATIONALE_MAX_CHARS + 1), "score": 50 + n}
                for n, i in enumerate(SHOWN)
            }
        },
        {"scores": {i: {"rationale": "ok", "score": 50, "tone": "warm"} for i in SHOWN}},
    ],
)
def test_a_malformed_answer_is_re_asked(answer: object) -> None:
    with pytest.raises(ValueError):
        parsed(REASONED, SHOWN, json.dumps(answer))


def test_rationales_do_not_save_an_answer_without_judgement() -> None:
    with pytest.raises(ModelOutputError) as caught:
        parsed(REASONED, SHOWN, good(A=50, B=50, C=50))
    assert caught.value.reason == "gate:judge_degenerate"


def test_each_card_adds_judge_reasoned_per_card_to_its_limit() -> None:
    assert limit(REASONED, SHOWN) == 100 + 3 * 50
    assert limit(REASONED, SHOWN[:1]) == 100 + 50


def test_the_verdict_is_its_one_answers() -> None:
    ok = parsed(REASONED, SHOWN, good(A=20, B=70, C=45))
    assert REASONED.combine(SHOWN, REASONED.calls(SHOWN, 7, ("j",)), [answered(ok)]) == ok
