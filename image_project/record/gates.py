"""Quality gates: the code checks that reject a schema-valid answer that is still nonsense,
and how their outcomes are written in (and counted from) a transcript.

A gate that rejects an answer raises :func:`gate_error`, a
:class:`~image_project.errors.ModelOutputError` whose ``reason`` is ``gate:<name>``, so its
message starts with ``gate:<name>: ``. Every outcome is therefore written the same way:

* a re-ask: the step's ``reasks[].error`` starts with ``gate:<name>: `` (the reason the
  model was told);
* a step that stayed invalid and is recoverable (a judge, the LLM selector, a variant):
  the step's ``error.reason`` is ``gate:<name>``, and its record says what happened (a
  judge's status ``degenerate``, the selector's ``fallback``, a variant's ``invalid``);
* a step that stayed invalid and fails the run (the dislike rewrite, an idea card, the
  hints): the run's ``error.reason`` is ``gate:<name>``.

:func:`gate_counts` reads those three places back. The gates (:data:`GATES`):

``rewrite_dislike``   a rewritten concept contains a dislike phrase
``rewrite_meaning``   a rewritten concept shares no content word with its original
``card_field``        a card string that is empty, punctuation, a schema field name or a
                      placeholder word
``card_degenerate``   a card string ended by its length limit, a long string made of few
                      distinct words, an option equal to the hook, or the same option in
                      several slots
``hints_avoid``       a hints ``avoid`` item made only of the hints' own adjectives
``judge_degenerate``  a judge's scores follow its presentation order, are all equal, or
                      span a degenerate range
``selector_reason``   an LLM selector's reason that mentions nothing of its card
``prose_loop``        a prose answer (a stage draft, a critic, the final prompt) caught in a
                      repetition loop ("the composition of the composition of ...")
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, get_args

from image_project.errors import ModelOutputError
from image_project.record.events import ChatEvent
from image_project.record.run import RunRecord

GateName = Literal[
    "rewrite_dislike",
    "rewrite_meaning",
    "card_field",
    "card_degenerate",
    "hints_avoid",
    "judge_degenerate",
    "selector_reason",
    "prose_loop",
]
GATES: tuple[GateName, ...] = get_args(GateName)
GATE_PREFIX = "gate:"
_GATE_RE = re.compile(r"^gate:([a-z_]+)(?::|$)")


def gate_error(name: GateName, message: str, *, output: object = "") -> ModelOutputError:
    """The rejection of gate ``name``: re-asked like any invalid answer, its message starting
    ``gate:<name>: `` (see the module docstring)."""
    return ModelOutputError(f"{GATE_PREFIX}{name}", message, output=output)


def _gate_of(text: str | None) -> str | None:
    match = _GATE_RE.match(text or "")
    return match[1] if match else None


@dataclass
class GateCount:
    """One gate's outcomes in a run: ``rejected`` answers it turned down (each re-asked, or
    the last one of a step that then failed), ``failed`` steps that stayed invalid after their
    re-asks (recoverable ones included), ``paths`` of those steps."""

    rejected: int = 0
    failed: int = 0
    paths: list[str] = field(default_factory=list)


def gate_counts(record: RunRecord) -> dict[str, GateCount]:
    """Every gate of :data:`GATES` (and any other ``gate:`` reason found) with its counts in
    ``record``: rejected answers from the chat steps' ``reasks``, failed steps from their
    ``error.reason`` and from the run's ``error.reason``."""
    counts: dict[str, GateCount] = {name: GateCount() for name in GATES}

    def count(name: str) -> GateCount:
        return counts.setdefault(name, GateCount())

    steps: Iterable[ChatEvent] = record.chat_steps
    for step in steps:
        for reask in step.reasks:
            name = _gate_of(reask.error)
            if name is not None:
                count(name).rejected += 1
        failed = _gate_of(step.error.reason if step.error else None)
        if failed is not None:
            count(failed).failed += 1
            count(failed).paths.append(step.path)
    error = record.error
    failed = _gate_of(error.reason if error else None)
    if error is not None and failed is not None:
        count(failed).failed += 1
        count(failed).paths.append(error.path or error.phase)
    return counts
