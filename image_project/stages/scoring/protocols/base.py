"""The interface of a judging protocol (:class:`JudgingProtocol`) and what its steps hand
back (:class:`Verdict`).

A protocol is one value: how a judge is asked (the calls it makes for the cards of a round,
the closing instruction of each prompt and the system prompt's judging instruction, the
token log-probabilities it asks for), what each answer must look like (its schema and the
gates an answer is re-asked for), each call's token limit, and how the answers of all its
calls become the judge's one verdict (the gates that need all of them). The panel
(:mod:`..panel`) runs any protocol the same way; what differs between two protocols is in
their two values, each in its own module of this package and named in the registry
(:data:`~image_project.stages.scoring.protocols.PROTOCOLS`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from image_project import markers
from image_project.engine.budget import TokenBudget
from image_project.engine.outcome import Answer
from image_project.engine.output import JsonOutput
from image_project.errors import preview
from image_project.record.scoring import JudgeStatus
from image_project.stages.scoring.judges import degeneracy

Labels = tuple[str | int, ...]
"""A judge's seed labels in a round: its id (round 0), or the round and its id."""


@dataclass(frozen=True)
class Verdict:
    """What a judge's step hands back, and what its protocol makes of all of them: ``ok``
    with its scores (by id, in its order), or the status it failed with, the error and a
    preview of its last answer; what the judge's record keeps besides (a ``reasoned``
    judge's ``rationales``, a ``pairwise`` comparison's ``winner`` and a pairwise judge's
    ``comparisons``, a ``logprobs`` judge's fallback ``warning``)."""

    status: JudgeStatus
    scores: dict[str, int] | None = None
    error: str | None = None
    output_preview: str | None = None
    rationales: dict[str, str] | None = None
    winner: str | None = None
    warning: str | None = None
    comparisons: tuple[tuple[str, str, str], ...] | None = None


@dataclass(frozen=True)
class Call:
    """One request of a judge: the cards it shows, in the order shown, and the part that
    names its step and adds to its seed (none for a protocol's only call)."""

    shown: tuple[str, ...]
    part: tuple[str, ...] = ()


Combine = Callable[[tuple[str, ...], Sequence[Call], Sequence[Answer[Verdict]]], Verdict]
"""How a judge's answers (one per call, in the calls' order) become its verdict, given the
order it was shown the cards in."""


def one_call(order: tuple[str, ...], run_seed: int, labels: Labels) -> tuple[Call, ...]:
    """Every card in one call, in the judge's order."""
    return (Call(order),)


def first_answer(
    order: tuple[str, ...], calls: Sequence[Call], answers: Sequence[Answer[Verdict]]
) -> Verdict:
    """The verdict of a protocol's only call, as its step handed it back."""
    return answers[0].value


def scored(scores: dict[str, int]) -> Verdict:
    """An ``ok`` verdict with ``scores``."""
    return Verdict("ok", scores)


def score_every(order: Sequence[str]) -> str:
    """The start of the closing instruction of a prompt that asks for a 0-100 score of
    every card it shows."""
    return f"{markers.SCORE_EVERY}{', '.join(order)}), integers 0-100. "


def scores_form(order: Sequence[str]) -> str:
    """The closing instruction of a prompt that asks for one bare 0-100 score per card:
    ``... Output ONLY {"scores": {"A": ..., "B": ...}}.``"""
    keys = ", ".join(f'"{i}": ...' for i in order)
    return score_every(order) + "Output ONLY " + '{"scores": {' + keys + "}}."


def degenerate(scores: dict[str, int], where: str, why: str | None = None) -> Verdict | None:
    """The ``degenerate`` verdict of a judge whose ``scores`` carry no judgement: ``why``,
    else what :func:`~image_project.stages.scoring.judges.degeneracy` finds in them;
    ``where`` says which scores were read (and why they are not re-asked). None when they
    may be a judgement."""
    why = why or degeneracy(list(scores.values()))
    if why is None:
        return None
    error = f"gate:judge_degenerate: {why} ({where})"
    return Verdict("degenerate", None, error, preview(json.dumps(scores), 300))


@dataclass(frozen=True)
class JudgingProtocol:
    """How a judge is asked and read (see the module docstring).

    ``name``: the value of ``judges[i].protocol`` / ``judge_protocol`` that picks it.
    ``instruction``: the system prompt's judging instruction, with ``{criterion}`` where the
    rubric's criterion goes (:func:`~image_project.stages.scoring.rubrics.judge_system_prompt`).
    ``calls``: the requests for the cards in the judge's order, given the run's seed and
    the judge's labels (for a seeded schedule). ``answer_form``: the closing instruction of a
    call's prompt, for the cards it shows. ``output``: a call's answer schema and reading,
    with the gates an answer is re-asked for. ``budget``: a call's output-token limit.
    ``combine``: the judge's verdict from every call's answer, with the gates across them
    (never re-asked: each call was its own). ``top_logprobs``: the alternatives per answer
    token each call asks for (None: no log-probabilities; a protocol that asks needs them of
    its backend, ``config.capabilities.PROTOCOL_NEEDS``).
    """

    name: str
    instruction: str
    answer_form: Callable[[tuple[str, ...]], str]
    output: Callable[[tuple[str, ...]], JsonOutput[Verdict]]
    budget: Callable[[tuple[str, ...]], TokenBudget]
    calls: Callable[[tuple[str, ...], int, Labels], tuple[Call, ...]] = one_call
    combine: Combine = first_answer
    top_logprobs: int | None = None
