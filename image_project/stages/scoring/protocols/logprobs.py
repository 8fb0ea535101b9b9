"""The ``logprobs`` judging protocol: asked exactly like ``list``, plus the answer tokens'
log-probabilities; each score becomes the expected score over its first digit token's
alternatives (:func:`~image_project.stages.scoring.logprobs.expected_scores`). The weighted
scores are gated instead of the sampled ones, after the call (an all-equal answer whose
digits were uncertain can still tell the cards apart), so a degenerate one is not re-asked;
without usable log-probabilities the sampled scores are gated and kept with a warning."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from image_project.engine.outcome import Answer
from image_project.engine.output import JsonOutput
from image_project.stages.scoring.judges import judge_output
from image_project.stages.scoring.logprobs import TOP_LOGPROBS, expected_scores
from image_project.stages.scoring.protocols import list as listed
from image_project.stages.scoring.protocols.base import Call, Verdict, degenerate, scored


def _output(shown: tuple[str, ...]) -> JsonOutput[Verdict]:
    return judge_output(shown, gate=False).then(scored)


def _combine(
    order: tuple[str, ...], calls: Sequence[Call], answers: Sequence[Answer[Verdict]]
) -> Verdict:
    """The verdict with its scores weighted by their digit tokens' probabilities, through
    the degeneracy gate; or, where the endpoint gave no usable log-probabilities, the
    sampled scores through the gate, with a warning."""
    (answer,) = answers
    verdict = answer.value
    if verdict.scores is None:
        return verdict
    weighted = expected_scores(answer.event.response or "", answer.event.logprobs, verdict.scores)
    if isinstance(weighted, str):
        where = f"the sampled scores; logprobs: {weighted}"
        return degenerate(verdict.scores, where) or dataclasses.replace(
            verdict, warning=f"logprobs: {weighted}"
        )
    gated = degenerate(weighted.scores, "the probability-weighted scores")
    if gated is not None:
        return gated
    warning = None
    if weighted.kept:
        warning = f"logprobs: no usable digit alternatives for {', '.join(weighted.kept)}; sampled"
    return dataclasses.replace(verdict, scores=weighted.scores, warning=warning)


PROTOCOL = dataclasses.replace(
    listed.PROTOCOL,
    name="logprobs",
    output=_output,
    combine=_combine,
    top_logprobs=TOP_LOGPROBS,
)
