"""The ``list`` judging protocol, the default (``judge_protocol``): every card in one call,
one bare 0-100 score each (``{"scores": {"A": 80, "B": 35}}``), the answer re-asked when its
scores carry no judgement (:func:`~image_project.stages.scoring.judges.degeneracy`)."""

from __future__ import annotations

from image_project.engine.budget import TokenBudget
from image_project.engine.output import JsonOutput
from image_project.stages.scoring.judges import judge_output
from image_project.stages.scoring.protocols.base import (
    JudgingProtocol,
    Verdict,
    scored,
    scores_form,
)

INSTRUCTION = (
    "You are a judge. You score idea cards for one specific viewer, numbers only: for each "
    "card an integer from 0 to 100 {criterion}. Reply with ONLY the JSON object "
    '{{"scores": {{"<card id>": <0-100>, ...}}}}: every card id exactly '
    "once, no other keys, no explanation."
)
"""The judging instruction of a judge that writes bare scores."""


def _output(shown: tuple[str, ...]) -> JsonOutput[Verdict]:
    return judge_output(shown).then(scored)


def _budget(shown: tuple[str, ...]) -> TokenBudget:
    return TokenBudget("judge", items=len(shown))


PROTOCOL = JudgingProtocol(
    name="list",
    instruction=INSTRUCTION,
    answer_form=scores_form,
    output=_output,
    budget=_budget,
)
