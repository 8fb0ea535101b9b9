"""Idea cards: the generator's output, the card ids and the diversity directions.

One generator call produces one card (:class:`~image_project.record.scoring.IdeaCard`, whose
strict JSON schema is what the server is asked for)::

    {"hook": "...", "narrative": "...",
     "options": {"composition": [2-4], "palette": [2-4], "medium": [1-3], "mood": [1-3]},
     "avoid": [0-4]}

``avoid`` is required by the schema (strict mode demands every key) but may be empty, and may
be omitted from an answer. String lengths are checked in code, not in the schema. Ids ``A, B,
C, ...`` are assigned by code in declared order, so the model never invents or duplicates one;
an ``id`` key in the answer is rejected like any other unexpected key.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from image_project.engine import JsonOutput
from image_project.record.scoring import CandidateRecord, IdeaCard
from image_project.seeding import derive_seed, rng_for

__all__ = [
    "CARD_OUTPUT",
    "DIRECTIONS",
    "card_ids",
    "card_text",
    "directions_for",
    "parse_card",
]

CARD_OUTPUT: JsonOutput[IdeaCard] = JsonOutput(IdeaCard)
"""A generator's output: one :class:`IdeaCard`."""


def parse_card(text: str) -> IdeaCard:
    """One card from a model answer, or ``ValueError`` saying what is wrong (for a re-ask)."""
    return CARD_OUTPUT.parse(text)


def card_ids(n: int) -> tuple[str, ...]:
    """``A, B, ..., Z, AA, AB, ...``: the ids of ``n`` cards, in order."""
    letters = string.ascii_uppercase
    out = []
    for i in range(n):
        label = ""
        k = i
        while True:
            label = letters[k % 26] + label
            k = k // 26 - 1
            if k < 0:
                break
        out.append(label)
    return tuple(out)


def card_text(card: IdeaCard) -> str:
    """Every word of a card as one text (for novelty statistics)."""
    o = card.options
    parts = [card.hook, card.narrative, *o.composition, *o.palette, *o.medium, *o.mood]
    return "\n".join(parts)


# -- diversity directions ---------------------------------------------------------------

# Two independent axes; each card gets a distinct (lens, register) pair from a seeded
# shuffle of all 48 pairs, so N independent calls are pushed apart instead of collapsing
# onto the single most likely idea.
_LENSES: tuple[str, ...] = (
    "an intimate close view of a small, telling detail",
    "a vast panoramic scale where figures are tiny",
    "an unexpected vantage point (from above, below or through something)",
    "a single decisive moment of motion",
    "a quiet, almost empty composition built on negative space",
    "dense, intricate detail that rewards a long look",
    "a scene told through light and shadow more than through objects",
    "a symbolic, dreamlike reading rather than a literal one",
)
_REGISTERS: tuple[str, ...] = (
    "tender",
    "playful",
    "mysterious",
    "monumental",
    "melancholic",
    "hopeful",
)
DIRECTIONS: tuple[str, ...] = tuple(
    f"{lens}; {reg} in tone" for lens in _LENSES for reg in _REGISTERS
)


def directions_for(run_seed: int, ids: Sequence[str]) -> tuple[CandidateRecord, ...]:
    """Each id's derived seed and direction (the cards are added once generated).
    Directions are distinct while ``len(ids)`` is at most ``len(DIRECTIONS)`` (48) and
    cycle through a second shuffle beyond that."""
    order = list(DIRECTIONS)
    rng_for(run_seed, "idea_directions").shuffle(order)
    return tuple(
        CandidateRecord(
            id=card_id,
            seed=derive_seed(run_seed, "step", "idea", card_id),
            direction=order[i % len(order)],
        )
        for i, card_id in enumerate(ids)
    )
