"""Idea cards: their schema, parsing, ids and the diversity directions of the generators.

One generator call produces one card as strict JSON::

    {"hook": "...", "narrative": "...",
     "options": {"composition": [..>=2], "palette": [..>=2], "medium": [..>=1], "mood": [..>=1]},
     "avoid": [...]}

``avoid`` may be omitted (it is required by the structured-output schema, as strict mode
demands, but may be empty). The schema sticks to keywords OpenAI's strict mode accepts
(array ``minItems`` / ``maxItems``, no string lengths); lengths are checked in code. Ids ``A, B, C, ...`` are assigned by code in declared order, so
the model never invents or duplicates one; an ``id`` key in the answer is rejected like any
other unexpected key.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from image_project.backends.base import JsonSchema
from image_project.seeding import derive_seed, rng_for
from image_project.stages.scoring.parsing import describe_validation_error, extract_json_object

__all__ = [
    "CARD_SCHEMA",
    "DIRECTIONS",
    "Candidate",
    "CardOptions",
    "IdeaCard",
    "card_ids",
    "card_text",
    "card_to_dict",
    "directions_for",
    "parse_card",
]

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=600)]
_Item = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class CardOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    composition: list[_Item] = Field(min_length=2, max_length=6)
    palette: list[_Item] = Field(min_length=2, max_length=6)
    medium: list[_Item] = Field(min_length=1, max_length=4)
    mood: list[_Item] = Field(min_length=1, max_length=4)


class IdeaCard(BaseModel):
    """A validated card. ``id`` is set by code after parsing (see :func:`parse_card`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    hook: _Text
    narrative: _Text
    options: CardOptions
    avoid: list[_Item] = Field(default_factory=list, max_length=8)


def _string_list(lo: int, hi: int) -> dict[str, Any]:
    return {
        "type": "array",
        "items": {"type": "string"},
        "minItems": lo,
        "maxItems": hi,
    }


CARD_SCHEMA = JsonSchema(
    name="idea_card",
    schema={
        "type": "object",
        "properties": {
            "hook": {"type": "string"},
            "narrative": {"type": "string"},
            "options": {
                "type": "object",
                "properties": {
                    "composition": _string_list(2, 4),
                    "palette": _string_list(2, 4),
                    "medium": _string_list(1, 3),
                    "mood": _string_list(1, 3),
                },
                "required": ["composition", "palette", "medium", "mood"],
                "additionalProperties": False,
            },
            "avoid": _string_list(0, 4),
        },
        "required": ["hook", "narrative", "options", "avoid"],
        "additionalProperties": False,
    },
    strict=True,
)


def parse_card(text: str) -> IdeaCard:
    """One card from a model answer, or ``ValueError`` saying what is wrong (for a re-ask)."""
    data = extract_json_object(text)
    try:
        return IdeaCard.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"invalid idea card: {describe_validation_error(exc)}") from exc


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


def card_to_dict(card_id: str, card: IdeaCard) -> dict[str, Any]:
    return {"id": card_id, **card.model_dump()}


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


@dataclass(frozen=True)
class Candidate:
    """A card to be generated: its id, its API seed and its diversity direction."""

    id: str
    seed: int
    direction: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "seed": self.seed, "direction": self.direction}


def directions_for(run_seed: int, ids: Sequence[str]) -> tuple[Candidate, ...]:
    """Each id's derived seed and direction. Directions are distinct while ``len(ids)`` is at
    most ``len(DIRECTIONS)`` (48) and cycle through a second shuffle beyond that."""
    order = list(DIRECTIONS)
    rng_for(run_seed, "idea_directions").shuffle(order)
    return tuple(
        Candidate(
            id=card_id,
            seed=derive_seed(run_seed, "step", "idea", card_id),
            direction=order[i % len(order)],
        )
        for i, card_id in enumerate(ids)
    )
