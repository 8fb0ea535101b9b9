"""The prompt markers round-trip: the real prompt builders write them, and every reader
finds the parts of a prompt by them (``image_project.markers``).

Each test builds a real prompt and reads it back the way its readers do, through the marker
constants alone, so a reworded prompt or a changed marker fails here instead of silently
changing what the offline judges or the quality bench's world see.
"""

from __future__ import annotations

import json
import re

import pytest

from image_project import markers
from image_project.config.models import RubricSpec, SurvivorCategory
from image_project.record.scoring import CardOptions, IdeaCard, ScoreRow
from image_project.stages.scoring.hints import ProfileHints
from image_project.stages.scoring.novelty import recent_motifs
from image_project.stages.scoring.prompts import (
    card_summary,
    final_from_card,
    hints_prompt,
    idea_prompt,
    judge_prompt,
    selector_prompt,
    variant_prompt,
)
from image_project.stages.scoring.rubrics import judge_system_prompt
from image_project.stages.standard import Brief

BRIEF = Brief(
    concepts=("lighthouse", "tea ceremony", "thunderstorm"),
    preferences="Likes:\n- misty harbours\n\nDislikes:\n- clowns",
    dislikes=("clowns",),
)
HINTS = ProfileHints(adjectives=["quiet", "misty", "airy"], avoid=["no clowns"])


def card(hook: str) -> IdeaCard:
    return IdeaCard(
        hook=hook,
        narrative="A keeper pours tea while the storm rolls in over the harbour.",
        options=CardOptions(
            composition=["wide shot", "close-up"],
            palette=["slate and amber", "teal and rust"],
            medium=["gouache"],
            mood=["calm"],
        ),
        avoid=["clowns"],
    )


CARDS = {"A": card("Tea at the lamp"), "B": card("Storm kettle"), "C": card("Quiet beacon")}
TABLE = [
    ScoreRow(
        id=i,
        judge_scores={"j": 50 + n},
        median=50 + n,
        aggregate=50 + n,
        spread=0,
        n_ok=1,
        effective_score=50.0 + n,
    )
    for n, i in enumerate(CARDS)
]


def section(text: str, marker: str) -> list[str]:
    """The lines after the line that is ``marker``, up to the next blank line."""
    lines = text.split("\n")
    start = lines.index(marker) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def after(text: str, marker: str) -> str:
    """The rest of the line that starts with ``marker``."""
    (line,) = [ln for ln in text.split("\n") if ln.startswith(marker)]
    return line[len(marker) :]


def test_a_judge_prompt_reads_back_concepts_cards_history_and_order() -> None:
    history = recent_motifs(["misty harbour at dawn", "misty harbour, gulls", "a misty pier"])
    order = ("C", "A", "B")
    text = judge_prompt(order, CARDS, BRIEF, history, "raw", None)
    assert section(text, markers.CONCEPTS) == [f"- {c}" for c in BRIEF.concepts]
    assert text.split("\n").index(markers.PROFILE_AUTHORITATIVE) > 0
    shown = [json.loads(line) for line in section(text, markers.IDEA_CARDS)]
    assert [c["id"] for c in shown] == list(order)
    assert all(IdeaCard.model_validate({k: v for k, v in c.items() if k != "id"}) for c in shown)
    assert "misty" in after(text, markers.RECENT_HISTORY)
    assert after(text, markers.SCORE_EVERY).startswith("C, A, B)")


@pytest.mark.parametrize(
    ("view", "marker"),
    [
        ("raw", markers.PROFILE_AUTHORITATIVE),
        ("dislikes_only", markers.PROFILE_DISLIKES),
        ("hints", markers.PROFILE_HINTS),
    ],
)
def test_each_judge_view_of_the_person_has_its_header(view: str, marker: str) -> None:
    text = judge_prompt(("A",), CARDS, BRIEF, None, view, HINTS)  # type: ignore[arg-type]
    assert marker in text.split("\n")
    assert markers.RECENT_HISTORY not in text  # novelty off: no history line


