"""The ``reasoned`` judging protocol: every card in one call, a short rationale before each
score (``{"scores": {"A": {"rationale": "...", "score": 80}, ...}}``, each rationale at most
:data:`~image_project.stages.scoring.judges.RATIONALE_MAX_CHARS` characters and written
first, so a model that follows the schema's order reads the card before it scores it). The
rationales are recorded and sent to no later request; each card's rationale adds
``judge_reasoned_per_card`` to the call's token limit."""

from __future__ import annotations

from image_project.engine.budget import TokenBudget
from image_project.engine.output import JsonOutput
from image_project.stages.scoring.judges import (
    RATIONALE_MAX_CHARS,
    ReasonedScores,
    reasoned_output,
)
from image_project.stages.scoring.protocols.base import JudgingProtocol, Verdict, score_every

INSTRUCTION = (
    "You are a judge. You score idea cards for one specific viewer: for each card first a "
    "brief rationale (one or two sentences on what the card does well or badly), then an "
    "integer score from 0 to 100 {criterion}. Reply with ONLY the JSON object "
    '{{"scores": {{"<card id>": {{"rationale": "...", "score": <0-100>}}, ...}}}}: every '
    "card id exactly once, no other keys."
)


def _answer_form(order: tuple[str, ...]) -> str:
    """Per card, first what the card does well or badly against the rubric, then the
    score."""
    keys = ", ".join(f'"{i}": {{"rationale": "...", "score": ...}}' for i in order)
    return score_every(order) + (
        f"For each card first write a rationale (one or two sentences, at most "
        f"{RATIONALE_MAX_CHARS} characters: what it does well or badly against the rubric), "
        f'then its score. Output ONLY {{"scores": {{{keys}}}}}.'
    )


def _reasoned(answer: ReasonedScores) -> Verdict:
    return Verdict("ok", answer.scores, rationales=answer.rationales)


def _output(shown: tuple[str, ...]) -> JsonOutput[Verdict]:
    return reasoned_output(shown).then(_reasoned)


def _budget(shown: tuple[str, ...]) -> TokenBudget:
    return TokenBudget("judge", items=len(shown), per_item="judge_reasoned_per_card")


PROTOCOL = JudgingProtocol(
    name="reasoned",
    instruction=INSTRUCTION,
    answer_form=_answer_form,
    output=_output,
    budget=_budget,
)
