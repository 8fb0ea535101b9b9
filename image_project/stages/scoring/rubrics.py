"""Judge rubrics: what each judge of the panel scores by, and the system prompt it gets.

A judge's system prompt is the judging instruction (numbers only, the JSON shape) with the
judge's rubric in it. The built-in rubrics:

``default``        the original judging instruction: one 0-100 score for how well a card
                   blends the concepts, suits the viewer's taste and stays fresh. A judge
                   without a ``rubric`` uses it, so its request is exactly the first wave's.
``strict``         a harsh craft critic: start at 70, reward the concepts and renderability,
                   take heavy points for a contradicted concept or any touch of a dislike.
``novelty_heavy``  start at 65 and give the most points to an idea unlike the obvious reading
                   and unlike the other cards; take points for motifs the recent history
                   repeats.
``profile_fit``    start at 60 and score mostly how closely the card matches what the viewer
                   loves, with heavy penalties for a dislike.

The point scales of ``strict`` and ``novelty_heavy`` follow the original project's rubrics
(whose ``default`` had a point scale too; ours keeps the first wave's one-line instruction
so that configs without rubrics behave exactly as before); ``profile_fit`` is ours. A custom rubric (``{text: ...}`` or
``{file: path}`` in the config) is used as written. Every rubric line of the form
``- <axis>: +0 to +N ...`` or ``- <axis>: -A to -B ...`` names one thing to weigh and its points.
"""

from __future__ import annotations

from collections.abc import Mapping

from image_project import markers
from image_project.config.models import RubricSpec
from image_project.record.scoring import DEFAULT_PROTOCOL
from image_project.stages.scoring.protocols import protocol_of

DEFAULT_CRITERION = "for how well it blends the concepts, suits the viewer's taste and stays fresh"
"""The ``default`` rubric: the first wave's judging instruction, word for word."""

BUILTIN_RUBRIC_TEXTS: Mapping[str, str | None] = {
    "default": None,
    "strict": (
        "Start every card at 70, then adjust:\n"
        "- concepts: +0 to +25 when all the concepts are present and cohesive; -15 to -30 when "
        "one is missing or contradicted.\n"
        "- renderability: +0 to +20 for a scene an image model can render as described; -10 to "
        "-25 for impossible or muddled staging.\n"
        "- dislikes: -15, -35 or -60 by severity when the card touches one of the viewer's "
        "dislikes.\n"
        "Clamp the result to 0..100. Be harsh: most cards should land below 70."
    ),
    "novelty_heavy": (
        "Start every card at 65, then adjust:\n"
        "- concepts: +0 to +20 for how fully the card blends the concepts.\n"
        "- profile: +0 to +20 for fit with the viewer's taste.\n"
        "- novelty: +0 to +25 for an idea unlike the obvious reading and unlike the other cards.\n"
        "- renderability: +0 to +15 for a scene an image model can render.\n"
        "- repetition: -0 to -30 when the card leans on motifs the recent history repeats.\n"
        "Clamp the result to 0..100."
    ),
    "profile_fit": (
        "Start every card at 60, then adjust:\n"
        "- profile: +0 to +30 for how closely the card matches what the viewer loves and likes.\n"
        "- dislikes: -20 to -60 when the card touches one of the viewer's dislikes.\n"
        "- concepts: +0 to +10 for keeping the concepts recognisable.\n"
        "Clamp the result to 0..100."
    ),
}
"""Rubric name -> its text (``default`` has none: its criterion is in the instruction)."""


def rubric_text(rubric: RubricSpec) -> str | None:
    """The rubric's text (None for ``default``)."""
    if rubric.source == "builtin":
        return BUILTIN_RUBRIC_TEXTS[rubric.name]
    return rubric.text


def judge_system_prompt(rubric: RubricSpec, protocol: str = DEFAULT_PROTOCOL) -> str:
    """The judge's system prompt: the judging instruction of its ``protocol``
    (:mod:`.protocols`) with the rubric in it. For the ``default`` rubric and the ``list``
    protocol it is exactly the first wave's judge system prompt."""
    instruction = protocol_of(protocol).instruction
    text = rubric_text(rubric)
    if text is None:
        return instruction.format(criterion=DEFAULT_CRITERION)
    if rubric.source == "builtin" or rubric.label == "custom":
        label = rubric.label
    else:
        label = f"{rubric.label}, custom"
    header = f"{markers.RUBRIC}{label}):"
    return instruction.format(criterion="by the rubric below") + f"\n\n{header}\n{text}"