def test_generator_prompts_read_back_concepts_direction_parent_and_directive() -> None:
    idea = idea_prompt("as a still life", BRIEF, HINTS)
    assert section(idea, markers.CONCEPTS_TO_BLEND) == [f"- {c}" for c in BRIEF.concepts]
    assert after(idea, markers.DIRECTION) == "as a still life."
    assert markers.TASTE_HINTS in idea.split("\n")
    no_hints = idea_prompt("as a still life", BRIEF, None)
    assert markers.TASTE_DISLIKES in no_hints.split("\n")
    assert re.search(
        re.escape(markers.DO_NOT_COPY_OPEN) + r"\nclowns\n" + re.escape(markers.DO_NOT_COPY_CLOSE),
        no_hints,
    )
    variant = variant_prompt(CARDS["B"], "change the palette and the mood", BRIEF, HINTS)
    assert markers.REWORK in variant.split("\n")
    assert section(variant, markers.REWORK)[0] == f"{markers.HOOK}Storm kettle"
    assert after(variant, markers.DIRECTIVE) == "change the palette and the mood."


def test_the_selector_prompt_reads_back_its_candidates_and_slots() -> None:
    text = selector_prompt(1, 2, "median", TABLE, CARDS, ("performance", "diversity"))
    rows = [json.loads(line) for line in text.split("\n") if line.startswith('{"id"')]
    assert [r["id"] for r in rows] == ["A", "B", "C"]
    assert after(text, markers.SELECTOR_SLOTS) == "performance, diversity."


def test_the_hints_request_and_the_final_prompt_keep_their_markers() -> None:
    hints = hints_prompt(BRIEF)
    inside = hints.split(markers.DO_NOT_COPY_OPEN, 1)[1].split(markers.DO_NOT_COPY_CLOSE)[0]
    assert inside.strip() == BRIEF.preferences
    assert f"{markers.HOOK}Quiet beacon" in final_from_card(BRIEF, CARDS["C"]).split("\n")
    assert card_summary(CARDS["A"]).split("\n")[0] == f"{markers.HOOK}Tea at the lamp"


def test_a_rubric_judge_system_prompt_has_its_rubric_header() -> None:
    text = judge_system_prompt(RubricSpec(name="strict"))
    (header,) = [ln for ln in text.split("\n") if ln.startswith(markers.RUBRIC)]
    assert header == f"{markers.RUBRIC}strict):"
    default = judge_system_prompt(RubricSpec(name="default"))
    assert markers.RUBRIC not in default


# --------------------------------------------------------------------------- the offline readers


def test_the_offline_judge_reads_what_the_real_judge_prompt_shows() -> None:
    from image_project.backends.offline.rubric import _judge_view, _read_rubric

    history = recent_motifs(["misty harbour at dawn", "misty harbour, gulls", "a misty pier"])
    view = _judge_view(judge_prompt(("C", "A", "B"), CARDS, BRIEF, history, "raw", None))
    assert len(view.concepts) == len(BRIEF.concepts)
    assert list(view.cards) == ["C", "A", "B"]
    assert view.likes is not None and "harbour" in view.likes
    assert any("clown" in d for d in view.dislikes)
    assert ("misty",) in view.motifs
    rubric = _read_rubric(judge_system_prompt(RubricSpec(name="strict")))
    assert rubric is not None and rubric.axes
    assert _read_rubric(judge_system_prompt(RubricSpec(name="default"))) is None


def test_the_offline_selector_fills_the_slots_the_real_selector_prompt_names() -> None:
    from image_project.backends.offline.selector import _selector_reply
    from image_project.stages.scoring.evolution import selector_output

    slots: tuple[SurvivorCategory, ...] = ("performance", "diversity")
    output = selector_output(list(CARDS), slots)
    reply = _selector_reply(output.schema, selector_prompt(1, 2, "median", TABLE, CARDS, slots))
    assert reply is not None
    answer = output.parse(reply)
    assert sorted(p.category for p in answer.selections) == sorted(slots)
