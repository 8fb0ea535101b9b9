"""The ``pointwise`` judging protocol: one call per card, asked like ``list`` (the card's
one score); the scores are gated across all the calls, so a judge that gives every card the
same score is degenerate though no single answer could tell."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from image_project.engine.outcome import Answer
from image_project.stages.scoring.protocols import list as listed
from image_project.stages.scoring.protocols.base import Call, Labels, Verdict, degenerate


def _calls(order: tuple[str, ...], run_seed: int, labels: Labels) -> tuple[Call, ...]:
    """One call per card, in the judge's order, each named by its card."""
    return tuple(Call((card_id,), (card_id,)) for card_id in order)


def _combine(
    order: tuple[str, ...], calls: Sequence[Call], answers: Sequence[Answer[Verdict]]
) -> Verdict:
    """The first failed card's verdict, else the scores through the degeneracy gate across
    every card (not re-asked: each card was its own call)."""
    verdicts = [a.value for a in answers]
    failed = next((v for v in verdicts if v.status != "ok"), None)
    if failed is not None:
        return failed
    scores = {
        call.shown[0]: (v.scores or {})[call.shown[0]]
        for call, v in zip(calls, verdicts, strict=True)
    }
    return degenerate(scores, "across the per-card answers; not re-asked") or Verdict("ok", scores)


PROTOCOL = dataclasses.replace(listed.PROTOCOL, name="pointwise", calls=_calls, combine=_combine)
