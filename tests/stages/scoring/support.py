"""What the unit tests of the scoring wing's flow parts (the panel, the score table and
record, the rounds) share: a brief, cards, a judge's answer to any protocol's request."""

from __future__ import annotations

import json

from image_project.backends.base import TextRequest
from image_project.record.scoring import CardOptions, IdeaCard
from image_project.stages.standard import Brief

SEED = 4242
BRIEF = Brief(
    concepts=("lighthouse", "tea ceremony", "thunderstorm"),
    preferences="Likes:\n- misty harbours\n\nDislikes:\n- clowns",
    dislikes=("clowns",),
)


def card(hook: str, narrative: str = "A keeper pours tea while the storm rolls in.") -> IdeaCard:
    return IdeaCard(
        hook=hook,
        narrative=narrative,
        options=CardOptions(
            composition=["wide shot", "close-up"],
            palette=["slate and amber", "teal and rust"],
            medium=["gouache"],
            mood=["calm"],
        ),
        avoid=["clowns"],
    )


CARDS = {
    "A": card("Tea at the lamp"),
    "B": card("Storm kettle", "Lightning splits the sky above a kettle on the gallery rail."),
    "C": card("Quiet beacon", "Fog swallows the beam while a cup cools on the sill."),
}
SCORES = {"A": 80, "B": 35, "C": 60}
"""What :func:`judge_answer` scores each card."""


def judge_answer(request: TextRequest) -> str:
    """A judge's answer to any protocol's request: :data:`SCORES` for the cards its schema
    asks about (with a rationale where a card's answer is an object), or the better of a
    comparison's two cards."""
    assert request.json_schema is not None
    schema = request.json_schema.schema
    if request.json_schema.name == "idea_comparison":
        return json.dumps(
            {"better": max(schema["properties"]["better"]["enum"], key=SCORES.__getitem__)}
        )
    forms = schema["properties"]["scores"]["properties"]
    return json.dumps(
        {
            "scores": {
                i: {"rationale": f"about {i}", "score": SCORES[i]}
                if form.get("type") == "object"
                else SCORES[i]
                for i, form in forms.items()
            }
        }
    )
