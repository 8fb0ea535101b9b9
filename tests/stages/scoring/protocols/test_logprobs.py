"""The ``logprobs`` protocol on its own: asked exactly like ``list`` plus the answer tokens'
log-probabilities, each score weighted by its first digit token's alternatives, the gate on
the weighted scores after the call, and a loud fallback to the sampled ones (the weighting
itself: tests/test_judge_protocols.py)."""

from __future__ import annotations

import json
import math

import pytest

from image_project.config.capabilities import PROTOCOL_NEEDS
from image_project.config.models import RubricSpec
from image_project.errors import ModelOutputError
from image_project.record.events import TokenLogprobs
from image_project.stages.scoring.logprobs import NO_LOGPROBS, TOP_LOGPROBS
from image_project.stages.scoring.protocols import PROTOCOLS
from image_project.stages.scoring.protocols.base import Verdict
from image_project.stages.scoring.rubrics import judge_system_prompt
from tests.stages.scoring.protocols.support import answered, limit, parsed

LOGPROBS = PROTOCOLS["logprobs"]
LIST = PROTOCOLS["list"]
SHOWN = ("B", "A", "C")


def spelled(scores: dict[str, int], tens: dict[str, str] | None = None) -> list[TokenLogprobs]:
    """The answer of ``scores`` as tokens, each score's tens digit a token of its own with
    ``tens[id]`` as an alternative at even odds (no alternative without one)."""
    tokens = [TokenLogprobs(token='{"scores": {', logprob=0.0)]
    for n, (card_id, score) in enumerate(scores.items()):
        digits = str(score)
        tokens.append(TokenLogprobs(token=f'"{card_id}": ', logprob=0.0))
        alternative = (tens or {}).get(card_id)
        top = ((digits[0], math.log(0.5)), (alternative, math.log(0.5))) if alternative else ()
        tokens.append(TokenLogprobs(token=digits[0], logprob=math.log(0.5), top=top))
        tokens.append(
            TokenLogprobs(token=digits[1:] + (", " if n < len(scores) - 1 else ""), logprob=0.0)
        )
    tokens.append(TokenLogprobs(token="}}", logprob=0.0))
    return tokens


def combined(scores: dict[str, int], tokens: list[TokenLogprobs] | None) -> Verdict:
    text = json.dumps({"scores": scores})
    answer = answered(parsed(LOGPROBS, SHOWN, text), text, tokens)
    return LOGPROBS.combine(SHOWN, LOGPROBS.calls(SHOWN, 7, ("j",)), [answer])


def test_it_is_asked_like_list_plus_the_tokens_alternatives() -> None:
    assert LOGPROBS.top_logprobs == TOP_LOGPROBS == 10
    assert LOGPROBS.calls(SHOWN, 7, ("j",)) == LIST.calls(SHOWN, 7, ("j",))
    assert LOGPROBS.answer_form(SHOWN) == LIST.answer_form(SHOWN)
    strict = RubricSpec(name="strict")
    assert judge_system_prompt(strict, "logprobs") == judge_system_prompt(strict, "list")
    assert LOGPROBS.output(SHOWN).schema.schema == LIST.output(SHOWN).schema.schema
    assert limit(LOGPROBS, SHOWN) == limit(LIST, SHOWN) == 100 + 3 * 10


def test_it_needs_log_probabilities_of_its_backend() -> None:
    assert PROTOCOL_NEEDS["logprobs"] == {"logprobs"}


def test_an_all_equal_answer_is_not_gated_before_the_weighting() -> None:
    same = json.dumps({"scores": dict.fromkeys(SHOWN, 80)})
    assert parsed(LOGPROBS, SHOWN, same) == Verdict("ok", dict.fromkeys(SHOWN, 80))
    with pytest.raises(ModelOutputError, match="gate:judge_degenerate"):
        parsed(LIST, SHOWN, same)


@pytest.mark.parametrize(
    "text", ['{"scores": {"A": 80}}', '{"scores": {"A": "80", "B": 1, "C": 2}}', "80, 70"]
)
def test_a_malformed_answer_is_still_re_asked(text: str) -> None:
    with pytest.raises(ValueError):
        parsed(LOGPROBS, SHOWN, text)


def test_the_scores_are_weighted_by_their_digits_alternatives() -> None:
    scores = {"B": 80, "A": 40, "C": 60}
    verdict = combined(scores, spelled(scores, {"B": "9", "A": "2"}))
    # B: 80 or 90 at even odds; A: 40 or 20; C kept its one sampled digit.
    assert verdict == Verdict("ok", {"B": 85, "A": 30, "C": 60})


def test_weighted_scores_tell_apart_cards_that_were_all_sampled_equal() -> None:
    scores = dict.fromkeys(SHOWN, 80)
    verdict = combined(scores, spelled(scores, {"B": "9", "A": "7", "C": "8"}))
    assert verdict.status == "ok" and verdict.scores == {"B": 85, "A": 75, "C": 80}


def test_weighted_scores_without_judgement_are_degenerate() -> None:
    scores = {"B": 80, "A": 60, "C": 70}
    verdict = combined(scores, spelled(scores, {"B": "6", "A": "8"}))
    assert verdict.status == "degenerate" and verdict.scores is None
    assert verdict.error == (
        "gate:judge_degenerate: every card got the same score (the probability-weighted scores)"
    )


def test_without_log_probabilities_the_sampled_scores_stay_with_a_warning() -> None:
    verdict = combined({"B": 80, "A": 40, "C": 60}, None)
    assert verdict == Verdict("ok", {"B": 80, "A": 40, "C": 60}, warning=f"logprobs: {NO_LOGPROBS}")
    same = combined(dict.fromkeys(SHOWN, 80), None)
    assert same.status == "degenerate"
    assert same.error == (
        "gate:judge_degenerate: every card got the same score "
        f"(the sampled scores; logprobs: {NO_LOGPROBS})"
    )


def test_a_failed_answer_passes_through() -> None:
    failed = Verdict("parse_error", None, "bad", "{")
    assert LOGPROBS.combine(SHOWN, LOGPROBS.calls(SHOWN, 7, ("j",)), [answered(failed)]) == failed
