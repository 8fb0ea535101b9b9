"""The ``pairwise`` judging protocol: one call per pair of cards, in both orientations, in a
seeded schedule, each asking which of the two is better (``{"better": "A"}``); the scores
are fitted from the outcomes with Bradley-Terry, and a judge whose winners follow the
position shown is degenerate (the maths: :mod:`image_project.stages.scoring.pairwise`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from image_project.engine.budget import TokenBudget
from image_project.engine.outcome import Answer
from image_project.engine.output import JsonOutput
from image_project.stages.scoring.pairwise import (
    fitted_scores,
    pair_output,
    pair_schedule,
    position_bias,
)
from image_project.stages.scoring.protocols.base import (
    Call,
    JudgingProtocol,
    Labels,
    Verdict,
    degenerate,
)

INSTRUCTION = (
    "You are a judge. You compare two idea cards for one specific viewer: which of the two "
    "deserves the higher score from 0 to 100 {criterion}. Reply with ONLY the JSON object "
    '{{"better": "<card id>"}}: the id of the better card, no other keys, no explanation.'
)


def _calls(order: tuple[str, ...], run_seed: int, labels: Labels) -> tuple[Call, ...]:
    """Every pair both ways, in the seeded order of :func:`pair_schedule` (seed path
    ``"pairwise", *labels``), each call named by its pair."""
    return tuple(Call(pair, pair) for pair in pair_schedule(run_seed, order, *labels))


def _answer_form(shown: tuple[str, ...]) -> str:
    first, second = shown
    return (
        f"Which card is better by the rubric, {first} or {second}? "
        f'Output ONLY {{"better": "{first}"}} or {{"better": "{second}"}}.'
    )


def _won(winner: str) -> Verdict:
    return Verdict("ok", winner=winner)


def _output(shown: tuple[str, ...]) -> JsonOutput[Verdict]:
    return pair_output(*shown).then(_won)


def _budget(shown: tuple[str, ...]) -> TokenBudget:
    """A one-id answer: the judge's base limit, whatever the number of cards."""
    return TokenBudget("judge")


def _combine(
    order: tuple[str, ...], calls: Sequence[Call], answers: Sequence[Answer[Verdict]]
) -> Verdict:
    """The first failed comparison's verdict, else the Bradley-Terry scores through the
    position-bias and degeneracy gates (not re-asked: each comparison was its own call);
    with the outcomes of the comparisons that answered, as shown."""
    verdicts = [a.value for a in answers]
    outcomes = tuple(
        (c.shown[0], c.shown[1], v.winner) for c, v in zip(calls, verdicts, strict=True) if v.winner
    )
    failed = next((v for v in verdicts if v.status != "ok"), None)
    if failed is not None:
        return replace(failed, comparisons=outcomes)
    scores = fitted_scores(order, outcomes)
    gated = degenerate(scores, "across the comparisons; not re-asked", position_bias(outcomes))
    return replace(gated or Verdict("ok", scores), comparisons=outcomes)


PROTOCOL = JudgingProtocol(
    name="pairwise",
    instruction=INSTRUCTION,
    answer_form=_answer_form,
    output=_output,
    budget=_budget,
    calls=_calls,
    combine=_combine,
)
